"""What a typed binding needs of each graph function: its inputs and outputs with fixed shapes
and dtypes, and its planned arena, read from the executable (``ExecutableSpec``) alone, so the
bindings can be generated from a shipped ``model.so`` as well as from an ``Executable``.

Outputs are not listed in the executable's tables; they follow from the bytecode: the value
``RET`` returns is traced back through ``MOVE`` / ``MAKE_TUPLE`` / ``GET_ITEM`` to where it was
made (``ALLOC_OUTPUT`` with its dtype and shape, a parameter, or a constant).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

from ..executable.format import ExecutableSpec, FunctionSpec, Op, dtype_from_dl


class BindgenError(ValueError):
    """A model typed bindings cannot describe; the message names the function and what."""


@dataclass(frozen=True)
class TensorSig:
    """One input or output: a C identifier, the original name, a dtype and a fixed shape."""
    ident: str
    name: str
    dtype: str
    shape: Tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class FunctionSig:
    name: str
    inputs: Tuple[TensorSig, ...]
    outputs: Tuple[TensorSig, ...]
    tuple_output: bool          # the function returns a tuple (even of one tensor)
    arena_bytes: int


def c_ident(name: str) -> str:
    """``fc1.weight`` -> ``fc1_weight``: a C/C++/Java identifier for a parameter name."""
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else "_" + s


def _outputs(f: FunctionSpec, spec: ExecutableSpec) -> Tuple[list, bool]:
    """The returned tensors as (dtype, shape) in order, and whether the result is a tuple."""
    made: Dict[int, object] = {}     # register -> ("tensor", dtype, shape) | ("tuple", [regs])
    for k, p in enumerate(f.params):
        made[k] = ("tensor", p.dtype, tuple(p.shape))
    for ins in f.code:
        op, ops = Op(ins.opcode), [int(o) for o in ins.operands]
        if op == Op.ALLOC_OUTPUT:
            made[ops[0]] = ("tensor", dtype_from_dl(*ops[1:4]), tuple(ops[5:]))
        elif op == Op.LOAD_CONST:
            c = spec.constants[ops[1]]
            made[ops[0]] = ("tensor", str(c.dtype), tuple(c.shape))
        elif op == Op.MOVE:
            made[ops[0]] = made.get(ops[1])
        elif op == Op.MAKE_TUPLE:
            made[ops[0]] = ("tuple", [made.get(r) for r in ops[2:]])
        elif op == Op.GET_ITEM:
            src = made.get(ops[1])
            made[ops[0]] = src[1][ops[2]] if src and src[0] == "tuple" and ops[2] < len(src[1]) else None
        elif op == Op.IF:
            made[ops[0]] = None      # the taken branch decides: not described statically
        elif op == Op.RET:
            value = made.get(ops[0])
            items = value[1] if value and value[0] == "tuple" else [value]
            if any(v is None or v[0] != "tensor" for v in items):
                raise BindgenError(f"function {f.name!r}: its result is not a tensor or a flat tuple of "
                                   "tensors of known shape (e.g. it comes from an IF)")
            return [(v[1], v[2]) for v in items], value[0] == "tuple"
    raise BindgenError(f"function {f.name!r} has no RET")


def _fixed(fname: str, what: str, shape) -> Tuple[int, ...]:
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise BindgenError(f"function {fname!r}: {what} has symbolic dimensions {list(shape)}; typed "
                           "bindings need fixed shapes (compile with fixed sizes, e.g. --shape)")
    return tuple(shape)


def signatures(spec: ExecutableSpec) -> List[FunctionSig]:
    """The public graph functions of ``spec`` as typed signatures (fixed shapes only)."""
    out = []
    for f in spec.functions:
        if f.private:
            continue
        inputs = tuple(TensorSig(c_ident(p.name), p.name, p.dtype,
                                 _fixed(f.name, f"input {p.name!r}", p.shape)) for p in f.params)
        results, is_tuple = _outputs(f, spec)
        names = ["out"] if len(results) == 1 else [f"out{i}" for i in range(len(results))]
        taken = {s.ident for s in inputs}
        outputs = []
        for n, (dtype, shape) in zip(names, results):
            ident = n if n not in taken else n + "_"
            outputs.append(TensorSig(ident, n, dtype, _fixed(f.name, f"output {n!r}", shape)))
        out.append(FunctionSig(f.name, inputs, tuple(outputs), is_tuple, f.arena_size))
    return out
