"""Known symbolic values: shape arithmetic over symbolic dims, evaluated at import time.

A dynamic-axes export computes shapes at run time (``Shape -> Gather -> Concat -> Reshape``).
Kiln resolves every shape at compile time, so the importer evaluates such computations itself.
A *known symbolic value* is a small integer (or bool) tensor whose elements are tensor-IR
PrimExprs of the symbolic input dims (``N``, ``N * 12``, ``T // 2``). It is represented by a
placeholder ``GraphVar`` that is never bound in the graph, mapped in ``Ctx.sym`` to a numpy
object array of PrimExprs (int64, or bool for comparisons).

- ``Shape`` / ``Size`` produce one (``from_dims``); ``Ctx.op`` sends any op call with a
  symbolic argument to ``eval_op``, which computes the shape-arithmetic ops (take, concat,
  expand_dims, squeeze, reshape, strided_slice, broadcast_to, permute_dims, cast to ints,
  add/subtract/multiply/maximum/minimum, comparisons, logic, where) element by element and
  keeps each element simplified with ``kiln.arith`` (dims are known to be >= 0).
- Consumers (Reshape, Expand, ConstantOfShape, Tile, Slice) read it with ``dims`` as ints
  and PrimExprs, giving the graph symbolic output shapes.
- A value whose elements all simplify to constants becomes an ordinary ``Constant``, so a
  model with static shapes folds exactly as before.
- Anything that needs the value as a tensor at run time (float math on a dim, a graph
  output, an op not listed above, Range) gets it computed by a kernel from the dims
  (materialize.py); a value a converter needs at import time (an axis, a pad amount) raises
  ``Unsupported`` naming the symbolic dims and suggesting ``shape_dict``.
"""
from __future__ import annotations

import functools
import operator
from typing import List, Optional

import numpy as np

from ... import arith
from ...ir import dtype as dt
from ...ir.expr import (Cast, FloorDiv, IntImm, Max, Min, Mul, Not, PrimExpr, Select, Var,
                        _promote)
from ...ir.functor import collect
from ...ir.graph import Constant, GraphVar, TensorType
from .common import Unsupported

# Dims are sizes: the simplifier may use 0 <= d < DIM_LIMIT for every symbolic dim.
DIM_LIMIT = 2 ** 62


# ---- elements ------------------------------------------------------------------------------
def simplify(e: PrimExpr) -> PrimExpr:
    """``e`` simplified, knowing that every symbolic dim in it is non-negative."""
    if isinstance(e, IntImm):
        return e
    return arith.simplify(e, {v: (0, DIM_LIMIT) for v in set(collect(e, Var))})


def can_prove(cond: PrimExpr) -> bool:
    """True if ``cond`` holds for all non-negative values of its symbolic dims."""
    c = simplify(cond)
    return isinstance(c, IntImm) and bool(c.value)


def as_expr(v, dtype: str = "int64") -> PrimExpr:
    """A Python/numpy int or bool, or an int PrimExpr, as a PrimExpr of ``dtype``."""
    if isinstance(v, PrimExpr):
        if isinstance(v, IntImm) and v.dtype != dtype:
            return IntImm(v.value, dtype)
        return v if v.dtype == dtype else simplify(Cast(dtype, v))
    return IntImm(int(v), dtype)


def as_int_or_expr(e: PrimExpr):
    """An element as a Python int when it is constant, else the expression."""
    return int(e.value) if isinstance(e, IntImm) else e


def symbols_in(arr) -> List[str]:
    """Names of the symbolic dims the elements of ``arr`` use (sorted, for messages)."""
    names = set()
    for e in np.asarray(arr, dtype=object).reshape(-1):
        if isinstance(e, PrimExpr):
            names.update(v.name for v in collect(e, Var))
    return sorted(names)


def _obj(values, shape) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for k, v in enumerate(values):
        out[k] = v
    return out.reshape(shape)


# ---- values: constants and placeholders ---------------------------------------------------
def make(ctx, arr: np.ndarray, dtype: str):
    """The graph value for elements ``arr`` of ``dtype``: a Constant when every element is a
    constant, else a placeholder registered in ``ctx.sym``."""
    flat = [simplify(e) for e in np.asarray(arr, dtype=object).reshape(-1)]
    arr = _obj(flat, np.shape(arr))
    if all(isinstance(e, IntImm) for e in flat):
        data = np.asarray([e.value for e in flat], dtype=dt.to_numpy(dtype)).reshape(arr.shape)
        return Constant(data)
    var = GraphVar(f"sym{len(ctx.sym)}", TensorType(arr.shape, dtype))
    ctx.sym[var] = arr
    return var


