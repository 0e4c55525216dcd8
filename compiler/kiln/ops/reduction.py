"""Reductions (pattern ``reduce``): sum, mean, max, min, prod, argmax, argmin, softmax,
log_softmax.

Each is written as te computes with one reduction block per reduction, named after the
operator (``sum``; ``mean_sum`` + ``mean``; ``softmax_max``, ``softmax_exp``, ``softmax_sum``,
``softmax``), so default schedules see the usual reduce-then-elementwise shape.

Accumulation: float16 inputs are summed in float32 and the result cast back (a ``<op>_acc``
reduction block followed by the ``<op>`` cast block); other dtypes accumulate in their own
dtype, so ``sum`` of int32 is int32 (numpy would widen to int64; cast first if that matters).
``prod`` has no te reducer, so it is given as a ``tir`` builder (a sum block rewritten to
multiply).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import te
from ..ir.expr import BufferLoad, IntImm
from ..ir.functor import transform
from ..ir.graph import TensorType
from ..ir.stmt import Block, BufferStore, IfThenElse
from .common import (FLOAT_DTYPES, NUMERIC_DTYPES, as_dim, check_dtype, error, get_attrs,
                     literal, normalize_axes, normalize_axis, placeholders, prod, tensor_args)
from .registry import register


def acc_dtype(dtype: str) -> str:
    """The dtype sums accumulate in: float32 for float16, else the dtype itself."""
    return "float32" if dtype == "float16" else dtype


def reduced_shape(shape: Sequence, axes: Sequence[int], keepdims: bool) -> tuple:
    """``shape`` with ``axes`` removed (or set to 1 with ``keepdims``)."""
    if keepdims:
        return tuple(as_dim(1) if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def reduce_index(out_idx: Sequence, rvs: dict, ndim: int, keepdims: bool) -> tuple:
    """The input index for output index ``out_idx`` and reduction vars ``rvs`` (axis -> var)."""
    it = iter(out_idx)
    idx = []
    for k in range(ndim):
        if k in rvs:
            idx.append(rvs[k])
            if keepdims:
                next(it)
        else:
            idx.append(next(it))
    return tuple(idx)


def _reduce_axes(x, axes, prefix="k"):
    return {ax: te.reduce_axis(x.shape[ax], name=f"{prefix}{ax}") for ax in axes}


# ---- sum / mean / max / min / prod ---------------------------------------------------------

def _register_reduce(name, combiner, reference, dtypes, doc):
    """``combiner``: "sum", "max", "min", "mean" or "prod"."""
    def attrs_of(attrs):
        return get_attrs(name, attrs, axis=None, keepdims=False)

    def infer(types, attrs):
        (x,) = tensor_args(name, types, count=1)
        a = attrs_of(attrs)
        check_dtype(name, x.dtype, dtypes)
        if not isinstance(a["keepdims"], bool):
            raise error(name, f"keepdims={a['keepdims']!r} must be a bool")
        axes = normalize_axes(name, a["axis"], x.ndim, x.shape)
        return TensorType(reduced_shape(x.shape, axes, a["keepdims"]), x.dtype)

    def compute(args, attrs):
        (x,) = args
        a = attrs_of(attrs)
        axes = normalize_axes(name, a["axis"], x.ndim, x.shape)
        keep = a["keepdims"]
        shape = reduced_shape(x.shape, axes, keep)
        if not axes:  # numpy: reducing over no axes is the identity
            return te.compute(x.shape, lambda *i: x[i], name=name)
        rvs = _reduce_axes(x, axes)
        rlist = list(rvs.values())
        acc = acc_dtype(x.dtype) if combiner in ("sum", "mean", "prod") else x.dtype

        def src(i):
            v = x[reduce_index(i, rvs, x.ndim, keep)]
            return v.astype(acc)
        reducer = {"sum": te.sum, "mean": te.sum, "prod": te.sum, "max": te.max, "min": te.min}[combiner]
        if combiner == "mean":
            red_name = f"{name}_sum"
        else:
            red_name = name if acc == x.dtype else f"{name}_acc"
        red = te.compute(shape, lambda *i: reducer(src(i), axis=rlist), name=red_name)
        if combiner == "mean":
            count = prod(x.shape[ax] for ax in axes)
            n = literal(count.value, acc) if isinstance(count, IntImm) else count.astype(acc)
            return te.compute(shape, lambda *i: (red[i] / n).astype(x.dtype), name=name)
        if acc != x.dtype:
            return te.compute(shape, lambda *i: red[i].astype(x.dtype), name=name)
        return red

    if combiner == "prod":
        register(name, infer=infer, tir=_prod_tir(compute), reference=reference, pattern="reduce",
                 num_args=1, doc=doc)
    else:
        register(name, infer=infer, compute=compute, reference=reference, pattern="reduce",
                 num_args=1, doc=doc)


def _prod_tir(sum_compute):
    """prod as a PrimFunc: the sum program with its reduction block turned into a product
    (init 1, update ``acc * x``). te has no product reducer."""
    def build(arg_types, attrs, out_type):
        phs = placeholders(arg_types)
        out = sum_compute(phs, attrs)
        func = te.create_prim_func(phs + [out])

        def to_product(n):
            if not (isinstance(n, Block) and n.init is not None):
                return None
            body = n.body
            store = body.then_case if isinstance(body, IfThenElse) else body
            acc, value = store.value.a, store.value.b
            assert isinstance(acc, BufferLoad) and acc.buffer is store.buffer
            new_store = BufferStore(store.buffer, acc * value, store.indices)
            new_body = IfThenElse(body.condition, new_store) if isinstance(body, IfThenElse) else new_store
            init = BufferStore(n.init.buffer, literal(1, n.init.buffer.dtype), n.init.indices)
            return Block(n.name_hint, n.iter_vars, n.reads, n.writes, new_body, init,
                         n.alloc_buffers, n.annotations)
        return transform(func, to_product)
    return build


def _np_reduce(fn, dtype_fixed=True):
    def ref(x, axis=None, keepdims=False):
        ax = tuple(axis) if isinstance(axis, (list, tuple)) else axis
        kwargs = {"dtype": x.dtype} if dtype_fixed else {}
        return np.asarray(fn(x, axis=ax, keepdims=keepdims, **kwargs)).astype(x.dtype)
    return ref


def _np_extreme(fn, largest: bool):
    """max/min: numpy's, except that an empty reduction gives the identity the compiled
    reduction starts from (-inf / +inf for floats, the dtype's min / max for ints), as ONNX's
    ReduceMax/ReduceMin, instead of raising."""
    base = _np_reduce(fn, False)

    def ref(x, axis=None, keepdims=False):
        if x.size:
            return base(x, axis, keepdims)
        if x.dtype.kind == "f":
            start = -np.inf if largest else np.inf
        else:
            info = np.iinfo(x.dtype)
            start = info.min if largest else info.max
        ax = tuple(axis) if isinstance(axis, (list, tuple)) else axis
        return np.asarray(fn(x, axis=ax, keepdims=keepdims, initial=start)).astype(x.dtype)
    return ref


_AXIS_DOC = ("axis=None|int|tuple (None: all axes; negative counts from the end), "
             "keepdims=False")
_register_reduce("sum", "sum", _np_reduce(np.sum), NUMERIC_DTYPES,
                 f"sum(x, {_AXIS_DOC}): sum over the axes (result in x's dtype).")
_register_reduce("mean", "mean", _np_reduce(np.mean), FLOAT_DTYPES,
                 f"mean(x, {_AXIS_DOC}): arithmetic mean over the axes (floats).")
_register_reduce("max", "max", _np_extreme(np.max, True), NUMERIC_DTYPES,
                 f"max(x, {_AXIS_DOC}): maximum over the axes (-inf, or the dtype's minimum, "
                 "over an empty axis).")
_register_reduce("min", "min", _np_extreme(np.min, False), NUMERIC_DTYPES,
                 f"min(x, {_AXIS_DOC}): minimum over the axes (+inf, or the dtype's maximum, "
                 "over an empty axis).")
_register_reduce("prod", "prod", _np_reduce(np.prod), NUMERIC_DTYPES,
                 f"prod(x, {_AXIS_DOC}): product over the axes (result in x's dtype).")


# ---- argmax / argmin -------------------------------------------------------------------------

def _register_arg(name, first):
    """``first``: "max" or "min". Two blocks: the extreme value, then the smallest index that
    holds it (numpy returns the first occurrence)."""
    def attrs_of(attrs):
        return get_attrs(name, attrs, axis=None, keepdims=False)

    def axes_of(x, a):
        if a["axis"] is None:
            return tuple(range(x.ndim))
        if isinstance(a["axis"], (list, tuple)):
            raise error(name, f"axis={a['axis']!r} must be an int or None")
        return (normalize_axis(name, a["axis"], x.ndim, x.shape),)

    def infer(types, attrs):
        (x,) = tensor_args(name, types, count=1)
        a = attrs_of(attrs)
        check_dtype(name, x.dtype, NUMERIC_DTYPES)
        if x.ndim == 0 and a["axis"] is not None:
            raise error(name, f"axis={a['axis']} given for a 0-D input")
        return TensorType(reduced_shape(x.shape, axes_of(x, a), a["keepdims"]), "int64")

    def compute(args, attrs):
        (x,) = args
        a = attrs_of(attrs)
        axes, keep = axes_of(x, a), a["keepdims"]
        shape = reduced_shape(x.shape, axes, keep)
        if not axes:  # a 0-D input: index 0
            return te.compute(shape, lambda *i: literal(0, "int64"), name=name)
        reducer = te.max if first == "max" else te.min
        rv1 = _reduce_axes(x, axes)
        best = te.compute(shape, lambda *i: reducer(x[reduce_index(i, rv1, x.ndim, keep)],
                                                   axis=list(rv1.values())), name=f"{name}_{first}")
        rv2 = _reduce_axes(x, axes, prefix="j")

        def index(i):
            # Row-major position of the reduced point among the reduced axes (axis=None:
            # the index into the flattened input, as numpy).
            lin = None
            for ax in axes:
                k = rv2[ax].astype("int64")
                if lin is None:
                    lin = k
                else:
                    d = as_dim(x.shape[ax])
                    size = literal(d.value, "int64") if isinstance(d, IntImm) else d.astype("int64")
                    lin = lin * size + k
            hit = x[reduce_index(i, rv2, x.ndim, keep)] == best[i]
            return te.min(lin, axis=list(rv2.values()), where=hit)
        return te.compute(shape, lambda *i: index(i), name=name)

    def reference(x, axis=None, keepdims=False):
        fn = np.argmax if first == "max" else np.argmin
        return np.asarray(fn(x, axis=axis, keepdims=keepdims)).astype("int64")

    register(name, infer=infer, compute=compute, reference=reference, pattern="reduce",
             num_args=1,
             doc=f"{name}(x, axis=None|int, keepdims=False): int64 index of the {first}imum along "
                 f"axis (first occurrence; axis=None: index into the flattened input).")


_register_arg("argmax", "max")
_register_arg("argmin", "min")


# ---- softmax / log_softmax -------------------------------------------------------------------

def _softmax_parts(name, x, axis):
    """The row max and the sum of exp(x - max) over ``axis``; returns (max, exp or None, sum)."""
    shape = reduced_shape(x.shape, (axis,), False)
    acc = acc_dtype(x.dtype)
    k = te.reduce_axis(x.shape[axis], name="k")
    mx = te.compute(shape, lambda *i: te.max(x[reduce_index(i, {axis: k}, x.ndim, False)], axis=k),
                    name=f"{name}_max")

    def row(i):  # output index -> reduced index
        return tuple(v for d, v in enumerate(i) if d != axis)
    if name == "softmax":
        ex = te.compute(x.shape, lambda *i: te.exp(x[i] - mx[row(i)]), name=f"{name}_exp")
        k2 = te.reduce_axis(x.shape[axis], name="k")
        sm = te.compute(shape, lambda *i: te.sum(ex[reduce_index(i, {axis: k2}, x.ndim, False)].astype(acc),
                                                 axis=k2), name=f"{name}_sum")
        return mx, ex, sm, row
    k2 = te.reduce_axis(x.shape[axis], name="k")
    sm = te.compute(shape, lambda *i: te.sum(
        te.exp((x[reduce_index(i, {axis: k2}, x.ndim, False)] - mx[i]).astype(acc)), axis=k2),
        name=f"{name}_sum")
    return mx, None, sm, row


def _register_softmax(name, doc):
    def infer(types, attrs):
        (x,) = tensor_args(name, types, count=1)
        a = get_attrs(name, attrs, axis=-1)
        check_dtype(name, x.dtype, FLOAT_DTYPES)
        if x.ndim == 0:
            raise error(name, "needs an input of at least 1 dimension, got shape ()")
        normalize_axis(name, a["axis"], x.ndim, x.shape)
        return TensorType(x.shape, x.dtype)

    def compute(args, attrs):
        (x,) = args
        axis = normalize_axis(name, get_attrs(name, attrs, axis=-1)["axis"], x.ndim, x.shape)
        mx, ex, sm, row = _softmax_parts(name, x, axis)
        if name == "softmax":
            return te.compute(x.shape, lambda *i: (ex[i].astype(sm.dtype) / sm[row(i)]).astype(x.dtype),
                              name=name)
        return te.compute(x.shape, lambda *i: (
            (x[i] - mx[row(i)]).astype(sm.dtype) - te.log(sm[row(i)])).astype(x.dtype), name=name)

    register(name, infer=infer, compute=compute, reference=_softmax_ref(name == "log_softmax"),
             pattern="reduce", num_args=1, doc=doc)


def _softmax_ref(log):
    def ref(x, axis=-1):
        x64 = x.astype("float64")
        shifted = x64 - np.max(x64, axis=axis, keepdims=True)
        lse = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        return (shifted - lse if log else np.exp(shifted - lse)).astype(x.dtype)
    return ref


_register_softmax("softmax", "softmax(x, axis=-1): exp(x - max) / sum(exp(x - max)) along axis "
                             "(numerically stable). Blocks: softmax_max, softmax_exp, softmax_sum, softmax.")
_register_softmax("log_softmax", "log_softmax(x, axis=-1): (x - max) - log(sum(exp(x - max))) along "
                                 "axis. Blocks: log_softmax_max, log_softmax_sum, log_softmax.")

