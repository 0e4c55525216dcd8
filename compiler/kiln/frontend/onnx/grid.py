"""Sampling grids: AffineGrid and GridSample (2-D and 3-D), from existing graph ops.

AffineGrid is one matmul of the constant base grid (normalised pixel centres, plus 1) with
the transposed thetas. GridSample follows the ONNX reference step by step: denormalise the
grid, (nearest: round half to even), move coordinates that fall outside the borders (border:
clamp, reflection: reflect), then for every tap of the interpolation kernel (nearest 1,
linear 2, cubic 4 per dim) fetch the pixel -- zeros outside the input, or the clamped /
reflected index -- with one ``take`` on the input viewed as ``(N * pixels, C)``, and sum the
taps weighted by the product of their per-dim weights.
"""
from __future__ import annotations

import itertools

import numpy as np

from .common import Unsupported, converter, dtype, scalar_like, static_shape


# ---- AffineGrid ------------------------------------------------------------------------------

def _base_coords(size, align_corners):
    """Normalised coordinates of the pixel centres along a dim of ``size``."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.array([-1.0])
    return (np.arange(size) * 2.0 + 1.0) / size - 1.0


@converter("AffineGrid", since=20)
def affine_grid(ctx, node, ins, attrs):
    """``grid[n, (d,) h, w] = theta[n] @ (x_w, y_h, (z_d,) 1)``: (N, (D,) H, W, 2 or 3)."""
    theta, size = ins
    sizes = [int(v) for v in np.asarray(ctx.need_value(size, "size")).reshape(-1)]
    sp = sizes[2:]
    if len(sp) not in (2, 3):
        raise Unsupported(f"size {sizes} must be (N, C, H, W) or (N, C, D, H, W)")
    ac = attrs.get("align_corners", 0)
    axes = [_base_coords(s, ac) for s in sp]
    mesh = np.meshgrid(*axes, indexing="ij")                 # per dim, (D,) H, W
    # homogeneous points, x (along W) first: (pixels, nsp + 1)
    pts = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=1)
    base = ctx.const(pts.astype(np.dtype(dtype(theta))))
    grid = ctx.op("matmul", base, ctx.op("permute_dims", theta, axes=(0, 2, 1)))
    return ctx.op("reshape", grid, shape=(sizes[0],) + tuple(sp) + (len(sp),))


# ---- GridSample ------------------------------------------------------------------------------

def _c(ctx, v, like):
    return scalar_like(ctx, v, like)


def _reflect(ctx, x, lo, hi):
    """Reflect ``x`` off the borders ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    below = ctx.op("less", x, _c(ctx, lo, x))
    dx = ctx.op("where", below, ctx.op("subtract", _c(ctx, lo, x), x), ctx.op("subtract", x, _c(ctx, hi, x)))
    n = ctx.op("floor", ctx.op("divide", dx, _c(ctx, span, x)))
    r = ctx.op("subtract", dx, ctx.op("multiply", n, _c(ctx, span, x)))
    half = ctx.op("multiply", n, _c(ctx, 0.5, x))
    even = ctx.op("equal", ctx.op("floor", half), half)
    from_lo, from_hi = ctx.op("add", _c(ctx, lo, x), r), ctx.op("subtract", _c(ctx, hi, x), r)
    return ctx.op("where", below, ctx.op("where", even, from_lo, from_hi),
                  ctx.op("where", even, from_hi, from_lo))


def _coordinate(ctx, g, size, p):
    """Denormalised, rounded (nearest) and border-adjusted coordinate along one dim."""
    if p["ac"]:
        x = ctx.op("multiply", ctx.op("add", g, _c(ctx, 1, g)), _c(ctx, (size - 1) / 2.0, g))
        lo, hi = 0.0, size - 1.0
    else:
        x = ctx.op("divide", ctx.op("subtract", ctx.op("multiply", ctx.op("add", g, _c(ctx, 1, g)),
                                                       _c(ctx, size, g)), _c(ctx, 1, g)), _c(ctx, 2, g))
        lo, hi = -0.5, size - 0.5
    if p["mode"] == "nearest":
        x = ctx.op("round", x)
    if p["padding"] == "zeros":
        return x
    outside = ctx.op("logical_or", ctx.op("less", x, _c(ctx, lo, x)), ctx.op("greater", x, _c(ctx, hi, x)))
    moved = (ctx.op("clip", x, min=0.0, max=float(size - 1)) if p["padding"] == "border"
             else _reflect(ctx, x, lo, hi))
    return ctx.op("where", outside, moved, x)


