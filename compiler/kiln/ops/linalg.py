"""Linear algebra (pattern ``out_fusable``): matmul and linear.

Both are one reduction block (``matmul`` / ``linear``)::

    C[b..., i, j] = sum_k A[b..., i, k] * B[b..., k, j]        # matmul
    Y[r..., j]    = sum_k X[r..., k] * W[j, k]                  # linear: x @ weight.T

so a default schedule can tile i, j, k directly and elementwise consumers (bias add, relu) can
be fused into the output. float16 inputs accumulate in float32 (block ``<op>_acc``, then a
cast block ``<op>``); other dtypes accumulate in their own dtype.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..ir.graph import TensorType
from .common import (NUMERIC_DTYPES, broadcast_indices, broadcast_shapes, check_dtype,
                     check_same_dtype, dims_equal, dim_str, error, get_attrs, shape_str,
                     tensor_args)
from .reduction import acc_dtype
from .registry import OpError, register


def _matmul_shapes(a_shape, b_shape):
    """(batch shape, M or None, N or None, K) of ``a @ b`` under numpy rules; raises OpError."""
    both = f"a {shape_str(a_shape)} and b {shape_str(b_shape)}"
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise error("matmul", f"inputs must have at least 1 dimension, got {both}")
    ka = a_shape[-1]
    kb = b_shape[0] if len(b_shape) == 1 else b_shape[-2]
    same = dims_equal(ka, kb)
    if same is not True:
        why = "differ" if same is False else "cannot be proven equal"
        raise error("matmul", f"contracted dimensions {dim_str(ka)} and {dim_str(kb)} {why} ({both})")
    try:
        batch = broadcast_shapes("matmul", a_shape[:-2], b_shape[:-2])
    except OpError:
        raise error("matmul", f"batch dimensions {shape_str(a_shape[:-2])} and "
                              f"{shape_str(b_shape[:-2])} do not broadcast ({both})") from None
    m = a_shape[-2] if len(a_shape) >= 2 else None
    n = b_shape[-1] if len(b_shape) >= 2 else None
    return batch, m, n, ka


def _out_shape(batch, m, n):
    return tuple(batch) + ((m,) if m is not None else ()) + ((n,) if n is not None else ())


def _matmul_infer(types, attrs):
    a, b = tensor_args("matmul", types, names=("a", "b"), count=2)
    get_attrs("matmul", attrs)
    dtype = check_same_dtype("matmul", [a, b], names=("a", "b"))
    check_dtype("matmul", dtype, NUMERIC_DTYPES)
    batch, m, n, _ = _matmul_shapes(a.shape, b.shape)
    return TensorType(_out_shape(batch, m, n), dtype)


def _accumulate(name, shape, body, out_dtype, acc):
    """One reduction block ``name`` (or ``name_acc`` + a cast block when acc != out_dtype)."""
    if acc == out_dtype:
        return te.compute(shape, body, name=name)
    red = te.compute(shape, body, name=f"{name}_acc")
    return te.compute(shape, lambda *i: red[i].astype(out_dtype), name=name)


def _matmul_compute(args, attrs):
    A, B = args
    batch, m, n, K = _matmul_shapes(A.shape, B.shape)
    shape = _out_shape(batch, m, n)
    nb = len(batch)
    acc = acc_dtype(A.dtype)
    k = te.reduce_axis(K, name="k")

    def body(*idx):
        b, rest = idx[:nb], list(idx[nb:])
        i = rest.pop(0) if m is not None else None
        j = rest.pop(0) if n is not None else None
        a_idx = (broadcast_indices(b, A.shape[:-2], batch) + (i, k)) if A.ndim >= 2 else (k,)
        b_idx = (broadcast_indices(b, B.shape[:-2], batch) + (k, j)) if B.ndim >= 2 else (k,)
        return te.sum(A[a_idx].astype(acc) * B[b_idx].astype(acc), axis=k)
    return _accumulate("matmul", shape, body, A.dtype, acc)


def _matmul_ref(a, b):
    return np.asarray(np.matmul(a, b)).astype(a.dtype)


register("matmul", infer=_matmul_infer, compute=_matmul_compute, reference=_matmul_ref,
         pattern="out_fusable", num_args=2,
         doc="matmul(a, b): numpy matmul. a (..., M, K) @ b (..., K, N) -> (batch..., M, N) with "
             "the batch dims broadcast; a 1-D a is a row (K,) and a 1-D b a column (K,), their "
             "dimension dropped from the result. One reduction block 'matmul'.")


def _linear_infer(types, attrs):
    x, w = tensor_args("linear", types, names=("x", "weight"), count=2)
    get_attrs("linear", attrs)
    dtype = check_same_dtype("linear", [x, w], names=("x", "weight"))
    check_dtype("linear", dtype, NUMERIC_DTYPES)
    if x.ndim < 1:
        raise error("linear", f"x must have at least 1 dimension, got shape {shape_str(x.shape)}")
    if w.ndim != 2:
        raise error("linear", f"weight must be 2-D [out_features, in_features], got shape "
                              f"{shape_str(w.shape)}")
    same = dims_equal(x.shape[-1], w.shape[1])
    if same is not True:
        raise error("linear", f"x {shape_str(x.shape)} has {dim_str(x.shape[-1])} input features but "
                              f"weight {shape_str(w.shape)} expects {dim_str(w.shape[1])}")
    return TensorType(tuple(x.shape[:-1]) + (w.shape[0],), dtype)


def _linear_compute(args, attrs):
    X, W = args
    shape = tuple(X.shape[:-1]) + (W.shape[0],)
    acc = acc_dtype(X.dtype)
    k = te.reduce_axis(X.shape[-1], name="k")

    def body(*idx):
        *r, j = idx
        return te.sum(X[tuple(r) + (k,)].astype(acc) * W[j, k].astype(acc), axis=k)
    return _accumulate("linear", shape, body, X.dtype, acc)


register("linear", infer=_linear_infer, compute=_linear_compute,
         reference=lambda x, w: np.asarray(np.matmul(x, w.T)).astype(x.dtype),
         pattern="out_fusable", num_args=2,
         doc="linear(x, weight): x @ weight.T; x (..., in_features), weight [out_features, "
             "in_features] -> (..., out_features). The bias is a separate add. One reduction "
             "block 'linear'.")
