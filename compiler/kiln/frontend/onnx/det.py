"""ONNX Det: the determinant of (..., n, n) matrices by Gaussian elimination with partial
pivoting, unrolled over the (static) n in graph ops.

Step k picks the row of largest |A[i, k]| (i >= k) with argmax, swaps it with row k through a
permutation matrix built from one-hot rows (a matmul by 0s and 1s, exact), flips the sign on a
real swap, multiplies the pivot into the product and eliminates below it. A zero pivot (a
singular matrix) makes the product 0; it is replaced by 1 only as the divisor, so no NaN
appears.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, ndim, static_shape


@converter("Det", since=11)
def det(ctx, node, ins, attrs):
    """det(x) over the last two dims of x (..., n, n)."""
    x = ins[0]
    if ndim(x) < 2:
        raise Unsupported(f"Det needs rank >= 2, got rank {ndim(x)}")
    shp = static_shape(x, "the input")
    n = shp[-1]
    if shp[-2] != n:
        raise Unsupported(f"Det needs square matrices, got {shp[-2]}x{n}")
    if dtype(x) not in ("float16", "float32", "float64"):
        raise Unsupported(f"Det of dtype {dtype(x)} is not supported (float dtypes are)")
    npdt = dt.to_numpy(dtype(x))
    batch = int(np.prod(shp[:-2], dtype=np.int64))
    a = ctx.op("reshape", x, shape=(batch, n, n))
    one, zero = ctx.const(np.array(1, npdt)), ctx.const(np.array(0, npdt))
    sign, prod = None, None
    rows = ctx.const(np.arange(n, dtype=np.int64)[None, :])                     # (1, n)
    for k in range(n):
        if k < n - 1:
            col = ctx.op("strided_slice", a, begin=(k, k), end=(n, k + 1), axes=(1, 2))   # (B, n-k, 1)
            p = ctx.op("add", ctx.op("argmax", ctx.op("abs", col), axis=1),
                       ctx.const(np.array([[k]], np.int64)))                      # (B, 1)
            e_p = ctx.op("cast", ctx.op("equal", rows, p), dtype=dtype(x))        # (B, n)
            e_k = np.zeros(n, npdt)
            e_k[k] = 1
            # P = I - e_k e_k^T - e_p e_p^T + e_k e_p^T + e_p e_k^T swaps rows k and p
            col_p, row_p = ctx.op("expand_dims", e_p, axis=2), ctx.op("expand_dims", e_p, axis=1)
            perm = ctx.op("subtract", ctx.const(np.eye(n, dtype=npdt) - np.outer(e_k, e_k)),
                          ctx.op("multiply", col_p, row_p))
            perm = ctx.op("add", perm, ctx.op("multiply", ctx.const(e_k[None, :, None]), row_p))
            perm = ctx.op("add", perm, ctx.op("multiply", col_p, ctx.const(e_k[None, None, :])))
            a = ctx.op("matmul", perm, a)
            swapped = ctx.op("not_equal", p, ctx.const(np.array([[k]], np.int64)))   # (B, 1)
            s = ctx.op("where", swapped, ctx.op("neg", one), one)
            sign = s if sign is None else ctx.op("multiply", sign, s)
        pivot = ctx.op("strided_slice", a, begin=(k, k), end=(k + 1, k + 1), axes=(1, 2))  # (B, 1, 1)
        prod = pivot if prod is None else ctx.op("multiply", prod, pivot)
        if k < n - 1:
            safe = ctx.op("where", ctx.op("equal", pivot, zero), one, pivot)
            below = ctx.op("strided_slice", a, begin=(k + 1,), end=(n,), axes=(1,))         # (B, n-k-1, n)
            factors = ctx.op("divide", ctx.op("strided_slice", below, begin=(k,), end=(k + 1,), axes=(2,)),
                             safe)                                                          # (B, n-k-1, 1)
            pivot_row = ctx.op("strided_slice", a, begin=(k,), end=(k + 1,), axes=(1,))     # (B, 1, n)
            below = ctx.op("subtract", below, ctx.op("multiply", factors, pivot_row))
            a = ctx.op("concat", ctx.op("strided_slice", a, begin=(0,), end=(k + 1,), axes=(1,)), below, axis=1)
    d = ctx.op("reshape", prod, shape=(batch,))
    if sign is not None:
        d = ctx.op("multiply", d, ctx.op("reshape", sign, shape=(batch,)))
    return ctx.op("reshape", d, shape=tuple(shp[:-2]))
