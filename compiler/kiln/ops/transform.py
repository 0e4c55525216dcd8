"""Data-movement operators: reshape, permute_dims, concat, split, strided_slice, take,
broadcast_to, squeeze, expand_dims, flatten, topk (pad is in ``pad.py``).

Each operator has its shape rule (``_infer_*``), its te definition (``_compute_*``, or a
hand-written PrimFunc for ``topk``) and its numpy reference (``_ref_*``) side by side, and
registers them at the bottom of its section. Semantics are numpy's (ONNX's where they differ,
as said per operator).

Loads in te are never out of bounds, not even in an untaken ``te.if_then_else`` branch:
codegen lowers a Select by evaluating both sides, so where a branch may be out of range
(concat, pad, take) its indices are clamped into the buffer.

>>> from kiln.ir.graph import GraphVar, TensorType
>>> x = GraphVar("x", TensorType((2, 3, 4), "float32"))
>>> call("reshape", x, shape=(-1, 4)).ty.static_shape()          # doctest: +SKIP
(6, 4)
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .. import te
from ..ir import dtype as dt
from ..ir.expr import (And, Buffer, BufferLoad, IntImm, Max, Min, Mul, Or, PrimExpr, Range, Select,
                       Var, _promote, conjunction)
from ..ir.function import PrimFunc, root_realize
from ..ir.graph import TensorType, TupleType
from ..ir.stmt import (Block, BlockRealize, BufferRegion, BufferStore, For, IfThenElse, IterVar, seq)
from .common import (REQUIRED, as_dim, broadcast_indices, const_dim, dim_str, dims_equal, error,
                     get_attrs, literal, normalize_axes, normalize_axis, out_type, prod,
                     require_attr, shape_str, tensor_args)
from .registry import register

INT_MAX = 2 ** 31 - 1


# ---- small shared helpers ------------------------------------------------------------------

def _ints(op: str, name: str, value, length: Optional[int] = None) -> Tuple[int, ...]:
    """An int or a sequence of ints as a tuple of Python ints (``length`` checked if given)."""
    seq_ = value if isinstance(value, (list, tuple)) else (value,)
    out = []
    for v in seq_:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer, IntImm)):
            raise error(op, f"{name}= must be an int or a sequence of ints, got {value!r}")
        out.append(int(v.value if isinstance(v, IntImm) else v))
    if length is not None and len(out) != length:
        raise error(op, f"{name}= needs {length} value(s), got {len(out)}: {tuple(out)}")
    return tuple(out)


def _min(a, b):
    return Min(*_promote(a, b))


def _max(a, b):
    return Max(*_promote(a, b))


def clamp(e, lo, hi):
    """``min(max(e, lo), hi)``: keeps an index inside a buffer (see the module docstring)."""
    return _min(_max(e, lo), hi)


def last_index(d):
    """``d - 1``, folded when ``d`` is a constant."""
    c = const_dim(d)
    return IntImm(c - 1, as_dim(d).dtype) if c is not None else as_dim(d) - 1


def _and(conds):
    conds = [c for c in conds if c is not None]
    return conjunction(conds) if conds else None


def _linear_index(indices, shape):
    """The row-major flat index of ``indices`` in ``shape``."""
    flat = None
    for i, d in zip(indices, shape):
        flat = i if flat is None else flat * as_dim(d) + i
    return flat if flat is not None else IntImm(0)


def _unravel(flat, shape):
    """Indices of the flat index ``flat`` in ``shape`` (row-major)."""
    out = []
    rest = flat
    for k in range(len(shape) - 1, -1, -1):
        d = as_dim(shape[k])
        if k == 0:
            out.append(rest)
        elif const_dim(d) == 1:
            out.append(IntImm(0, flat.dtype))
        else:
            out.append(rest % d)
            rest = rest // d
    return tuple(reversed(out))


def reshape_indices(indices, in_shape, out_shape):
    """Input indices for the output element ``indices`` of a reshape from ``in_shape`` to
    ``out_shape``. A common leading prefix of equal dimensions keeps its indices as they are."""
    p = 0
    while p < min(len(in_shape), len(out_shape)) and dims_equal(in_shape[p], out_shape[p]) is True:
        p += 1
    if p == len(in_shape) == len(out_shape):
        return tuple(indices)
    flat = _linear_index(indices[p:], out_shape[p:])
    return tuple(indices[:p]) + _unravel(flat, in_shape[p:])


# ---- reshape -------------------------------------------------------------------------------

def _factors(d):
    """``d`` as (constant, [symbolic factors]) when it is a product; opaque terms are factors."""
    d = as_dim(d)
    c = const_dim(d)
    if c is not None:
        return c, []
    if isinstance(d, Mul):
        ca, fa = _factors(d.a)
        cb, fb = _factors(d.b)
        return ca * cb, fa + fb
    return 1, [d]


def _cancel(num: list, den: list) -> Optional[list]:
    """``num`` without one factor equal to each of ``den``'s, or None if some is missing."""
    rest = list(num)
    for f in den:
        for k, g in enumerate(rest):
            if dims_equal(f, g) is True:
                del rest[k]
                break
        else:
            return None
    return rest


