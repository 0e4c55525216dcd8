"""``scatter_nd``: write (or combine) updates into a copy of the data at run-time indices
(ONNX ScatterND; the ONNX frontend lowers ScatterElements to it too).

A hand-written PrimFunc of two blocks: ``scatter_nd_copy`` copies the data (a spatial nest,
free to parallelise), then ``scatter_nd`` walks the updates in order with serial loops inside
a block that has no iterators, so duplicate indices combine (or, without a reduction, the
last one wins) deterministically and no schedule can run them concurrently. Indices wrap
once when negative and are clamped into the data: no store is ever out of bounds.
"""
from __future__ import annotations

import numpy as np

from ..ir.expr import Buffer, BufferLoad, IntImm, Range, Select, Var, _promote
from ..ir.function import PrimFunc, root_realize
from ..ir.stmt import Block, BlockRealize, BufferRegion, BufferStore, For, IterVar, seq
from .common import (as_dim, const_dim, dims_equal, error, get_attrs, shape_str, tensor_args)
from .registry import register
from .transform import _max, _min, clamp, last_index

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _check(types, attrs):
    data, ind, upd = tensor_args("scatter_nd", types, names=("data", "indices", "updates"), count=3)
    a = get_attrs("scatter_nd", attrs, reduction="none")
    if a["reduction"] not in REDUCTIONS:
        raise error("scatter_nd", f"reduction must be one of {', '.join(REDUCTIONS)}, got {a['reduction']!r}")
    if ind.dtype not in ("int32", "int64"):
        raise error("scatter_nd", f"indices must be int32 or int64, got {ind.dtype}")
    if upd.dtype != data.dtype:
        raise error("scatter_nd", f"updates dtype {upd.dtype} differs from data dtype {data.dtype}")
    if a["reduction"] != "none" and data.dtype == "bool":
        raise error("scatter_nd", f"reduction={a['reduction']} needs numbers, got bool data")
    k = const_dim(ind.shape[-1]) if ind.ndim else None
    if k is None or not 1 <= k <= data.ndim:
        raise error("scatter_nd", f"indices {shape_str(ind.shape)} need a static last dim between 1 "
                                  f"and the rank of data {shape_str(data.shape)}")
    want = tuple(ind.shape[:-1]) + tuple(data.shape[k:])
    if len(want) != upd.ndim or any(dims_equal(w, u) is not True for w, u in zip(want, upd.shape)):
        raise error("scatter_nd", f"updates {shape_str(upd.shape)} must have shape "
                                  f"{shape_str(want)} (indices' leading dims, then data's after {k})")
    return data, ind, upd, k, a["reduction"]


def _infer(types, attrs):
    return _check(types, attrs)[0]


def _combine(reduction, old, new):
    if reduction == "add":
        return old + new
    if reduction == "mul":
        return old * new
    if reduction == "max":
        return _max(old, new)
    if reduction == "min":
        return _min(old, new)
    return new


def _loops(vars_, extents, body):
    for v, e in reversed(list(zip(vars_, extents))):
        body = For(v, IntImm(0, v.dtype), as_dim(e), "serial", body)
    return body


def _copy_nest(D, O):
    """``O[v] = D[v]`` over every element, as one spatial block."""
    loops = [Var(f"i{d}", as_dim(s).dtype) for d, s in enumerate(D.shape)]
    ivs = [IterVar(Var(f"v{d}", lv.dtype), Range.from_extent(s), "spatial")
           for d, (lv, s) in enumerate(zip(loops, D.shape))]
    vs = tuple(iv.var for iv in ivs)
    block = Block("scatter_nd_copy", tuple(ivs), (BufferRegion.point(D, vs),),
                  (BufferRegion.point(O, vs),), BufferStore(O, D[vs], vs))
    return _loops(loops, D.shape, BlockRealize(tuple(loops), IntImm(1, "bool"), block))


def _tir(arg_types, attrs, out_ty):
    data, ind, upd, k, reduction = _check(arg_types, attrs)
    D, I = Buffer("data", data.shape, data.dtype), Buffer("indices", ind.shape, ind.dtype)
    U, O = Buffer("updates", upd.shape, upd.dtype), Buffer("out", data.shape, data.dtype)
    ns = [Var(f"n{d}", as_dim(s).dtype) for d, s in enumerate(ind.shape[:-1])]
    ss = [Var(f"s{d}", as_dim(s).dtype) for d, s in enumerate(data.shape[k:])]
    pos = []
    for j in range(k):
        raw = I[tuple(ns) + (IntImm(j, as_dim(ind.shape[-1]).dtype),)]
        size = as_dim(data.shape[j])
        wrapped = raw + Select(raw < 0, *_promote(size, 0))     # negative counts from the end
        pos.append(clamp(wrapped, 0, last_index(size)))
    at = tuple(pos) + tuple(ss)
    store = BufferStore(O, _combine(reduction, BufferLoad(O, at), U[tuple(ns) + tuple(ss)]), at)
    body = _loops(ns + ss, list(ind.shape[:-1]) + list(data.shape[k:]), store)
    block = Block("scatter_nd", (), (BufferRegion.full(I), BufferRegion.full(U), BufferRegion.full(O)),
                  (BufferRegion.full(O),), body)
    scatter = BlockRealize((), IntImm(1, "bool"), block)
    return PrimFunc((D, I, U, O), root_realize(seq(_copy_nest(D, O), scatter)))


def _reference(data, indices, updates, reduction="none"):
    out = np.array(data, copy=True)
    k = indices.shape[-1]
    idx = indices.reshape(-1, k).astype(np.int64)
    upd = updates.reshape((idx.shape[0],) + data.shape[k:])
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(reduction)
    for n in range(idx.shape[0]):
        at = tuple(int(i) + (data.shape[j] if i < 0 else 0) for j, i in enumerate(idx[n]))
        out[at] = upd[n] if ufunc is None else ufunc(out[at], upd[n])
    return out


register("scatter_nd", infer=_infer, tir=_tir, reference=_reference, pattern="opaque", num_args=3,
         doc="scatter_nd(data, indices, updates, reduction='none'): a copy of data with "
             "out[indices[n..., :]] = updates[n...] (ONNX ScatterND): indices (..., k) address "
             "the first k dims, updates have indices' leading dims then data's dims after k. "
             "reduction add/mul/max/min combines with what is there; updates apply in "
             "row-major order, so with 'none' a duplicate index keeps the last update. Negative "
             "indices count from the end; out-of-range ones are undefined (clamped, never "
             "written out of bounds).")
