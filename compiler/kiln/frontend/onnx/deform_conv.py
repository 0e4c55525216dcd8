"""ONNX DeformConv (2-D): every kernel tap reads the input at its regular position moved by a
run-time offset, bilinearly (zeros outside), optionally scaled by a mask, then the taps are
contracted with the weight.

The sampling is GridSample's (grid.py; align_corners=1, zeros padding, as the ONNX reference
calls it) over a grid of (kernel taps x output positions), the offset groups folded into the
batch; the contraction is a batched matmul of the weight (g, OC/g, C/g * K) with the samples
(N, g, C/g * K, OH * OW).
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, ndim, static_shape
from .grid import grid_sample


@converter("DeformConv", since=19)
def deform_conv(ctx, node, ins, attrs):
    """(N, OC, OH, OW) from X (N, C, H, W), W (OC, C/group, kh, kw), offset
    (N, offset_group * kh * kw * 2, OH, OW), optional B (OC) and mask (N, offset_group * kh * kw, OH, OW)."""
    ins = list(ins) + [None] * (5 - len(ins))
    x, w, off, bias, mask = ins[:5]
    if ndim(x) != 4:
        raise Unsupported(f"only 2-D DeformConv is supported, got a {ndim(x)}-D input")
    n, c, h, wd = static_shape(x, "X")
    oc, cg, kh, kw = static_shape(w, "W")
    oh, ow = static_shape(off, "offset")[2:]
    if h < 2 or wd < 2:
        raise Unsupported("the input's spatial dims must be at least 2")
    group, og = attrs.get("group", 1), attrs.get("offset_group", 1)
    s0, s1 = attrs.get("strides", [1, 1])
    d0, d1 = attrs.get("dilations", [1, 1])
    p0, p1 = attrs.get("pads", [0, 0, 0, 0])[:2]
    k = kh * kw
    if c != cg * group or oc % group or c % og or static_shape(off)[1] != og * k * 2:
        raise Unsupported(f"X {(n, c, h, wd)}, W {(oc, cg, kh, kw)}, offset {static_shape(off)} do not fit "
                          f"group={group}, offset_group={og}")
    npdt = dt.to_numpy(dtype(x))
    off = ctx.op("reshape", off, shape=(n, og, k, 2, oh, ow))
    ki, kj = np.meshgrid(np.arange(kh) * d0, np.arange(kw) * d1, indexing="ij")
    base_h = ki.reshape(k, 1, 1) + (np.arange(oh) * s0 - p0).reshape(1, oh, 1)
    base_w = kj.reshape(k, 1, 1) + (np.arange(ow) * s1 - p1).reshape(1, 1, ow)

    def normalised(comp, base, size):  # pixel coordinate -> GridSample's [-1, 1] (align_corners)
        o = ctx.op("squeeze", ctx.op("strided_slice", off, begin=(comp,), end=(comp + 1,), axes=(3,)), axis=(3,))
        pos = ctx.op("add", o, ctx.const(np.broadcast_to(base, (k, oh, ow)).astype(npdt)))
        return ctx.op("subtract", ctx.op("multiply", pos, ctx.const(np.array(2.0 / (size - 1), npdt))),
                      ctx.const(np.array(1.0, npdt)))                       # (N, og, K, OH, OW)
    gy, gx = normalised(0, base_h, h), normalised(1, base_w, wd)
    grid = ctx.op("concat", ctx.op("expand_dims", gx, axis=5), ctx.op("expand_dims", gy, axis=5), axis=5)
    # the offset groups folded into the batch: one GridSample for all of them
    per = c // og
    xg = ctx.op("reshape", x, shape=(n * og, per, h, wd))
    grid = ctx.op("reshape", grid, shape=(n * og, k * oh, ow, 2))
    v = grid_sample(ctx, node, [xg, grid], {"align_corners": 1, "mode": "linear", "padding_mode": "zeros"})
    v = ctx.op("reshape", v, shape=(n, og, per, k, oh, ow))
    if mask is not None:
        v = ctx.op("multiply", v, ctx.op("reshape", mask, shape=(n, og, 1, k, oh, ow)))
    # the convolution groups as a batch of matmuls: (g, OC/g, C/g * K) @ (N, g, C/g * K, OH * OW)
    v = ctx.op("reshape", v, shape=(n, group, cg * k, oh * ow))
    wg = ctx.op("reshape", w, shape=(1, group, oc // group, cg * k))
    y = ctx.op("matmul", wg, v)                                                # (N, g, OC/g, OH*OW)
    y = ctx.op("reshape", y, shape=(n, oc, oh, ow))
    if bias is not None:
        y = ctx.op("add", y, ctx.op("reshape", bias, shape=(1, oc, 1, 1)))
    return y
