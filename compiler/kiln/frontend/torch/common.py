"""The converter table, the import context and small helpers shared by the op families.

A converter is ``fn(ctx, node, args, kwargs) -> value``: ``args``/``kwargs`` are the FX node's
arguments with every FX node replaced by what it imported as (a graph expression for a tensor,
an int or a PrimExpr for a SymInt, a tuple for a multi-output op); everything else (numbers,
dtypes, lists) is as torch.export wrote it. ``@converter("aten.add")`` registers one for every
overload of an operator, ``@converter("aten.add.Tensor")`` for one overload (it wins).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import numpy as np

from ... import ops as kops
from ...ir import dtype as dt
from ...ir.expr import IntImm, PrimExpr
from ...ir.graph import Constant, GraphExpr, GraphVar, TupleGetItem, TupleType
from .errors import Unsupported

_TABLE: Dict[str, Callable] = {}


def converter(*names: str):
    """Register ``fn`` for the ATen operators (``"aten.relu"``) or overloads
    (``"aten.add.Tensor"``) named."""
    def deco(fn):
        for n in names:
            if n in _TABLE:
                raise ValueError(f"torch converter for {n!r} registered twice")
            _TABLE[n] = fn
        return fn
    return deco


def lookup(target) -> Optional[Callable]:
    """The converter of an FX call target (an OpOverload), by overload then by operator."""
    name = str(target)
    if name in _TABLE:
        return _TABLE[name]
    packet = getattr(target, "overloadpacket", None)
    return _TABLE.get(str(packet)) if packet is not None else None


def supported_ops() -> List[str]:
    """The ATen operators and overloads the importer converts."""
    return sorted(_TABLE)


class NotComputed:
    """A secondary output Kiln does not compute (max-pool indices, layer-norm statistics):
    using it is an error naming it; leaving it unused is fine."""

    def __init__(self, what: str):
        self.what = what


TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.float64": "float64",
                "torch.int8": "int8", "torch.int16": "int16", "torch.int32": "int32",
                "torch.int64": "int64", "torch.uint8": "uint8", "torch.bool": "bool"}


def kiln_dtype(torch_dtype) -> str:
    """The Kiln dtype of a ``torch.dtype``; ``Unsupported`` naming it when Kiln has none."""
    try:
        return TORCH_DTYPES[str(torch_dtype)]
    except KeyError:
        raise Unsupported(f"dtype {torch_dtype} is not supported (Kiln has "
                          f"{', '.join(sorted(set(TORCH_DTYPES.values())))})") from None


class Ctx:
    """What converters see: the function builder, the symbolic dims, and the FX node being
    converted (its ``meta['val']`` tells the output dtype and shape torch expects)."""

    def __init__(self, fb, witnesses):
        self.fb = fb
        self.witnesses = witnesses     # user inputs, whose shapes carry the symbolic dims
        self.node = None
        self.transposed: Dict[GraphVar, GraphExpr] = {}   # permute(w, [1, 0]) -> w, for linear
        self.symbols = None            # the program's SymbolTable (symbols.py)
        self.flattened: Dict[GraphVar, GraphExpr] = {}    # reshape(x, (-1, d)) -> x, for mm
        self.weights: Dict[GraphVar, np.ndarray] = {}     # parameters and buffers bound as constants

    def value(self, x) -> Optional[np.ndarray]:
        """What ``x`` holds when the import knows it (a constant, or a parameter or buffer that
        will be bound as one), else None."""
        if isinstance(x, Constant):
            return np.asarray(x.data)
        return self.weights.get(x) if isinstance(x, GraphVar) else None

    def fix_data_sizes(self, result):
        """Give torch's data-dependent sizes (u0) in this node's output the values of
        ``result``'s static shape, for the nodes after it."""
        for t, k in zip(self.node.meta["val"].shape, result.ty.shape):
            expr = getattr(getattr(t, "node", None), "expr", None)
            if expr is not None and expr.is_Symbol and isinstance(k, IntImm):
                self.symbols.fixed[expr] = int(k.value)

    # -- the node being converted ------------------------------------------------------------
    def out_size(self, axis: int):
        """The size torch recorded for the output's ``axis``: an int or a PrimExpr."""
        d = self.node.meta["val"].shape[axis]
        return int(d) if isinstance(d, int) else self.symbols.expr(d.node.expr)

    def out_dtype(self, index: Optional[int] = None) -> str:
        val = self.node.meta.get("val")
        if index is not None:
            val = val[index]
        if val is None or not hasattr(val, "dtype"):
            raise Unsupported("torch.export recorded no output tensor for this node")
        return kiln_dtype(val.dtype)

    # -- building ----------------------------------------------------------------------------
    def op(self, name: str, *args: GraphExpr, **attrs):
        """``kiln.ops.call`` then bind; folds to a Constant when every input is a constant."""
        if args and all(isinstance(a, Constant) for a in args) and not _symbolic(attrs):
            ref = kops.get(name).reference
            call = kops.call(name, *args, **attrs)      # type check
            out = ref(*[np.asarray(a.data) for a in args], **attrs)
            if isinstance(out, tuple):
                return tuple(Constant(np.asarray(o, dtype=dt.to_numpy(t.dtype))) for o, t in zip(out, call.ty.fields))
            shape = [int(s.value) for s in call.ty.shape]
            return Constant(np.asarray(out, dtype=dt.to_numpy(call.ty.dtype)).reshape(shape))
        call = kops.call(name, *args, **attrs)
        var = self.fb.emit(call)
        if isinstance(call.ty, TupleType):
            return tuple(self.fb.emit(TupleGetItem(var, i)) for i in range(len(call.ty.fields)))
        return var

    def const(self, value, dtype: str) -> Constant:
        return Constant(np.asarray(value, dtype=dt.to_numpy(dtype)))

    def witnesses_of(self, *exprs) -> list:
        """The user inputs whose shapes carry the symbolic dims ``exprs`` use (what the
        ``arange``/``shape_values`` operators bind them from)."""
        from ...ir.expr import Var
        from ...ir.functor import collect
        need = {v for e in exprs if isinstance(e, PrimExpr) for v in collect(e, Var)}
        return [w for w in self.witnesses if need & {d for d in w.ty.shape if isinstance(d, Var)}]

    def size(self, v, dtype: str = "int64") -> GraphExpr:
        """A size (an int or a PrimExpr of symbolic dims) as a 0-d tensor."""
        if not isinstance(v, PrimExpr) or isinstance(v, IntImm):
            return self.const(int(getattr(v, "value", v)), dtype)
        return self.op("shape_values", *self.witnesses_of(v), values=(v,), shape=(), dtype=dtype)

    def iota(self, n, dtype: str = "int64") -> GraphExpr:
        """0, 1, ..., n - 1 (n an int or a PrimExpr of symbolic dims)."""
        if not isinstance(n, PrimExpr) or isinstance(n, IntImm):
            return self.const(np.arange(int(getattr(n, "value", n))), dtype)
        return self.op("arange", *self.witnesses_of(n), start=0, step=1, length=n, dtype=dtype)

    def cast(self, x: GraphExpr, dtype: str) -> GraphExpr:
        return x if x.ty.dtype == dtype else self.op("cast", x, dtype=dtype)

    def tensor(self, v, dtype: str) -> GraphExpr:
        """``v`` (a graph expression or a Python number) as a tensor of ``dtype``."""
        if isinstance(v, GraphExpr):
            return self.cast(v, dtype)
        if isinstance(v, PrimExpr):
            if isinstance(v, IntImm):
                return self.const(v.value, dtype)
            raise Unsupported(f"a symbolic size ({v}) used as a tensor value is not supported")
        return self.const(v, dtype)


def _symbolic(attrs: dict) -> bool:
    def sym(v):
        if isinstance(v, (list, tuple)):
            return any(sym(x) for x in v)
        return isinstance(v, PrimExpr) and not isinstance(v, IntImm)
    return any(sym(v) for v in attrs.values())


# ---- helpers -----------------------------------------------------------------------------
def ndim(x: GraphExpr) -> int:
    return len(x.ty.shape)


def dim(s):
    """A shape entry as an int when static, else the PrimExpr."""
    return int(s.value) if isinstance(s, IntImm) else s


def shape(x: GraphExpr) -> list:
    return [dim(s) for s in x.ty.shape]


def norm_axis(a: int, n: int) -> int:
    return a + n if a < 0 else a


def is_static(v) -> bool:
    return isinstance(v, int)


def sizes(values) -> list:
    """A list of sizes from torch (ints, SymInts imported as PrimExprs) as ints where static."""
    return [dim(v) if isinstance(v, PrimExpr) else int(v) for v in values]


def bind(node, args, kwargs) -> dict:
    """The arguments of an ATen call by their schema names, defaults filled in."""
    out = {}
    for i, a in enumerate(node.target._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out