def _cubic_weights(ctx, t):
    """Keys' cubic kernel (a = -0.75) at the distances 1 + t, t, 1 - t, 2 - t of the four taps."""
    a = -0.75
    c = lambda v: _c(ctx, v, t)  # noqa: E731
    one_minus = ctx.op("subtract", c(1), t)
    out = []
    for d, near in ((ctx.op("add", t, c(1)), False), (t, True), (one_minus, True),
                    (ctx.op("add", one_minus, c(1)), False)):
        if near:        # (a + 2) d^3 - (a + 3) d^2 + 1
            w = ctx.op("subtract", ctx.op("multiply", d, c(a + 2)), c(a + 3))
            w = ctx.op("add", ctx.op("multiply", w, ctx.op("multiply", d, d)), c(1))
        else:           # ((a d - 5a) d + 8a) d - 4a
            w = ctx.op("multiply", ctx.op("subtract", ctx.op("multiply", d, c(a)), c(5 * a)), d)
            w = ctx.op("subtract", ctx.op("multiply", ctx.op("add", w, c(8 * a)), d), c(4 * a))
        out.append(w)
    return out


def _taps(ctx, x, p):
    """(float index, weight) pairs of the interpolation kernel at coordinate ``x``."""
    if p["mode"] == "nearest":
        return [(x, None)]
    x0 = ctx.op("floor", x)
    t = ctx.op("subtract", x, x0)
    if p["mode"] == "linear":
        return [(x0, ctx.op("subtract", _c(ctx, 1, t), t)), (ctx.op("add", x0, _c(ctx, 1, t)), t)]
    return [(ctx.op("add", x0, _c(ctx, k, x0)), w) for k, w in zip((-1, 0, 1, 2), _cubic_weights(ctx, t))]


def _pixel_index(ctx, i, size, p):
    """int64 index to read for float index ``i``, and (zeros padding) a 0/1 validity weight."""
    lo, hi = (0.0, size - 1.0) if p["ac"] else (-0.5, size - 0.5)
    valid = None
    if p["padding"] == "zeros":
        inside = ctx.op("logical_and", ctx.op("greater_equal", i, _c(ctx, 0, i)),
                        ctx.op("less", i, _c(ctx, size, i)))
        valid = ctx.op("cast", inside, dtype=dtype(i))
    elif p["padding"] == "reflection":
        i = ctx.op("where", ctx.op("logical_or", ctx.op("less", i, _c(ctx, lo, i)),
                                   ctx.op("greater", i, _c(ctx, hi, i))), _reflect(ctx, i, lo, hi), i)
    idx = ctx.op("cast", ctx.op("clip", i, min=0.0, max=float(size - 1)), dtype="int64")
    return idx, valid


def _mul(ctx, a, b):
    if a is None:
        return b
    return a if b is None else ctx.op("multiply", a, b)


@converter("GridSample", since=16)
def grid_sample(ctx, node, ins, attrs):
    """Sample X (N, C, (D,) H, W) at grid (N, (D',) H', W', 2 or 3) -> (N, C, (D',) H', W')."""
    x, grid = ins
    xs, gs = static_shape(x), static_shape(grid, "grid")
    n, c, sp = xs[0], xs[1], xs[2:]
    nsp = len(sp)
    mode = attrs.get("mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)      # opset 16 names
    padding = attrs.get("padding_mode", "zeros")
    if nsp not in (2, 3) or gs[-1] != nsp or mode not in ("nearest", "linear", "cubic") or \
            padding not in ("zeros", "border", "reflection") or (mode == "cubic" and nsp != 2):
        raise Unsupported(f"{nsp}-D input with mode={mode}, padding_mode={padding} is not supported")
    p = {"ac": attrs.get("align_corners", 0), "mode": mode, "padding": padding}
    if dtype(grid) != dtype(x):
        grid = ctx.op("cast", grid, dtype=dtype(x))
    taps = []
    for i, size in enumerate(sp):               # data dim i is grid component nsp - 1 - i
        k = nsp - 1 - i
        g = ctx.op("squeeze", ctx.op("strided_slice", grid, begin=(k,), end=(k + 1,), axes=(-1,)), axis=(-1,))
        taps.append(_taps(ctx, _coordinate(ctx, g, size, p), p))
    pixels = int(np.prod(sp))
    strides = [int(np.prod(sp[i + 1:])) for i in range(nsp)]
    flat = ctx.op("reshape", ctx.op("permute_dims", x, axes=(0,) + tuple(range(2, 2 + nsp)) + (1,)),
                  shape=(n * pixels, c))
    out_sp = gs[1:-1]
    batch = ctx.const((np.arange(n, dtype=np.int64) * pixels).reshape((n,) + (1,) * len(out_sp)))
    y = None
    for combo in itertools.product(*taps):
        lin, w = batch, None
        for i, (fi, wi) in enumerate(combo):
            idx, valid = _pixel_index(ctx, fi, sp[i], p)
            lin = ctx.op("add", lin, ctx.op("multiply", idx, ctx.const(np.int64(strides[i]))))
            w = _mul(ctx, _mul(ctx, w, wi), valid)
        v = ctx.op("take", flat, lin, axis=0)                            # (N, out..., C)
        if w is not None:
            v = ctx.op("multiply", v, ctx.op("expand_dims", w, axis=len(out_sp) + 1))
        y = v if y is None else ctx.op("add", y, v)
    return ctx.op("permute_dims", y, axes=(0, len(out_sp) + 1) + tuple(range(1, len(out_sp) + 1)))
