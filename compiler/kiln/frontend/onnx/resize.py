"""The general ONNX Resize: every mode, coordinate transformation, antialias, exclude_outside,
keep_aspect_ratio_policy, non-integral scales, any rank. ``nn.resize`` uses the ``resize2d``
operator when it can and falls back to this.

Resize is separable, and along one axis every output position is a fixed weighted sum of a
few input positions, all known at import time. So each resized axis becomes, per tap, a
``take`` of constant indices times constant weights, summed (nearest: one take). The taps
and weights follow the ONNX spec: the output index maps to a source coordinate ``x``
(coordinate_transformation_mode); the ``n`` taps start at ``left - n/2 + 1`` with ``left =
ceil(x) - 1`` (the left neighbour, ``x - 1`` when ``x`` is whole), the weights are the mode's
kernel at ``ratio = x - left``, and taps past the edges repeat the edge pixel.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import dtype as dt
from ...ir.expr import IntImm
from .common import Unsupported, dtype, scalar_like, static_shape

# ---- weights along one axis --------------------------------------------------------------


def _cubic_kernel(d, a):
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _weights(ratio, scale, mode, a, antialias, nearest_mode):
    """The tap weights (first tap at offset ``1 - n/2`` from the left neighbour) for one
    output position whose source lies ``ratio`` in (0, 1] past its left neighbour."""
    if mode == "nearest":
        if ratio == 1:
            return np.array([0.0, 1.0])
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": False, "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if right else np.array([1.0, 0.0])
    if not antialias:
        if mode == "linear":
            return np.array([1 - ratio, ratio])
        return _cubic_kernel(np.array([1 + ratio, ratio, 1 - ratio, 2 - ratio]), a)
    # antialias widens the kernel by 1/scale when downsampling
    s = min(scale, 1.0)
    reach = 1 if mode == "linear" else 2
    start = math.floor(-reach / s) + 1
    pos = (np.arange(start, 2 - start) - ratio) * s
    w = np.clip(1 - np.abs(pos), 0, 1) if mode == "linear" else _cubic_kernel(pos, a)
    return w / w.sum()


def _source(o, n_in, n_out, scale, ctm, roi):
    """Source coordinates of the output positions ``o`` (float64), and which of them lie
    outside the input (tf_crop_and_resize only, else None)."""
    out_w = scale * n_in
    if ctm == "align_corners":
        return (np.zeros_like(o) if out_w == 1 else o * (n_in - 1) / (out_w - 1)), None
    if ctm == "asymmetric":
        return o / scale, None
    if ctm == "pytorch_half_pixel":
        return (np.full_like(o, -0.5) if out_w == 1 else (o + 0.5) / scale - 0.5), None
    if ctm == "half_pixel":
        return (o + 0.5) / scale - 0.5, None
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_w)
        return offset + (o + 0.5) / scale - 0.5, None
    if ctm == "tf_crop_and_resize":
        lo, hi = roi
        if out_w == 1:
            x = np.full_like(o, (hi - lo) * (n_in - 1) / 2)
        else:
            x = o * (hi - lo) * (n_in - 1) / (out_w - 1)
        x = x + lo * (n_in - 1)
        return x, (x < 0) | (x > n_in - 1)
    raise Unsupported(f"coordinate_transformation_mode={ctm} is not supported")


def axis_taps(n_in, n_out, scale, p):
    """``(indices (n_out, n), weights (n_out, n), extrapolated mask or None)`` along one axis;
    ``p`` holds the node's attributes (mode, ctm, cubic_coeff_a, ...) and this axis' roi."""
    x, extrapolated = _source(np.arange(n_out, dtype=np.float64), n_in, n_out, scale, p["ctm"], p["roi"])
    left = np.ceil(x).astype(np.int64) - 1
    rows = [_weights(float(xi - li), scale, p["mode"], p["a"], p["antialias"], p["nearest_mode"])
            for xi, li in zip(x, left)]
    w = np.stack(rows)
    n = w.shape[1]
    idx = left[:, None] + np.arange(1 - n // 2, 1 - n // 2 + n)[None, :]
    if p["exclude_outside"]:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), w, extrapolated


# ---- the graph -------------------------------------------------------------------------------

def _axis_view(values, axis, r):
    return values.reshape([-1 if k == axis else 1 for k in range(r)])


def _resize_axis(ctx, x, axis, idx, w, extrapolated, extrapolation_value):
    r = len(x.ty.shape)
    hot = (w == 1.0).sum(axis=1) == 1
    if hot.all() and ((w == 0) | (w == 1)).all():          # nearest: one pixel per output
        y = ctx.op("take", x, ctx.const(idx[np.arange(len(idx)), w.argmax(axis=1)]), axis=axis)
    else:
        if not dt.is_float(dtype(x)):
            raise Unsupported(f"interpolating resize of {dtype(x)} data is not supported "
                              f"(float data is)")
        y = None
        npdt = dt.to_numpy(dtype(x))
        for k in range(w.shape[1]):
            if not w[:, k].any():
                continue
            t = ctx.op("take", x, ctx.const(idx[:, k]), axis=axis)
            t = ctx.op("multiply", t, ctx.const(_axis_view(w[:, k].astype(npdt), axis, r)))
            y = t if y is None else ctx.op("add", y, t)
    if extrapolated is not None and extrapolated.any():
        y = ctx.op("where", ctx.const(_axis_view(extrapolated, axis, r)),
                   scalar_like(ctx, extrapolation_value, y), y)
    return y


def _sizes_and_scales(ctx, x, ins, attrs):
    """Per dim: output size and scale (ONNX: sizes give scale = out/in, possibly evened out by
    keep_aspect_ratio_policy; scales give out = floor(in * scale))."""
    shape = static_shape(x)
    r = len(shape)
    axes = [a + r if a < 0 else a for a in attrs.get("axes", range(r))]
    scales = ctx.need_value(ins[2], "scales") if len(ins) > 2 and ins[2] is not None else None
    sizes = ctx.need_value(ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    if sizes is not None and np.asarray(sizes).size:
        out = list(shape)
        for a, s in zip(axes, np.asarray(sizes).reshape(-1)):
            out[a] = int(s)
        sc = [o / i for o, i in zip(out, shape)]
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = {"not_larger": min, "not_smaller": max}.get(policy)
            if pick is None:
                raise Unsupported(f"keep_aspect_ratio_policy={policy!r} is not supported")
            s = pick(sc[a] for a in axes)
            sc = [s if k in axes else 1.0 for k in range(r)]
            out = [int(s * shape[k] + 0.5) if k in axes else shape[k] for k in range(r)]
        return out, sc, axes
    if scales is None or not np.asarray(scales).size:
        raise Unsupported("Resize needs constant scales or sizes")
    sc = [1.0] * r
    for a, s in zip(axes, np.asarray(scales).reshape(-1)):
        sc[a] = float(s)
    return [int(i * s) for i, s in zip(shape, sc)], sc, axes


def _symbolic_nearest(ctx, x, ins, attrs):
    """Nearest-neighbour upsampling by integer scales of an input with symbolic dims: output
    index i reads input i // s, so each axis is ``expand_dims`` + ``broadcast_to`` (s copies)
    + ``reshape`` (n * s: a derived dim). Exact for half_pixel / pytorch_half_pixel with
    round_prefer_floor / round_prefer_ceil (the source coordinate is within 0.5 of i // s, never
    on a tie) and for asymmetric with floor. None when the model asks for anything else."""
    from .symbolic import as_int_or_expr
    scales = ctx.value(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    sizes = ins[3] if len(ins) > 3 else None
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    ok = {("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
          ("pytorch_half_pixel", "round_prefer_floor"), ("pytorch_half_pixel", "round_prefer_ceil"),
          ("asymmetric", "floor")}
    if (attrs.get("mode", "nearest") != "nearest" or (ctm, nearest) not in ok or sizes is not None
            or scales is None or attrs.get("antialias", 0) or "axes" in attrs):
        return None
    sc = np.asarray(scales, np.float64).reshape(-1)
    if sc.size != ndim_of(x) or any(v < 1 or v != int(v) for v in sc):
        return None
    y = x
    for a, s in enumerate(int(v) for v in sc):
        if s == 1:
            continue
        shape = [as_int_or_expr(d) if not isinstance(d, int) else d for d in y.ty.shape]
        t = ctx.op("expand_dims", y, axis=a + 1)
        t = ctx.op("broadcast_to", t, shape=tuple(shape[:a + 1] + [s] + shape[a + 1:]))
        y = ctx.op("reshape", t, shape=tuple(shape[:a] + [shape[a] * s] + shape[a + 1:]))
    return y


def ndim_of(x) -> int:
    return len(x.ty.shape)


def general_resize(ctx, node, ins, attrs):
    """ONNX Resize as per-axis weighted takes (see the module docstring)."""
    x = ins[0]
    if any(not isinstance(d, IntImm) for d in x.ty.shape):
        y = _symbolic_nearest(ctx, x, ins, attrs)
        if y is not None:
            return y
    shape = static_shape(x)
    r = len(shape)
    out, sc, axes = _sizes_and_scales(ctx, x, ins, attrs)
    roi = None
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    if ctm == "tf_crop_and_resize":
        rv = np.asarray(ctx.need_value(ins[1], "roi"), np.float64).reshape(-1)
        full = [0.0] * r + [1.0] * r
        for k, a in enumerate(axes):
            full[a], full[r + a] = rv[k], rv[len(axes) + k]
        roi = full
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"mode={mode!r} is not supported")
    if mode == "nearest" and attrs.get("antialias", 0):
        raise Unsupported("antialias=1 with mode=nearest is not defined")
    p = {"mode": mode, "ctm": ctm, "a": attrs.get("cubic_coeff_a", -0.75),
         "antialias": bool(attrs.get("antialias", 0)),
         "exclude_outside": bool(attrs.get("exclude_outside", 0)),
         "nearest_mode": attrs.get("nearest_mode", "round_prefer_floor")}
    y = x
    for a in axes:
        axis_roi = None if roi is None else (roi[a], roi[r + a])
        if math.isclose(sc[a], 1.0) and out[a] == shape[a] and \
                (axis_roi is None or (math.isclose(axis_roi[0], 0) and math.isclose(axis_roi[1], 1))):
            continue        # identity along this axis
        idx, w, extrapolated = axis_taps(shape[a], out[a], sc[a], dict(p, roi=axis_roi))
        y = _resize_axis(ctx, y, a, idx, w, extrapolated, attrs.get("extrapolation_value", 0.0))
    return y
