"""ONNX RoiAlign from graph ops, with the regions of interest known only at run time.

Bilinear sampling is separable: a sample's four taps weigh y and x independently (and a sample
outside the map, y < -1 or y > H or likewise x, weighs 0 along that axis). So each roi gets an
interpolation matrix per axis, (pooled * sampling_ratio, H) and (.., W), built from one-hot rows
of the low and high taps; the samples are then ``Wy @ X[b] @ Wx^T``. Average mode sums the
matrices over each bin's samples first; max mode keeps the four taps apart (the ONNX reference
takes the largest weighted tap) and reduces the samples of each bin with max.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, static_shape


def _axis_taps(ctx, v, size, npdt):
    """Low- and high-tap interpolation rows (R, S, size) for sample coordinates v (R, S)."""
    c = lambda a: ctx.const(np.array(a, npdt))  # noqa: E731
    valid = ctx.op("logical_and", ctx.op("greater_equal", v, c(-1.0)), ctx.op("less_equal", v, c(size)))
    vc = ctx.op("maximum", v, c(0.0))
    low = ctx.op("floor", vc)
    at_end = ctx.op("greater_equal", low, c(size - 1))
    low = ctx.op("where", at_end, c(size - 1), low)
    vc = ctx.op("where", at_end, low, vc)
    high = ctx.op("where", at_end, low, ctx.op("add", low, c(1.0)))
    sdt = str(np.dtype(npdt))
    inside = ctx.op("cast", valid, dtype=sdt)
    frac = ctx.op("multiply", ctx.op("subtract", vc, low), inside)     # the high tap's weight
    rest = ctx.op("subtract", inside, frac)                            # the low tap's weight
    grid = ctx.const(np.arange(size, dtype=npdt)[None, None, :])

    def row(pos, w):
        hit = ctx.op("cast", ctx.op("equal", grid, ctx.op("expand_dims", pos, axis=2)), dtype=sdt)
        return ctx.op("multiply", hit, ctx.op("expand_dims", w, axis=2))
    return row(low, rest), row(high, frac)


@converter("RoiAlign", since=10)
def roi_align(ctx, node, ins, attrs):
    """(R, C, output_height, output_width): each roi of X[batch_indices[r]] pooled over a grid of
    sampling_ratio^2 bilinear samples per bin (avg or max)."""
    x, rois, bidx = ins[:3]
    n, ch, h, w = static_shape(x, "X")
    r = static_shape(rois, "rois")[0]
    ph, pw = attrs.get("output_height", 1), attrs.get("output_width", 1)
    sr = attrs.get("sampling_ratio", 0)
    if sr <= 0:
        raise Unsupported("sampling_ratio=0 (adaptive) makes the number of samples depend on each "
                          "roi's size at run time; a fixed sampling_ratio is supported")
    mode = attrs.get("mode", "avg")
    if mode not in ("avg", "max"):
        raise Unsupported(f"mode={mode!r} is not avg or max")
    default_ctm = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    half_pixel = attrs.get("coordinate_transformation_mode", default_ctm) == "half_pixel"
    npdt = dt.to_numpy(dtype(x))
    sdt = str(np.dtype(npdt))
    c = lambda a: ctx.const(np.array(a, npdt))  # noqa: E731
    box = ctx.op("subtract", ctx.op("multiply", ctx.op("cast", rois, dtype=sdt), c(attrs.get("spatial_scale", 1.0))),
                 c(0.5 if half_pixel else 0.0))

    def coords(start_col, end_col, pooled):
        lo = ctx.op("strided_slice", box, begin=(start_col,), end=(start_col + 1,), axes=(1,))  # (R, 1)
        hi = ctx.op("strided_slice", box, begin=(end_col,), end=(end_col + 1,), axes=(1,))
        extent = ctx.op("subtract", hi, lo)
        if not half_pixel:
            extent = ctx.op("maximum", extent, c(1.0))
        step = ctx.op("divide", extent, c(float(pooled)))
        k = (np.arange(pooled)[:, None] + (np.arange(sr)[None, :] + 0.5) / sr).reshape(-1)
        return ctx.op("add", lo, ctx.op("multiply", step, ctx.const(k.astype(npdt)[None, :])))   # (R, P*sr)
    ys_low, ys_high = _axis_taps(ctx, coords(1, 3, ph), h, npdt)
    xs_low, xs_high = _axis_taps(ctx, coords(0, 2, pw), w, npdt)
    xr = ctx.op("take", x, bidx, axis=0)                                                          # (R, C, H, W)

    def sample(wy, wx):  # (R, C, Py, Px) = wy @ X[b] @ wx^T
        t = ctx.op("matmul", ctx.op("expand_dims", wy, axis=1), xr)
        return ctx.op("matmul", t, ctx.op("expand_dims", ctx.op("permute_dims", wx, axes=(0, 2, 1)), axis=1))
    if mode == "avg":
        def binned(a, b, pooled, size):
            s = ctx.op("add", a, b)
            return ctx.op("sum", ctx.op("reshape", s, shape=(r, pooled, sr, size)), axis=(2,))
        y = sample(binned(ys_low, ys_high, ph, h), binned(xs_low, xs_high, pw, w))
        return ctx.op("divide", y, c(float(sr * sr)))
    taps = [sample(a, b) for a in (ys_low, ys_high) for b in (xs_low, xs_high)]
    best = taps[0]
    for t in taps[1:]:
        best = ctx.op("maximum", best, t)
    best = ctx.op("reshape", best, shape=(r, ch, ph, sr, pw, sr))
    return ctx.op("max", best, axis=(3, 5))
