"""Helpers every operator family shares: shape and dtype checks that raise ``OpError`` with
the operator's name, numpy broadcasting over symbolic dimensions, axis normalisation, and te
placeholders made from graph types.

Messages always start with the operator's name and show shapes as ``(2, 3)`` / ``(n, 4)``:

>>> from kiln.ir.graph import TensorType
>>> broadcast_shapes("add", (2, 3), (4,))
Traceback (most recent call last):
    ...
kiln.ops.registry.OpError: add: shapes (2, 3) and (4,) do not broadcast

Symbolic dimensions: a dimension ``n`` (a tensor-IR ``Var`` or an expression of Vars) is
never assumed to be 1 at run time. Broadcasting ``n`` against 1 gives ``n``; against ``n``
(the same Var, or an expression the simplifier proves equal) gives ``n``; against anything
else (a constant > 1, another Var ``m``) it is an ``OpError``: Kiln does not guess, because
a wrong guess reads out of bounds at run time. Give equal dimensions the same Var.
"""
from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import IntImm, PrimExpr, Var, convert
from ..ir.graph import TensorType, Type
from .registry import OpError

Shape = Tuple[PrimExpr, ...]

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES
# The packed sub-byte integers (int4, uint4, int2, uint2): moved, compared and cast like any
# tensor (cast and the data-movement operators), but no arithmetic works on them directly:
# frontends cast them to a wider type first, as ONNX's own operators do.
ALL_DTYPES = ("bool",) + NUMERIC_DTYPES + dt.SUBBYTE_DTYPES


# ---- formatting -----------------------------------------------------------------------------

def dim_str(d) -> str:
    """One dimension as text: ``3``, ``n``, ``n * 4``."""
    if isinstance(d, int):
        return str(d)
    if isinstance(d, IntImm):
        return str(d.value)
    if isinstance(d, Var):
        return d.name
    try:
        from ..ir.printer import to_text
        return to_text(d)
    except Exception:  # pragma: no cover - printing must not hide the real error
        return repr(d)