def _target_dims(op: str, shape) -> list:
    if not isinstance(shape, (list, tuple)):
        shape = (shape,)
    out = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)):
            raise error(op, f"shape entries must be ints or dimension expressions, got {shape!r}")
        if isinstance(d, (int, np.integer)):
            out.append(int(d))
        elif isinstance(d, PrimExpr) and dt.is_int(d.dtype):
            out.append(int(d.value) if isinstance(d, IntImm) else d)
        else:
            raise error(op, f"shape entries must be ints or dimension expressions, got {shape!r}")
    return out


def reshape_shape(op: str, in_shape, shape) -> tuple:
    """The shape ``in_shape`` reshapes to under target ``shape`` (ints, at most one -1, or
    symbolic dimensions), as PrimExprs; OpError if the element counts cannot match."""
    target = _target_dims(op, shape)

    def fail(why=""):
        return error(op, f"cannot reshape {shape_str(in_shape)} to {shape_str(target)}{why}")
    holes = [k for k, d in enumerate(target) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise fail(" (only one dimension may be -1)")
    if any(isinstance(d, int) and d < -1 for d in target):
        raise fail(" (dimensions must be >= 0, or -1 for the inferred one)")
    tc, tf = 1, []
    for d in target:
        if not (isinstance(d, int) and d == -1):
            c, f = _factors(d)
            tc, tf = tc * c, tf + f
    ic, if_ = 1, []
    for d in in_shape:
        c, f = _factors(d)
        ic, if_ = ic * c, if_ + f
    if holes:
        rest = _cancel(if_, tf) if ic != 0 else []
        if tc == 0 or rest is None or ic % tc != 0:
            why = (" (the -1 is ambiguous when another dimension is 0)" if tc == 0 else
                   " (cannot infer the -1 dimension from these symbolic dimensions)" if tf or if_
                   else "")
            raise fail(why)
        inferred = prod([ic // tc] + rest)
        dims = [inferred if k == holes[0] else as_dim(d) for k, d in enumerate(target)]
        return tuple(dims)
    dims = tuple(as_dim(d) for d in target)
    if ic == 0 or tc == 0:
        ok = ic == tc
    else:
        rest = _cancel(if_, tf)
        ok = (ic == tc and rest is not None and not rest) or dims_equal(prod(in_shape), prod(dims)) is True
    if not ok:
        sym = bool(if_ or tf)
        raise fail(" (cannot prove the element counts equal)" if sym else " (the element counts differ)")
    return dims


def _infer_reshape(types, attrs):
    (x,) = tensor_args("reshape", types, count=1)
    a = get_attrs("reshape", attrs, shape=REQUIRED)
    shape = require_attr("reshape", a, "shape")
    return out_type(reshape_shape("reshape", x.shape, shape), x.dtype)


def _compute_reshape(args, attrs):
    (x,) = args
    out_shape = reshape_shape("reshape", x.shape, attrs["shape"])
    return te.compute(out_shape, lambda *i: x[reshape_indices(i, x.shape, out_shape)], name="reshape")


def _ref_reshape(x, shape):
    return np.reshape(x, tuple(int(d) for d in shape))


register("reshape", infer=_infer_reshape, compute=_compute_reshape, reference=_ref_reshape,
         pattern="injective", num_args=1,
         doc="reshape(x, shape): numpy reshape. One entry may be -1 (inferred, also through "
             "symbolic dimensions: (n, 3, 4) -> (-1, 12) is (n, 12)); 0 is a zero-size "
             "dimension as in numpy, NOT ONNX's copy-the-input-dimension (frontends resolve "
             "ONNX's allowzero=0 zeros before calling). Entries may be symbolic dimensions.")


# ---- permute_dims --------------------------------------------------------------------------

def _perm(op, x, axes):
    if axes is None:
        return tuple(range(x.ndim - 1, -1, -1))
    axes = _ints(op, "axes", axes)
    norm = tuple(normalize_axis(op, a, x.ndim, x.shape, "axes entry") for a in axes)
    if sorted(norm) != list(range(x.ndim)):
        raise error(op, f"axes {axes} is not a permutation of the {x.ndim} axes of {shape_str(x.shape)}")
    return norm


def _infer_permute_dims(types, attrs):
    (x,) = tensor_args("permute_dims", types, count=1)
    a = get_attrs("permute_dims", attrs, axes=None)
    perm = _perm("permute_dims", x, a["axes"])
    return out_type([x.shape[p] for p in perm], x.dtype)


def _compute_permute_dims(args, attrs):
    (x,) = args
    perm = _perm("permute_dims", TensorType(x.shape, x.dtype), attrs.get("axes"))

    def f(*i):
        idx = [None] * len(perm)
        for d, p in enumerate(perm):
            idx[p] = i[d]
        return x[tuple(idx)]
    return te.compute([x.shape[p] for p in perm], f, name="permute_dims")


def _ref_permute_dims(x, axes=None):
    return np.transpose(x, None if axes is None else tuple(axes))


register("permute_dims", infer=_infer_permute_dims, compute=_compute_permute_dims,
         reference=_ref_permute_dims, pattern="injective", num_args=1,
         doc="permute_dims(x, axes=None): numpy transpose; axes=None reverses the axes, "
             "negative entries count from the end.")


# ---- concat --------------------------------------------------------------------------------

def _concat_axis(op, xs, axis):
    first = xs[0]
    axis = normalize_axis(op, axis, first.ndim, first.shape)
    for k, t in enumerate(xs):
        if t.ndim != first.ndim or t.dtype != first.dtype:
            raise error(op, f"input {k} {t.dtype}{shape_str(t.shape)} does not match input 0 "
                            f"{first.dtype}{shape_str(first.shape)} (same rank and dtype needed)")
        for d in range(first.ndim):
            if d != axis and dims_equal(t.shape[d], first.shape[d]) is not True:
                shapes = ", ".join(shape_str(s.shape) for s in xs)
                raise error(op, f"shapes {shapes} differ outside axis {axis} (dimension {d}: "
                                f"{dim_str(first.shape[d])} vs {dim_str(t.shape[d])})")
    return axis


def _infer_concat(types, attrs):
    if not types:
        raise error("concat", "needs at least one input")
    xs = tensor_args("concat", types)
    a = get_attrs("concat", attrs, axis=0)
    if xs[0].ndim == 0:
        raise error("concat", "cannot concatenate 0-d tensors")
    axis = _concat_axis("concat", xs, a["axis"])
    shape = list(xs[0].shape)
    total = as_dim(0)
    for t in xs:
        total = _sum_dims(total, t.shape[axis])
    shape[axis] = total
    return out_type(shape, xs[0].dtype)


def _sum_dims(a, b):
    ca, cb = const_dim(a), const_dim(b)
    if ca is not None and cb is not None:
        return IntImm(ca + cb)
    if ca == 0:
        return as_dim(b)
    if cb == 0:
        return as_dim(a)
    from ..arith import simplify
    return simplify(as_dim(a) + as_dim(b))


def _compute_concat(args, attrs):
    xs = list(args)
    types = [TensorType(x.shape, x.dtype) for x in xs]
    axis = _concat_axis("concat", types, attrs.get("axis", 0))
    out_shape = list(_infer_concat(types, dict(attrs)).shape)
    offsets, off = [], as_dim(0)
    for x in xs:
        offsets.append(off)
        off = _sum_dims(off, x.shape[axis])
    parts = [(x, o) for x, o in zip(xs, offsets) if const_dim(x.shape[axis]) != 0]
    if not parts:
        parts = [(xs[0], offsets[0])]

    def f(*i):
        pos = i[axis]

        def load(k):
            x, o = parts[k]
            rel = pos - o if const_dim(o) != 0 else pos
            # Clamp into x: the Select evaluates every branch (module docstring).
            if k > 0:
                rel = _max(rel, 0)
            if k < len(parts) - 1:
                rel = _min(rel, last_index(x.shape[axis]))
            return x[tuple(rel if d == axis else i[d] for d in range(len(i)))]
        expr = load(len(parts) - 1)
        for k in range(len(parts) - 2, -1, -1):
            expr = Select(pos < parts[k + 1][1], load(k), expr)
        return expr
    return te.compute(out_shape, f, name="concat")


def _ref_concat(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


register("concat", infer=_infer_concat, compute=_compute_concat, reference=_ref_concat,
         pattern="injective", num_args=None,
         doc="concat(*xs, axis=0): numpy concatenate of one or more tensors of one dtype and "
             "rank whose shapes agree outside ``axis``.")


# ---- split ---------------------------------------------------------------------------------

def _split_bounds(op, x, indices_or_sections, axis):
    """[(start, length)] of each piece along ``axis`` (PrimExprs)."""
    dim = x.shape[axis]
    cd = const_dim(dim)
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(indices_or_sections, bool):
        n = int(indices_or_sections)
        if n <= 0:
            raise error(op, f"sections must be positive, got {n}")
        if cd is not None:
            if cd % n:
                raise error(op, f"dimension {axis} of {shape_str(x.shape)} ({cd}) does not split "
                                f"into {n} equal sections")
            return [(IntImm(k * (cd // n)), IntImm(cd // n)) for k in range(n)]
        c, f = _factors(dim)
        if c % n:
            raise error(op, f"cannot prove that dimension {axis} of {shape_str(x.shape)} "
                            f"({dim_str(dim)}) splits into {n} equal sections")
        piece = prod([c // n] + f)
        return [(IntImm(0) if k == 0 else prod([piece, k]), piece) for k in range(n)]
    idx = _ints(op, "indices_or_sections", indices_or_sections)
    if cd is None:
        raise error(op, f"split at indices {idx} needs a static dimension {axis}, got "
                        f"{shape_str(x.shape)}")
    cuts = [min(max(i + cd if i < 0 else i, 0), cd) for i in idx]
    bounds = [0] + cuts + [cd]
    return [(IntImm(bounds[k]), IntImm(max(0, bounds[k + 1] - bounds[k]))) for k in range(len(bounds) - 1)]


def _infer_split(types, attrs):
    (x,) = tensor_args("split", types, count=1)
    a = get_attrs("split", attrs, indices_or_sections=REQUIRED, axis=0)
    ios = require_attr("split", a, "indices_or_sections")
    if x.ndim == 0:
        raise error("split", "cannot split a 0-d tensor")
    axis = normalize_axis("split", a["axis"], x.ndim, x.shape)
    fields = []
    for _, length in _split_bounds("split", x, ios, axis):
        shape = list(x.shape)
        shape[axis] = length
        fields.append(out_type(shape, x.dtype))
    return TupleType(tuple(fields))


def _compute_split(args, attrs):
    (x,) = args
    xt = TensorType(x.shape, x.dtype)
    axis = normalize_axis("split", attrs.get("axis", 0), x.ndim, x.shape)
    outs = []
    for k, (start, length) in enumerate(_split_bounds("split", xt, attrs["indices_or_sections"], axis)):
        shape = list(x.shape)
        shape[axis] = length

        def f(*i, start=start):
            return x[tuple(i[d] + start if d == axis and const_dim(start) != 0 else i[d]
                           for d in range(len(i)))]
        outs.append(te.compute(shape, f, name=f"split_{k}"))
    return outs


def _ref_split(x, indices_or_sections, axis=0):
    ios = indices_or_sections
    return tuple(np.split(x, ios if isinstance(ios, (int, np.integer)) else list(ios), axis=axis))


register("split", infer=_infer_split, compute=_compute_split, reference=_ref_split,
         pattern="injective", num_args=1,
         doc="split(x, indices_or_sections, axis=0) -> tuple: numpy split. An int splits into "
             "that many equal pieces (the dimension must divide, provably for a symbolic one); "
             "a sequence of indices cuts before each (negative count from the end, clamped "
             "like slicing, so pieces may be empty).")


# ---- strided_slice -------------------------------------------------------------------------

def _slice_plan(op, x, begin, end, strides, axes, assume_in_bounds=False):
    """Per axis of ``x``: (start, step, length) — ints, or (0, 1, dim) for untouched axes."""
    begin = _bounds(op, "begin", begin)
    end = _bounds(op, "end", end, len(begin))
    strides = (1,) * len(begin) if strides is None else _ints(op, "strides", strides, len(begin))
    if axes is None:
        if len(begin) > x.ndim:
            raise error(op, f"{len(begin)} begin values for a {x.ndim}-D input {shape_str(x.shape)}")
        axes = tuple(range(len(begin)))
    else:
        axes = _ints(op, "axes", axes, len(begin))
    norm = [normalize_axis(op, a, x.ndim, x.shape, "axes entry") for a in axes]
    if len(set(norm)) != len(norm):
        raise error(op, f"axes {axes} repeats an axis")
    plan = [(IntImm(0), 1, x.shape[d]) for d in range(x.ndim)]
    for ax, b, e, s in zip(norm, begin, end, strides):
        if s == 0:
            raise error(op, f"strides must not be 0 (axis {ax})")
        dim = const_dim(x.shape[ax])
        if dim is None or not isinstance(b, int) or not isinstance(e, int):
            if not (s == 1 and isinstance(b, int) and b == 0 and isinstance(e, int) and e >= INT_MAX):
                plan[ax] = _symbolic_slice(op, x.shape[ax], b, e, s, assume_in_bounds)  # else: whole dim
            continue
        r = range(*slice(b, e, s).indices(dim))      # Python's (numpy's) slice clamping
        plan[ax] = (IntImm(r.start), s, IntImm(len(r)))
    return plan


def _bounds(op: str, name: str, value, length: Optional[int] = None) -> tuple:
    """Slice bounds: Python ints, or int PrimExprs of symbolic dims (``past + n``)."""
    seq_ = value if isinstance(value, (list, tuple)) else (value,)
    if not any(isinstance(v, PrimExpr) and not isinstance(v, IntImm) for v in seq_):
        return _ints(op, name, value, length)
    out = tuple(v if isinstance(v, PrimExpr) and not isinstance(v, IntImm) else _ints(op, name, v)[0]
                for v in seq_)
    if length is not None and len(out) != length:
        raise error(op, f"{name}= needs {length} value(s), got {len(out)}")
    return out


def _symbolic_slice(op, dim, b, e, s: int, assume_in_bounds: bool = False):
    """(start, step, length) of ``[b:e:s]`` along ``dim`` when the dim or a bound is symbolic,
    clamped as numpy does, as expressions (derived dimensions: the runtime computes them). An
    int end at or past INT_MAX (or, stepping back, at or before -INT_MAX) means the whole way;
    a symbolic bound must be provably non-negative or provably negative. ``assume_in_bounds``
    (step 1): the caller guarantees 0 <= b <= e <= dim (a frontend that has the runtime check
    it), so the length is plainly ``e - b``."""
    from .. import arith
    from ..ir.functor import collect
    # one index dtype for the whole plan: the symbolic operands' (casts would hide b - b == 0)
    syms = [x for x in (dim, b, e) if isinstance(x, PrimExpr) and not isinstance(x, IntImm)]
    dtype = syms[0].dtype if syms and all(x.dtype == syms[0].dtype for x in syms) else "int64"
    dim = IntImm(int(dim.value), dtype) if isinstance(dim, IntImm) else dim
    ranges = {v: (0, 2 ** 62) for x in (dim, b, e) if isinstance(x, PrimExpr) for v in collect(x, Var)}

    def simp(v):
        return arith.simplify(v, ranges)

    def c(v):
        return IntImm(int(v), dtype) if not isinstance(v, PrimExpr) else simp(_promote(v, IntImm(0, dtype))[0])
    lo, hi = (c(0), dim) if s > 0 else (c(-1), dim - c(1))

    def clamp(v):
        v = c(v)
        neg, nonneg = simp(v < c(0)), simp(v >= c(0))
        if isinstance(nonneg, IntImm) and nonneg.value:
            return Min(v, hi)
        if isinstance(neg, IntImm) and neg.value:
            return Max(dim + v, lo)
        raise error(op, f"slice bound {v} may be negative or not: its sign must be known at compile time")
    if assume_in_bounds and s == 1:
        return simp(c(b)), 1, simp(c(e) - c(b))
    start = clamp(b)
    if s > 0:
        stop = dim if isinstance(e, int) and e >= INT_MAX else clamp(e)
        length = Max((stop - start + c(s - 1)) // c(s), c(0))
    else:
        stop = c(-1) if isinstance(e, int) and e <= -INT_MAX else clamp(e)
        length = Max((start - stop + c(-s - 1)) // c(-s), c(0))
    return simp(start), s, simp(length)


def _slice_args(attrs):
    a = get_attrs("strided_slice", attrs, begin=REQUIRED, end=REQUIRED, strides=None, axes=None,
                  assume_in_bounds=False)
    return (require_attr("strided_slice", a, "begin"), require_attr("strided_slice", a, "end"),
            a["strides"], a["axes"], bool(a["assume_in_bounds"]))


def _infer_strided_slice(types, attrs):
    (x,) = tensor_args("strided_slice", types, count=1)
    plan = _slice_plan("strided_slice", x, *_slice_args(attrs))
    return out_type([p[2] for p in plan], x.dtype)


def _compute_strided_slice(args, attrs):
    (x,) = args
    plan = _slice_plan("strided_slice", TensorType(x.shape, x.dtype), *_slice_args(attrs))

    def f(*i):
        idx = []
        for k, (start, step, _) in zip(i, plan):
            e = k if step == 1 else k * step
            idx.append(e if const_dim(start) == 0 else e + start)
        return x[tuple(idx)]
    return te.compute([p[2] for p in plan], f, name="strided_slice")


def _ref_strided_slice(x, begin, end, strides=None, axes=None, assume_in_bounds=False):
    plan = _slice_plan("strided_slice", TensorType(x.shape, str(x.dtype)), begin, end, strides, axes)
    out = x
    for ax, (start, step, length) in enumerate(plan):
        idx = const_dim(start) + step * np.arange(const_dim(length), dtype=np.int64)
        out = np.take(out, idx, axis=ax)
    return out


def contiguous_slice_offset(x: TensorType, attrs) -> Optional[int]:
    """The element offset of ``strided_slice(x, **attrs)`` in ``x`` when its result is one
    contiguous run of ``x``'s elements (row-major; static shape): every axis before the first
    cut one taken at one index, every axis after it whole, step 1. Else None.

    >>> contiguous_slice_offset(TensorType((1, 116, 28, 28), "float32"),
    ...                         {"begin": (58,), "end": (116,), "axes": (1,)})
    45472
    """
    shape = x.static_shape()
    if shape is None:
        return None
    plan = _slice_plan("strided_slice", x, *_slice_args(attrs))
    if any(const_dim(p[0]) is None or const_dim(p[2]) is None for p in plan):
        return None
    starts = [const_dim(p[0]) for p in plan]
    lengths = [const_dim(p[2]) for p in plan]
    cut = [d for d in range(len(shape)) if lengths[d] != shape[d]]
    a = cut[0] if cut else len(shape)
    if any(lengths[d] != 1 for d in range(a)) or any(d > a for d in cut) \
            or (a < len(shape) and lengths[a] > 1 and plan[a][1] != 1):
        return None
    offset, stride = 0, 1
    for d in reversed(range(len(shape))):
        offset += starts[d] * stride
        stride *= shape[d]
    return offset


register("strided_slice", infer=_infer_strided_slice, compute=_compute_strided_slice,
         reference=_ref_strided_slice, pattern="injective", num_args=1,
         doc="strided_slice(x, begin, end, strides=None, axes=None): ONNX Slice with numpy's "
             "slicing rules (what onnx.reference does): x[begin:end:stride] per listed axis, "
             "negative begin/end count from the end, out-of-range ones clamp (INT_MAX / "
             "INT_MIN mean 'to the end'), an empty range gives a 0-size dimension. "
             "axes=None means the first len(begin) axes. A symbolic dimension can only be "
             "taken whole ([0:INT_MAX:1]).")


# ---- take ----------------------------------------------------------------------------------

def _infer_take(types, attrs):
    x, ind = tensor_args("take", types, names=("data", "indices"), count=2)
    a = get_attrs("take", attrs, axis=0)
    if ind.dtype not in ("int32", "int64"):
        raise error("take", f"indices must be int32 or int64, got {ind.dtype}")
    if x.ndim == 0:
        raise error("take", "data must have at least one dimension")
    axis = normalize_axis("take", a["axis"], x.ndim, x.shape)
    if const_dim(x.shape[axis]) == 0 and not any(const_dim(d) == 0 for d in ind.shape):
        raise error("take", f"cannot take indices {shape_str(ind.shape)} from the empty axis {axis} "
                            f"of {shape_str(x.shape)}")
    return out_type(tuple(x.shape[:axis]) + tuple(ind.shape) + tuple(x.shape[axis + 1:]), x.dtype)


def _compute_take(args, attrs):
    x, ind = args
    axis = normalize_axis("take", attrs.get("axis", 0), x.ndim, x.shape)
    shape = tuple(x.shape[:axis]) + tuple(ind.shape) + tuple(x.shape[axis + 1:])
    dim = as_dim(x.shape[axis])

    def f(*i):
        j = ind[tuple(i[axis:axis + ind.ndim])]
        # Negative indices wrap (ONNX Gather); anything still outside is clamped, not read
        # out of bounds.
        j = j + Select(j < 0, *_promote(dim, 0))
        j = clamp(j, 0, last_index(dim))
        return x[tuple(i[:axis]) + (j,) + tuple(i[axis + ind.ndim:])]
    return te.compute(shape, f, name="take")


def _ref_take(x, indices, axis=0):
    return np.take(x, indices, axis=axis)


register("take", infer=_infer_take, compute=_compute_take, reference=_ref_take,
         pattern="injective", num_args=2,
         doc="take(x, indices, axis=0): gather along ``axis`` (numpy take / ONNX Gather). "
             "indices are int32 or int64 of any shape; negative ones wrap; out-of-range ones "
             "are undefined (the kernel clamps them; it never reads out of bounds).")


# ---- constant padding (the pad operator is in pad.py) ----------------------------------

def _pad_shape(op, x, pads):
    shape = []
    for d, (b, a) in zip(x.shape, pads):
        n = _sum_dims(d, b + a)
        if const_dim(n) is not None and const_dim(n) < 0:
            raise error(op, f"pad_width {tuple(pads)} crops more than the dimensions of {shape_str(x.shape)}")
        shape.append(n)
    return shape


def padded(x, pads, value, name="pad"):
    """te: ``x`` padded by ``pads`` [(before, after)] with ``value`` (negative pads crop).
    Used by pad, conv and pooling; loads are clamped into ``x``."""
    shape = _pad_shape("pad", TensorType(x.shape, x.dtype), pads)
    fill = literal(value, x.dtype)
    if any(const_dim(d) == 0 for d in x.shape):      # nothing to read (and no index to clamp to)
        return te.compute(shape, lambda *i: fill, name=name)

    def f(*i):
        idx, conds = [], []
        for k, (d, (b, a)) in enumerate(zip(x.shape, pads)):
            src = i[k] - b if b else i[k]
            if b > 0:
                conds.append(src >= 0)
            if a > 0:
                conds.append(src < as_dim(d))
            if b > 0:
                src = _max(src, 0)
            if a > 0:
                src = _min(src, last_index(d))
            idx.append(src)
        cond = _and(conds)
        return x[tuple(idx)] if cond is None else Select(cond, x[tuple(idx)], fill)
    return te.compute(shape, f, name=name)


# ---- broadcast_to --------------------------------------------------------------------------

def _infer_broadcast_to(types, attrs):
    (x,) = tensor_args("broadcast_to", types, count=1)
    a = get_attrs("broadcast_to", attrs, shape=REQUIRED)
    target = tuple(as_dim(d) for d in _target_dims("broadcast_to", require_attr("broadcast_to", a, "shape")))
    if any(const_dim(d) is not None and const_dim(d) < 0 for d in target):
        raise error("broadcast_to", f"target shape {shape_str(target)} has a negative dimension")
    off = len(target) - x.ndim
    ok = off >= 0 and all(const_dim(d) == 1 or dims_equal(d, target[off + k]) is True
                          for k, d in enumerate(x.shape))
    if not ok:
        raise error("broadcast_to", f"cannot broadcast {shape_str(x.shape)} to {shape_str(target)}")
    return out_type(target, x.dtype)


def _compute_broadcast_to(args, attrs):
    (x,) = args
    shape = _infer_broadcast_to([TensorType(x.shape, x.dtype)], dict(attrs)).shape
    return te.compute(shape, lambda *i: x[broadcast_indices(i, x.shape, shape)], name="broadcast_to")


def _ref_broadcast_to(x, shape):
    return np.ascontiguousarray(np.broadcast_to(x, tuple(int(d) for d in shape)))


register("broadcast_to", infer=_infer_broadcast_to, compute=_compute_broadcast_to,
         reference=_ref_broadcast_to, pattern="broadcast", num_args=1,
         doc="broadcast_to(x, shape): numpy broadcast_to (right-aligned; size-1 dimensions "
             "stretch). Entries of shape may be symbolic dimensions.")


# ---- squeeze / expand_dims / flatten --------------------------------------------------------

def _squeeze_axes(op, x, axis):
    if axis is None:
        return tuple(k for k, d in enumerate(x.shape) if const_dim(d) == 1)
    axes = normalize_axes(op, _ints(op, "axis", axis) if isinstance(axis, (list, tuple)) else axis,
                          x.ndim, x.shape)
    for a in axes:
        if const_dim(x.shape[a]) != 1:
            raise error(op, f"cannot squeeze axis {a} of {shape_str(x.shape)}: its size is "
                            f"{dim_str(x.shape[a])}, not 1")
    return axes


def _infer_squeeze(types, attrs):
    (x,) = tensor_args("squeeze", types, count=1)
    a = get_attrs("squeeze", attrs, axis=None)
    axes = _squeeze_axes("squeeze", x, a["axis"])
    return out_type([d for k, d in enumerate(x.shape) if k not in axes], x.dtype)


def _compute_squeeze(args, attrs):
    (x,) = args
    axes = _squeeze_axes("squeeze", TensorType(x.shape, x.dtype), attrs.get("axis"))
    keep = [k for k in range(x.ndim) if k not in axes]

    def f(*i):
        pos = dict(zip(keep, i))
        return x[tuple(pos.get(k, IntImm(0)) for k in range(x.ndim))]
    return te.compute([x.shape[k] for k in keep], f, name="squeeze")


def _ref_squeeze(x, axis=None):
    return np.squeeze(x, axis=tuple(axis) if isinstance(axis, (list, tuple)) else axis)


register("squeeze", infer=_infer_squeeze, compute=_compute_squeeze, reference=_ref_squeeze,
         pattern="injective", num_args=1,
         doc="squeeze(x, axis=None): drop size-1 dimensions (numpy squeeze); axis=None drops "
             "every dimension that is statically 1 (symbolic ones stay); a named axis must be 1.")


def _expand_axes(op, x, axis):
    axes = _ints(op, "axis", axis)
    return normalize_axes(op, list(axes), x.ndim + len(axes), None)


def _infer_expand_dims(types, attrs):
    (x,) = tensor_args("expand_dims", types, count=1)
    a = get_attrs("expand_dims", attrs, axis=REQUIRED)
    axes = _expand_axes("expand_dims", x, require_attr("expand_dims", a, "axis"))
    it = iter(x.shape)
    return out_type([IntImm(1) if k in axes else next(it) for k in range(x.ndim + len(axes))], x.dtype)


def _compute_expand_dims(args, attrs):
    (x,) = args
    xt = TensorType(x.shape, x.dtype)
    axes = _expand_axes("expand_dims", xt, attrs["axis"])
    shape = _infer_expand_dims([xt], dict(attrs)).shape
    return te.compute(shape, lambda *i: x[tuple(v for k, v in enumerate(i) if k not in axes)],
                      name="expand_dims")


def _ref_expand_dims(x, axis):
    return np.expand_dims(x, tuple(axis) if isinstance(axis, (list, tuple)) else axis)


register("expand_dims", infer=_infer_expand_dims, compute=_compute_expand_dims,
         reference=_ref_expand_dims, pattern="injective", num_args=1,
         doc="expand_dims(x, axis): insert size-1 dimensions at ``axis`` (an int or a tuple), "
             "positions in the result as numpy expand_dims / ONNX Unsqueeze; negative count "
             "from the result's end.")


def _flatten_shape(op, x, start_dim, end_dim):
    if x.ndim == 0:
        return (IntImm(1),)
    s = normalize_axis(op, start_dim, x.ndim, x.shape, "start_dim")
    e = normalize_axis(op, end_dim, x.ndim, x.shape, "end_dim")
    if s > e:
        raise error(op, f"start_dim {start_dim} comes after end_dim {end_dim} for {shape_str(x.shape)}")
    return tuple(x.shape[:s]) + (prod(x.shape[s:e + 1]),) + tuple(x.shape[e + 1:])


def _infer_flatten(types, attrs):
    (x,) = tensor_args("flatten", types, count=1)
    a = get_attrs("flatten", attrs, start_dim=1, end_dim=-1)
    return out_type(_flatten_shape("flatten", x, a["start_dim"], a["end_dim"]), x.dtype)


def _compute_flatten(args, attrs):
    (x,) = args
    shape = _flatten_shape("flatten", TensorType(x.shape, x.dtype), attrs.get("start_dim", 1),
                           attrs.get("end_dim", -1))
    if x.ndim == 0:
        return te.compute(shape, lambda i: x[()], name="flatten")
    return te.compute(shape, lambda *i: x[reshape_indices(i, x.shape, shape)], name="flatten")


def _ref_flatten(x, start_dim=1, end_dim=-1):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_dim % x.ndim, end_dim % x.ndim
    return x.reshape(x.shape[:s] + (-1 if x.size else int(np.prod(x.shape[s:e + 1])),) + x.shape[e + 1:])


register("flatten", infer=_infer_flatten, compute=_compute_flatten, reference=_ref_flatten,
         pattern="injective", num_args=1,
         doc="flatten(x, start_dim=1, end_dim=-1): merge dimensions start_dim..end_dim "
             "(inclusive) into one, as torch.flatten; a 0-d input gives shape (1,).")


# ---- topk ----------------------------------------------------------------------------------

def _topk_args(op, x, attrs):
    a = get_attrs(op, attrs, k=REQUIRED, axis=-1, largest=True)
    k = _ints(op, "k", require_attr(op, a, "k"), 1)[0]
    if x.ndim == 0:
        raise error(op, "needs an input with at least one dimension")
    axis = normalize_axis(op, a["axis"], x.ndim, x.shape)
    n = const_dim(x.shape[axis])
    if n is None:
        raise error(op, f"axis {axis} of {shape_str(x.shape)} must be static")
    if not 0 <= k <= n:
        raise error(op, f"k={k} is out of range for axis {axis} of size {n} in {shape_str(x.shape)}")
    return k, axis, bool(a["largest"])


def _infer_topk(types, attrs):
    (x,) = tensor_args("topk", types, count=1)
    k, axis, _ = _topk_args("topk", x, attrs)
    if not (dt.is_float(x.dtype) or dt.is_int(x.dtype)):
        raise error("topk", f"input dtype {x.dtype} is not supported (numbers only)")
    shape = list(x.shape)
    shape[axis] = IntImm(k)
    return TupleType((out_type(shape, x.dtype), out_type(shape, "int64")))


def _tir_topk(arg_types, attrs, out_ty):
    """k selection passes per row. Pass j scans the row for the best element that comes after
    pick j-1 in the order (value, then lower index first); no scratch memory, O(k n)."""
    (xt,) = arg_types
    k, axis, largest = _topk_args("topk", xt, attrs)
    n = const_dim(xt.shape[axis])
    vt, it = out_ty.fields
    X = Buffer("x", xt.shape, xt.dtype)
    V = Buffer("values", vt.shape, vt.dtype)
    I = Buffer("indices", it.shape, "int64")
    rows = [d for d in range(xt.ndim) if d != axis]
    loops = [Var(f"i{d}", as_dim(xt.shape[d]).dtype) for d in rows]
    ivs = [IterVar(Var(f"v{d}", lv.dtype), Range.from_extent(xt.shape[d]), "spatial")
           for d, lv in zip(rows, loops)]
    j, c = Var("j", "int64"), Var("c", "int64")

    def at(buf, pos):
        it_ = iter(iv.var for iv in ivs)
        return tuple(pos if d == axis else next(it_) for d in range(xt.ndim))
    better = (lambda a, b: a > b) if largest else (lambda a, b: a < b)
    prev = _max(j - 1, 0)                     # clamped: j == 0 takes the first branch below
    xc, vj, ij = X[at(X, c)], BufferLoad(V, at(V, j)), BufferLoad(I, at(I, j))
    vp, ip = BufferLoad(V, at(V, prev)), BufferLoad(I, at(I, prev))
    after = Or(j == 0, Or(better(vp, xc), And(xc == vp, c > ip)))
    take = And(after, Or(ij < 0, better(xc, vj)))
    update = seq(BufferStore(V, xc, at(V, j)), BufferStore(I, c, at(I, j)))
    scan = For(c, IntImm(0, "int64"), IntImm(n, "int64"), "serial", IfThenElse(take, update))
    init = seq(BufferStore(V, X[at(X, IntImm(0, "int64"))], at(V, j)),
               BufferStore(I, IntImm(-1, "int64"), at(I, j)))
    body = For(j, IntImm(0, "int64"), IntImm(k, "int64"), "serial", seq(init, scan))

    def region(buf, extent):
        it_ = iter(iv.var for iv in ivs)
        return BufferRegion(buf, tuple(Range(0, extent) if d == axis else Range(next(it_), 1)
                                       for d in range(xt.ndim)))
    block = Block("topk", tuple(ivs), (region(X, n),), (region(V, k), region(I, k)), body)
    nest = BlockRealize(tuple(loops), IntImm(1, "bool"), block)
    for lv, d in reversed(list(zip(loops, rows))):
        nest = For(lv, IntImm(0, lv.dtype), as_dim(xt.shape[d]), "serial", nest)
    return PrimFunc((X, V, I), root_realize(nest))


def _ref_topk(x, k, axis=-1, largest=True):
    if largest:
        # Descending with ties in index order: a stable ascending sort of the reversed row,
        # read backwards.
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(int(k)), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


register("topk", infer=_infer_topk, tir=_tir_topk, reference=_ref_topk, pattern="opaque",
         num_args=1,
         doc="topk(x, k, axis=-1, largest=True) -> (values, indices int64): the k largest "
             "(smallest) elements along ``axis``, sorted, equal values in index order (ONNX "
             "TopK, sorted=1). The axis must be static; NaN order is unspecified.")
