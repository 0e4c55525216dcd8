"""MaxPool's second output, Indices: where in the input each 2-D window's maximum sits.

Every kernel tap is one strided slice of the input padded with -inf; a running comparison over
the taps (strictly greater, so the first maximum wins, as in onnxruntime and the ONNX
reference) keeps the value and a constant map of the tap's flat input index. Indices count
in the whole (N, C, H, W) tensor, row-major, or with H and W swapped (column-major) when
``storage_order`` is 1.
"""
from __future__ import annotations

import numpy as np

from .common import Unsupported, static_shape


def max_pool_with_indices(ctx, x, y, kernel, strides, dil, pads, storage_order):
    """(y, indices) for a 4-D x already pooled into y (N, C, OH, OW)."""
    if len(kernel) != 2:
        raise Unsupported("the Indices output is supported for 1-D and 2-D pooling")
    n, c, h, w = static_shape(x, "the input")
    oh, ow = static_shape(y)[2:]
    need = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip((oh, ow), strides, kernel, dil)]
    ends = [max(pads[2 + a], need[a] - (h, w)[a] - pads[a]) for a in range(2)]
    xp = ctx.op("pad", x, pad_width=((0, 0), (0, 0), (pads[0], ends[0]), (pads[1], ends[1])),
                pad_value=float("-inf"))
    rows = np.arange(oh)[:, None] * strides[0] - pads[0]
    cols = np.arange(ow)[None, :] * strides[1] - pads[1]
    best_v = best_i = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            b0, b1 = i * dil[0], j * dil[1]
            v = ctx.op("strided_slice", xp, begin=(b0, b1), end=(b0 + (oh - 1) * strides[0] + 1,
                                                               b1 + (ow - 1) * strides[1] + 1),
                       strides=tuple(strides), axes=(2, 3))
            r, q = rows + b0, cols + b1
            flat = (q * h + r) if storage_order else (r * w + q)
            idx = ctx.const(flat.astype(np.int64)[None, None])
            if best_v is None:
                best_v, best_i = v, ctx.op("broadcast_to", idx, shape=(n, c, oh, ow))
                continue
            better = ctx.op("greater", v, best_v)
            best_v = ctx.op("where", better, v, best_v)
            best_i = ctx.op("where", better, idx, best_i)
    offset = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * (h * w)
    return y, ctx.op("add", best_i, ctx.const(offset.astype(np.int64)[:, :, None, None]))