def shape_str(shape) -> str:
    """A shape as numpy prints it: ``(2, 3)``, ``(4,)``, ``(n, 4)``, ``()``; ``(?)`` if unknown."""
    if shape is None:
        return "(?)"
    dims = [dim_str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def type_str(ty) -> str:
    """``float32(2, 3)`` for a TensorType; the repr of anything else."""
    if isinstance(ty, TensorType):
        return f"{ty.dtype}{shape_str(ty.shape)}"
    return repr(ty)


def error(op: str, message: str) -> OpError:
    """An ``OpError`` whose message starts with the operator's name: ``raise error("sum", ...)``."""
    return OpError(f"{op}: {message}")


# ---- arguments and attributes ---------------------------------------------------------------

def tensor_arg(op: str, ty: Type, index: int = 0, name: Optional[str] = None) -> TensorType:
    """``ty`` if it is a TensorType of known rank, else an OpError naming the argument."""
    what = name or f"argument {index}"
    if not isinstance(ty, TensorType):
        raise error(op, f"{what} must be a tensor, got {ty!r}")
    if ty.shape is None:
        raise error(op, f"{what} has unknown rank; the operator needs a known shape")
    return ty


def tensor_args(op: str, types: Sequence[Type], names: Optional[Sequence[str]] = None,
                count: Optional[int] = None) -> List[TensorType]:
    """Every argument as a TensorType of known rank (see ``tensor_arg``); ``count`` checks how
    many there are (``call`` already checks ``num_args``; this guards direct ``infer`` calls)."""
    if count is not None and len(types) != count:
        raise error(op, f"expected {count} argument(s), got {len(types)}")
    return [tensor_arg(op, t, i, names[i] if names else None) for i, t in enumerate(types)]


def get_attrs(op: str, attrs: dict, **defaults) -> dict:
    """``attrs`` with ``defaults`` filled in; an attribute the operator does not take is an
    OpError (a misspelt ``keepdim=True`` must not be ignored silently).

    >>> get_attrs("sum", {"axis": 1}, axis=None, keepdims=False)
    {'axis': 1, 'keepdims': False}
    """
    unknown = sorted(set(attrs) - set(defaults))
    if unknown:
        known = ", ".join(sorted(defaults)) or "none"
        raise error(op, f"unknown attribute(s) {', '.join(unknown)}; it takes: {known}")
    out = dict(defaults)
    out.update(attrs)
    return out


REQUIRED = object()
"""Default for ``get_attrs`` meaning "no default": read the attribute with ``require_attr``."""


def require_attr(op: str, attrs: dict, name: str):
    """``attrs[name]``; missing, ``REQUIRED`` or None is an OpError
    ``"<op>: attribute <name>= is required"``."""
    v = attrs.get(name, REQUIRED)
    if v is REQUIRED or v is None:
        raise error(op, f"attribute {name}= is required")
    return v


# ---- dtypes ---------------------------------------------------------------------------------

def check_dtype(op: str, dtype: str, allowed: Iterable[str], what: str = "input") -> str:
    """``dtype`` if it is one of ``allowed``, else an OpError listing them."""
    allowed = tuple(allowed)
    if dtype not in allowed:
        raise error(op, f"{what} dtype {dtype} is not supported; expected one of {', '.join(allowed)}")
    return dtype


def check_same_dtype(op: str, types: Sequence[TensorType], names: Optional[Sequence[str]] = None) -> str:
    """The common dtype of ``types``, else an OpError naming every dtype:
    ``add: dtypes do not match: float32 and int32``."""
    dtypes = [t.dtype for t in types]
    if len(set(dtypes)) > 1:
        if names:
            listed = ", ".join(f"{n} {d}" for n, d in zip(names, dtypes))
        else:
            listed = " and ".join(dtypes)
        raise error(op, f"dtypes do not match: {listed}")
    return dtypes[0]


# ---- dimensions and broadcasting ------------------------------------------------------------

def as_dim(d) -> PrimExpr:
    return d if isinstance(d, PrimExpr) else convert(int(d))


def const_dim(d) -> Optional[int]:
    """The value of a constant dimension, else None."""
    if isinstance(d, int):
        return d
    return d.value if isinstance(d, IntImm) else None


def dims_equal(a, b) -> Optional[bool]:
    """True if ``a == b`` provably, False if provably not, None if unknown (symbolic)."""
    a, b = as_dim(a), as_dim(b)
    if a is b:
        return True
    ca, cb = const_dim(a), const_dim(b)
    if ca is not None and cb is not None:
        return ca == cb
    try:
        from ..arith import simplify
        diff = simplify(a.astype("int64") - b.astype("int64"))
    except Exception:  # the simplifier does not know this expression
        return None
    c = const_dim(diff)
    return None if c is None else c == 0


def same_shape(a: Sequence, b: Sequence) -> bool:
    """True if the shapes provably agree dimension by dimension."""
    return len(a) == len(b) and all(dims_equal(x, y) is True for x, y in zip(a, b))


def broadcast_shapes(op: str, *shapes: Sequence) -> Shape:
    """numpy's broadcast of ``shapes`` (right-aligned; 1 stretches), with symbolic dims as the
    module docstring says. Raises ``OpError`` ``"<op>: shapes (2, 3) and (4,) do not broadcast"``.

    >>> shape_str(broadcast_shapes("add", (2, 1, 3), (4, 1)))
    '(2, 4, 3)'
    """
    shapes = [tuple(as_dim(d) for d in s) for s in shapes]
    ndim = max((len(s) for s in shapes), default=0)
    out: List[PrimExpr] = []
    for k in range(ndim):
        dim: Optional[PrimExpr] = None
        for s in shapes:
            pos = len(s) - ndim + k
            if pos < 0:
                continue
            d = s[pos]
            if dim is None or const_dim(dim) == 1:
                dim = d
                continue
            if const_dim(d) == 1:
                continue
            eq = dims_equal(dim, d)
            if eq is not True:
                listed = " and ".join(shape_str(x) for x in shapes)
                why = "" if eq is False else (
                    f" (cannot prove {dim_str(dim)} == {dim_str(d)}; symbolic dimensions broadcast "
                    "only against 1 or an equal dimension)")
                raise error(op, f"shapes {listed} do not broadcast{why}")
            if const_dim(dim) is None and const_dim(d) is not None:
                dim = d  # prefer the constant spelling
        out.append(dim)
    return tuple(out)


def broadcast_indices(indices: Sequence[PrimExpr], in_shape: Sequence, out_shape: Sequence) -> tuple:
    """Indices into an input of ``in_shape`` for the output element at ``indices`` (of
    ``out_shape``): right-aligned, and 0 along dims where the input is 1 but the output is not.
    For te computes: ``te.compute(out, lambda *i: A[broadcast_indices(i, A.shape, out)] + ...)``."""
    off = len(out_shape) - len(in_shape)
    idx = []
    for k, d in enumerate(in_shape):
        if const_dim(d) == 1 and const_dim(out_shape[off + k]) != 1:
            idx.append(IntImm(0, indices[off + k].dtype))
        else:
            idx.append(indices[off + k])
    return tuple(idx)


def normalize_axis(op: str, axis, ndim: int, shape=None, what: str = "axis") -> int:
    """``axis`` in ``[0, ndim)`` (negative counts from the end), else an OpError:
    ``sum: axis 2 is out of range for a 2-D input of shape (2, 3)``."""
    if isinstance(axis, np.integer):
        axis = int(axis)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise error(op, f"{what} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        where = f" of shape {shape_str(shape)}" if shape is not None else ""
        raise error(op, f"{what} {axis} is out of range for a {ndim}-D input{where}")
    return axis % ndim


def normalize_axes(op: str, axes, ndim: int, shape=None, what: str = "axis") -> Tuple[int, ...]:
    """``axes`` (None = all, an int, or a sequence of ints) as a sorted tuple of distinct
    non-negative axes; duplicates (also ``(1, -1)`` on 2-D) are an OpError."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (list, tuple)):
        norm = [normalize_axis(op, a, ndim, shape, what) for a in axes]
    else:
        norm = [normalize_axis(op, axes, ndim, shape, what)]
    if len(set(norm)) != len(norm):
        raise error(op, f"{what} {tuple(axes) if isinstance(axes, (list, tuple)) else axes} "
                        f"repeats an axis (input of shape {shape_str(shape) if shape is not None else ndim})")
    return tuple(sorted(norm))


def prod(dims: Iterable) -> PrimExpr:
    """The product of dimensions (simplified; constant when all are constant)."""
    out: PrimExpr = IntImm(1)
    for d in dims:
        d = as_dim(d)
        if const_dim(out) is not None and const_dim(d) is not None:
            out = IntImm(const_dim(out) * const_dim(d), d.dtype if d.dtype != "int32" else out.dtype)
        elif const_dim(out) == 1:
            out = d
        else:
            out = out * d
    return out


# ---- te helpers ----------------------------------------------------------------------------

def placeholder(ty: TensorType, name: str = "x"):
    """A te placeholder of a graph TensorType (same dims, symbolic Vars included, same dtype)."""
    from .. import te
    if not isinstance(ty, TensorType) or ty.shape is None:
        raise TypeError(f"placeholder: need a TensorType of known rank, got {ty!r}")
    return te.placeholder(ty.shape, ty.dtype, name=name)


def placeholders(types: Sequence[TensorType], names: Optional[Sequence[str]] = None) -> list:
    """One te placeholder per type, named ``names`` or ``x0, x1, ...``."""
    names = names or [f"x{i}" for i in range(len(types))]
    return [placeholder(t, n) for t, n in zip(types, names)]


def literal(value, dtype: str) -> PrimExpr:
    """A scalar constant of ``dtype`` for te expressions (``literal(0.5, "float16")``)."""
    from ..ir.expr import const
    e = dt.element(dtype)
    if dt.is_bool(e):
        return IntImm(int(bool(value)), "bool")
    if dt.is_float(e):
        return const(float(value), e)
    return const(int(value), e)


def out_type(shape, dtype: str) -> TensorType:
    return TensorType(tuple(as_dim(d) for d in shape), dtype)
