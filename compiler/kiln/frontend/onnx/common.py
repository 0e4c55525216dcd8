"""The converter table and the import context shared by the op-family modules.

A converter is ``fn(ctx, node, inputs, attrs) -> output expr or list of them``; ``inputs`` are
graph expressions (``None`` for an omitted optional input), ``attrs`` a dict of python values.
``@converter("Conv", since=11)`` registers one; the importer picks, for a model's opset, the
converter with the greatest ``since`` not above it (opset-version awareness).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ...ir.graph import Constant, GraphExpr, GraphVar, TupleGetItem, TupleType
from ...ir.expr import IntImm, PrimExpr
from ... import ops as kops


class ONNXImportError(ValueError):
    """An ONNX model Kiln cannot import; the message names the node, its op type and opset.
    ``needs_constant`` names a graph input whose value the import would need at compile time
    (a shape, axes, K...), or is None."""
    needs_constant = None


class Unsupported(Exception):
    """Raised by converters for something they do not support; the importer adds the node."""

    def __init__(self, msg, needs_constant=None):
        super().__init__(msg)
        self.needs_constant = needs_constant  # a graph input whose value would have to be known


_TABLE: Dict[str, List[Tuple[int, Callable]]] = {}


def converter(*op_types: str, since: int = 1):
    def deco(fn):
        for op in op_types:
            _TABLE.setdefault(op, []).append((since, fn))
            _TABLE[op].sort(key=lambda t: t[0])
        return fn
    return deco


def lookup(op_type: str, opset: int) -> Optional[Callable]:
    best = None
    for since, fn in _TABLE.get(op_type, ()):
        if since <= opset:
            best = fn
    return best


def supported_ops() -> List[str]:
    return sorted(_TABLE)


class Ctx:
    """What converters see: the builder wrapper with constant folding."""

    def __init__(self, fb, known: Dict[GraphVar, np.ndarray], opset: int):
        self.fb = fb
        self.known = known
        self.opset = opset
        self.used = set()
        # known symbolic values (symbolic.py): placeholder var -> object array of PrimExprs
        self.sym: Dict[GraphVar, np.ndarray] = {}
        # what the import assumed about symbolic dims: text -> (dim expression, largest value)
        # (a Slice end of 10^9 read as "to the end", a window of a fixed-size mask); the runtime
        # refuses inputs past them ("kiln.limits" attribute, checked by the VM)
        self.limits: Dict[str, tuple] = {}

    # -- values known at import time ----------------------------------------------------
    def value(self, e: Optional[GraphExpr]) -> Optional[np.ndarray]:
        if e is None:
            return None
        if isinstance(e, Constant):
            return np.asarray(e.data)
        if isinstance(e, GraphVar) and e in self.known:
            return self.known[e]
        if isinstance(e, GraphVar) and _is_empty_vector(e.ty):
            # a 1-D input of length 0 (axes, pads, scales given as an empty tensor) has one
            # possible value, which its type alone gives: known at import though a run-time input
            return np.zeros((0,), dtype=np.dtype(e.ty.dtype))
        return None

    def is_symbolic(self, e) -> bool:
        """Whether ``e`` is a known symbolic value (shape arithmetic over symbolic dims)."""
        return e is not None and e in self.sym

    def need_value(self, e, what: str) -> np.ndarray:
        v = self.value(e)
        if v is None and self.is_symbolic(e):
            from .symbolic import runtime_error
            raise runtime_error(self, e, what)
        if v is None:
            raise Unsupported(f"{what} must be a constant (an initializer, a Constant or a "
                              f"foldable shape computation)",
                              needs_constant=e.name if isinstance(e, GraphVar) else None)
        return v

    def const(self, arr, dtype=None) -> Constant:
        arr = np.asarray(arr, dtype=dtype)
        return Constant(arr)

    # -- building -----------------------------------------------------------------------
    def op(self, name: str, *args: GraphExpr, **attrs) -> GraphExpr:
        """``kiln.ops.call`` then bind; folds to a Constant when every input is known, and
        computes on symbolic values (symbolic.py) when an input is one."""
        if any(self.is_symbolic(a) for a in args):
            from .symbolic import eval_op
            return eval_op(self, name, args, attrs)
        vals = [self.value(a) for a in args]
        if all(v is not None for v in vals) and not _has_symbolic_dim(attrs):
            call = kops.call(name, *[Constant(v) for v in vals], **attrs)  # type check
            if _elements(call.ty) > FOLD_LIMIT:  # computed at run time, not in the importer
                return self.emit(name, *args, **attrs)
            ref = kops.get(name).reference
            out = ref(*[np.asarray(v) for v in vals], **attrs)
            if isinstance(out, tuple):
                return tuple(Constant(np.asarray(o, dtype=t.dtype)) for o, t in zip(out, call.ty.fields))
            return Constant(np.asarray(out, dtype=call.ty.dtype).reshape(
                [int(s.value) for s in call.ty.shape]))
        return self.emit(name, *args, **attrs)

    def emit(self, name: str, *args: GraphExpr, **attrs) -> GraphExpr:
        """``kiln.ops.call`` then bind, without folding (a call whose attributes hold
        symbolic dims, e.g. broadcasting a constant to a symbolic shape)."""
        for a in args:
            if isinstance(a, GraphVar):
                self.used.add(a)
        call = kops.call(name, *args, **attrs)
        var = self.fb.emit(call)
        if isinstance(call.ty, TupleType):
            return tuple(self.fb.emit(TupleGetItem(var, i)) for i in range(len(call.ty.fields)))
        return var


# ---- helpers ------------------------------------------------------------------------------
def _has_symbolic_dim(attrs: dict) -> bool:
    """Whether an attribute holds a symbolic dim (numpy references cannot fold those)."""
    def sym(v):
        if isinstance(v, (list, tuple)):
            return any(sym(x) for x in v)
        return isinstance(v, PrimExpr) and not isinstance(v, IntImm)
    return any(sym(v) for v in attrs.values())


def shape_of(e: GraphExpr):
    return e.ty.shape


def static_shape(e: GraphExpr, what="input"):
    s = e.ty.static_shape()
    if s is None:
        raise Unsupported(f"{what} needs a static shape, got {fmt_shape(e.ty.shape)}")
    return s


def fmt_shape(shape):
    return "(" + ", ".join(str(s.value) if isinstance(s, IntImm) else str(getattr(s, "name", s))
                           for s in shape) + ")"


def dim(s):
    """A PrimExpr dim as int if static, else the expression."""
    return int(s.value) if isinstance(s, IntImm) else s


def ndim(e: GraphExpr) -> int:
    return len(e.ty.shape)


# The most elements a constant the importer folds may have: 16 Mi (64 MiB of float32). A
# foldable op with a larger result (Expand, ConstantOfShape, Tile... of constants) is emitted
# and computed at run time instead: a corrupt or hostile model may ask for terabytes, and
# constants that large do not belong in an artifact anyway.
FOLD_LIMIT = 1 << 24


def _is_empty_vector(ty) -> bool:
    """Whether ``ty`` is a 1-D tensor type of static length 0 with a numpy dtype."""
    shape = getattr(ty, "shape", None)
    if shape is None or len(shape) != 1 or not isinstance(shape[0], IntImm) or int(shape[0].value):
        return False
    try:
        return np.dtype(ty.dtype).kind in "iuf"
    except TypeError:
        return False


def _elements(ty) -> int:
    """Elements of a tensor type with static dims (of every field of a tuple type); 0 when a
    dim is not a constant."""
    if isinstance(ty, TupleType):
        return sum(_elements(f) for f in ty.fields)
    n = 1
    for d in getattr(ty, "shape", ()):
        if not isinstance(d, IntImm):
            return 0
        n *= int(d.value)
    return n


def dtype(e: GraphExpr) -> str:
    return e.ty.dtype


ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
               9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
# The packed sub-byte integers (kiln.subbyte).
ONNX_DTYPES.update({21: "uint4", 22: "int4", 25: "uint2", 26: "int2"})
# Text: string tensors, taken only by the string operators (strings.py, docs/strings.md).
ONNX_DTYPES[8] = "string"
# The narrow floats: bfloat16 and the float8 formats (computed in float32; dtype.py).
ONNX_DTYPES.update({16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
                    20: "float8_e5m2fnuz", 23: "float4_e2m1fn", 24: "float8_e8m0fnu"})


def kiln_dtype(elem_type: int, what="") -> str:
    try:
        return ONNX_DTYPES[elem_type]
    except KeyError:
        import onnx
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else elem_type
        raise Unsupported(f"{what}dtype {name} is not supported (Kiln has "
                          f"{', '.join(sorted(set(ONNX_DTYPES.values())))})") from None


def scalar_like(ctx: Ctx, v, like: GraphExpr) -> Constant:
    from ...ir import dtype as dt
    return Constant(np.asarray(v, dtype=dt.to_numpy(like.ty.dtype)))


def norm_axis(a: int, n: int) -> int:
    return a + n if a < 0 else a