def from_dims(ctx, dims, scalar: bool = False):
    """The int64 value holding ``dims`` (a shape slice, for Shape; one dim when ``scalar``)."""
    flat = [as_expr(d) for d in dims]
    return make(ctx, _obj(flat, () if scalar else (len(flat),)), "int64")


def elements(ctx, e) -> Optional[np.ndarray]:
    """The elements of ``e`` as an object array of PrimExprs: a symbolic value, or a known
    int/bool constant; None for anything else (a run-time tensor, a float constant)."""
    if e is None:
        return None
    if e in ctx.sym:
        return ctx.sym[e]
    v = ctx.value(e)
    if v is None:
        return None
    v = np.asarray(v)
    if v.dtype.kind not in "iub":
        return None
    d = "bool" if v.dtype.kind == "b" else "int64"
    return _obj([IntImm(int(x), d) for x in v.reshape(-1)], v.shape)


def dims(ctx, e, what: str) -> list:
    """A 1-D (or 0-D) shape-like value as a list of ints and PrimExprs; Unsupported if it
    is not known at import time."""
    arr = elements(ctx, e)
    if arr is None:
        ctx.need_value(e, what)  # raises the usual must-be-a-constant error
        raise Unsupported(f"{what} must be an integer tensor")
    return [as_int_or_expr(x) for x in arr.reshape(-1)]


def _show(e: PrimExpr) -> str:
    if isinstance(e, IntImm):
        return str(e.value)
    return e.name if isinstance(e, Var) else e.script()


def runtime_error(ctx, e, use: str) -> Unsupported:
    """The error for a symbolic value that ``use`` would need as a tensor at run time."""
    names = symbols_in(ctx.sym[e])
    shown = ", ".join(_show(x) for x in ctx.sym[e].reshape(-1))
    return Unsupported(f"{use} needs, as a run-time tensor, a value computed from the symbolic "
                       f"dim(s) {', '.join(names)} of the input shapes ([{shown}]); Kiln computes "
                       f"shapes at compile time only: pin the input shapes with shape_dict")


# ---- evaluating ops on symbolic values ----------------------------------------------------
def _binop(f):
    def g(a, b):
        return f(*_promote(a, b))
    return g


def _factors(e: PrimExpr):
    """``e`` as (constant, [other factors]) when it is a product."""
    if isinstance(e, IntImm):
        return e.value, []
    if isinstance(e, Mul):
        ca, fa = _factors(e.a)
        cb, fb = _factors(e.b)
        return ca * cb, fa + fb
    return 1, [e]


def _floordiv(a, b):
    """``a // b``, cancelling common factors the simplifier leaves alone
    (``(N * T * 8) // N`` is ``T * 8``)."""
    a, b = _promote(a, b)
    q = simplify(a // b)
    if not isinstance(q, FloorDiv):
        return q
    (ca, fa), (cb, fb) = _factors(simplify(a)), _factors(simplify(b))
    if cb == 0 or ca % cb:
        return q
    rest = list(fa)
    for f in fb:
        hit = next((k for k, g in enumerate(rest) if can_prove(g == f)), None)
        if hit is None:
            return q
        del rest[hit]
    out = IntImm(ca // cb, a.dtype)
    for f in rest:
        out = out * f
    return simplify(out)


def _truncdiv(a, b):
    """ONNX integer Div: rounds toward zero (floor division when the signs agree)."""
    a, b = _promote(a, b)
    q = _floordiv(a, b)
    if can_prove(a >= 0) and can_prove(b > 0):
        return q
    exact = (a % b) == 0
    same_sign = (a < 0) == (b < 0)
    return Select(exact | same_sign, q, q + 1)


_BINARY = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
           "maximum": _binop(Max), "minimum": _binop(Min), "floor_divide": _floordiv,
           "trunc_divide": _truncdiv, "equal": operator.eq, "not_equal": operator.ne,
           "less": operator.lt, "greater": operator.gt, "less_equal": operator.le,
           "greater_equal": operator.ge, "logical_and": operator.and_,
           "logical_or": operator.or_}
_COMPARE = {"equal", "not_equal", "less", "greater", "less_equal", "greater_equal",
            "logical_and", "logical_or"}
_UNARY = {"neg": lambda a: -a, "abs": lambda a: Max(a, -a), "logical_not": Not}


def _elementwise(f, arrays) -> np.ndarray:
    """``f`` applied element by element after numpy broadcasting of object arrays."""
    bs = np.broadcast_arrays(*arrays)
    flat = [f(*xs) for xs in zip(*(b.reshape(-1) for b in bs))]
    return _obj(flat, bs[0].shape)


def _as_array(r) -> np.ndarray:
    """numpy returns a bare element for a 0-D result of an object array; wrap it back."""
    if isinstance(r, np.ndarray):
        return r
    out = np.empty((), dtype=object)
    out[()] = r
    return out


def _structural(name: str, vals, attrs) -> Optional[np.ndarray]:
    """Data-movement ops, computed by numpy on the object arrays; None if not one of them."""
    x = vals[0]
    if name == "take":
        idx = vals[1]
        if any(not isinstance(i, IntImm) for i in idx.reshape(-1)):
            return None
        ints = np.asarray([i.value for i in idx.reshape(-1)], np.int64).reshape(idx.shape)
        return _as_array(np.take(x, ints, axis=attrs.get("axis", 0)))
    if name == "concat":
        return np.concatenate(vals, axis=attrs.get("axis", 0))
    if name == "expand_dims":
        return np.expand_dims(x, attrs["axis"])
    if name == "squeeze":
        ax = attrs.get("axis")
        return _as_array(np.squeeze(x, None if ax is None else tuple(np.atleast_1d(ax).tolist())))
    if name == "permute_dims":
        return np.transpose(x, attrs.get("axes"))
    if name in ("reshape", "broadcast_to"):
        shape = attrs["shape"]
        if not all(isinstance(d, (int, np.integer)) for d in shape):
            return None
        f = np.reshape if name == "reshape" else np.broadcast_to
        return np.array(f(x, tuple(int(d) for d in shape)), dtype=object)
    if name == "strided_slice":
        return _slice(x, attrs)
    if name in _REDUCE:
        return _reduce(x, attrs.get("axis"), attrs.get("keepdims", False), _REDUCE[name])
    return None


_REDUCE = {"sum": operator.add, "prod": operator.mul, "max": _binop(Max), "min": _binop(Min)}


def _reduce(x, axis, keep: bool, f) -> np.ndarray:
    """Reduce ``x`` over ``axis`` (None: all; an int or a tuple) with the binary ``f``."""
    axes = tuple(range(x.ndim)) if axis is None else tuple(
        a % x.ndim for a in np.atleast_1d(axis).tolist())
    rest = [a for a in range(x.ndim) if a not in axes]
    rows = np.transpose(x, rest + list(axes)).reshape(
        [x.shape[a] for a in rest] + [-1])
    if rows.shape[-1] == 0:
        return None  # an empty reduction: the identity is the op's business
    flat = [functools.reduce(f, row) for row in rows.reshape(-1, rows.shape[-1])]
    shape = [1 if a in axes else x.shape[a] for a in range(x.ndim)] if keep else \
        [x.shape[a] for a in rest]
    return _obj(flat, shape)


def _slice(x, attrs) -> np.ndarray:
    begin, end = attrs["begin"], attrs["end"]
    strides = attrs.get("strides") or (1,) * len(begin)
    axes = attrs.get("axes") or tuple(range(len(begin)))
    idx = [slice(None)] * x.ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        idx[a] = slice(int(b), int(e), int(s))
    return x[tuple(idx)]


def _cast(arg, x, to: str):
    """Cast of a symbolic value: int widths keep the dims; bool compares with 0."""
    frm = arg.ty.dtype
    if dt.is_float(to):
        return None
    if dt.is_bool(to):
        return _elementwise(lambda a: a != 0, [x]) if not dt.is_bool(frm) else x
    if dt.is_bool(frm):
        return _elementwise(lambda a: Select(a, IntImm(1, "int64"), IntImm(0, "int64")), [x])
    return x


def eval_op(ctx, name: str, args, attrs: dict):
    """``Ctx.op`` for a call with at least one symbolic argument: the result as a symbolic
    value (or a Constant); an op that is not shape arithmetic runs on the values computed
    at run time (materialize.py)."""
    vals = [elements(ctx, a) for a in args]
    out, dtype = None, args[0].ty.dtype if args else "int64"
    if all(v is not None for v in vals):
        if name in _BINARY and len(vals) == 2:
            out = _elementwise(_BINARY[name], vals)
            dtype = "bool" if name in _COMPARE else dtype
        elif name in _UNARY and len(vals) == 1:
            out = _elementwise(_UNARY[name], vals)
        elif name == "where" and len(vals) == 3:
            out = _elementwise(lambda c, a, b: Select(c, *_promote(a, b)), vals)
            dtype = args[1].ty.dtype
        elif name == "cast":
            dtype = attrs["dtype"]
            out = _cast(args[0], vals[0], dtype)
        else:
            out = _structural(name, vals, attrs)
    if out is None:
        # Not shape arithmetic Kiln does at import time: compute the symbolic inputs at run
        # time (materialize.py) and call the op on them like on any tensor.
        from .materialize import materialize
        return ctx.op(name, *[materialize(ctx, a) for a in args], **attrs)
    return make(ctx, out, dtype)


# ---- consumers: shapes for Reshape, Expand, Tile, Slice ------------------------------------
def _prod(ds) -> PrimExpr:
    out = IntImm(1, "int64")
    for d in ds:
        out = out * as_expr(d)
    return simplify(out)


def _same_dim(a, b) -> bool:
    """Whether dims ``a`` and ``b`` (ints or PrimExprs) are provably equal."""
    return can_prove(as_expr(a) == as_expr(b))


def reshape_target(in_shape, target: list, allowzero: bool) -> list:
    """ONNX Reshape's target with its 0s (copy the input dim, unless ``allowzero``) resolved,
    and its -1 resolved when other entries are symbolic and the element counts divide
    provably (kiln's reshape infers the -1 only by cancelling whole factors)."""
    from .common import fmt_shape
    out = []
    for i, s in enumerate(target):
        # (a symbolic entry is taken as a size even if it could be 0 at run time: dims from
        # Shape are sizes, and a 0 there would make ONNX copy the input dim instead)
        if isinstance(s, int) and s == 0 and not allowzero:
            if i >= len(in_shape):
                raise Unsupported(f"shape {target}: 0 at position {i} copies a dim the input "
                                  f"{fmt_shape(in_shape)} does not have")
            s = as_int_or_expr(in_shape[i])
        elif not isinstance(s, int) and i < len(in_shape) and _same_dim(s, in_shape[i]):
            s = as_int_or_expr(in_shape[i])  # the input's own dim expression: shapes match
        out.append(s)
    holes = [i for i, s in enumerate(out) if isinstance(s, int) and s == -1]
    if len(holes) == 1 and not all(isinstance(s, int) for s in out):
        known = _prod(s for i, s in enumerate(out) if i != holes[0])
        total = _prod(in_shape)
        inferred = _floordiv(total, known)
        if can_prove(inferred * known == total):
            out[holes[0]] = as_int_or_expr(inferred)
    return out


def broadcast_dims(x_shape, target: list, what: str) -> list:
    """ONNX Expand's output shape: ``x_shape`` and ``target`` broadcast together (either side
    may be 1), with symbolic dims kept when they are provably equal."""
    from .common import fmt_shape
    n = max(len(x_shape), len(target))
    xs = [1] * (n - len(x_shape)) + [as_int_or_expr(d) for d in x_shape]
    ts = [1] * (n - len(target)) + list(target)
    out = []
    for a, b in zip(xs, ts):
        if isinstance(b, int) and b == 1:
            out.append(a)
        elif (isinstance(a, int) and a == 1) or _same_dim(a, b):
            out.append(b if isinstance(a, int) else a)
        else:
            raise Unsupported(f"{what}: shape {fmt_shape(x_shape)} does not provably broadcast "
                              f"to [{', '.join(str(t) for t in target)}]")
    return out


def index_from_end(ctx, idx, dim):
    """Gather indices ``idx`` (a symbolic value) into an axis of size ``dim`` as a Constant
    -1 where they are ``dim - 1``, else ``idx``. (``dim - c`` for a larger c would differ
    from ``-c`` when the dim is smaller than c: the first wraps once, the second is out of
    range.)"""
    out = []
    for e in ctx.sym[idx].reshape(-1):
        off = simplify(e - as_expr(dim))
        if not (isinstance(off, IntImm) and off.value == -1):
            return idx
        out.append(off)
    return make(ctx, _obj(out, ctx.sym[idx].shape), idx.ty.dtype)


def slice_bounds(dim, begin, end, step: int):
    """Constant bounds for slicing a dim of size ``dim`` when ``begin``/``end`` are symbolic:
    returns ``(begin, end)`` as ints when they provably select the whole dim (the common
    ``x[:, :T]`` with ``T = x.shape[1]``), else None."""
    if step != 1:
        return None
    b, e, d = as_expr(begin), as_expr(end), as_expr(dim)
    if can_prove(b == 0) or can_prove(b + d <= 0):
        if can_prove(e >= d):
            return 0, 2 ** 63 - 1
    return None
