"""Linear (de)quantization to 8- and 16-bit integers: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear and QLinearMatMul, as float arithmetic plus round, clip and cast.

Scales and zero points are per tensor (one value), per axis (a vector along ``axis``) or
blocked (``block_size``: each value covers that many consecutive elements along ``axis``);
blocked ones are repeated along the axis with a constant-index ``take``. The arithmetic and
its rounding (half to even) follow the ONNX reference, dtype by dtype, so results are exact.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from . import narrow_float
from .common import Unsupported, converter, dtype, kiln_dtype, ndim, norm_axis, scalar_like, static_shape

_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767), "uint16": (0, 65535)}
_RANGES.update({"uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1)})


def _broadcastable(ctx, v, x, axis, block):
    """Scale or zero point ``v`` reshaped (per axis) or repeated (blocked) to broadcast
    against ``x``; a one-element ``v`` becomes a scalar."""
    if v is None:
        return None
    shp = static_shape(v, "scale/zero point")
    n = ndim(x)
    if int(np.prod(shp)) == 1:
        return ctx.op("reshape", v, shape=())
    axis = norm_axis(axis, n)
    if not block:
        return ctx.op("reshape", v, shape=tuple(-1 if k == axis else 1 for k in range(n)))
    d = static_shape(x)[axis]
    idx = np.arange(d, dtype=np.int64) // block
    return ctx.op("take", v, ctx.const(idx), axis=axis)


def _cast(ctx, e, to):
    return e if dtype(e) == to else ctx.op("cast", e, dtype=to)


def _saturate(ctx, y, target):
    """Round half to even, clip to ``target``'s range, cast (y is float)."""
    if target not in _RANGES:
        raise Unsupported(f"quantizing to {target} is not supported (uint8, int8, int16, uint16 and the "
                          "packed 2- and 4-bit integers are)")
    lo, hi = _RANGES[target]
    return ctx.op("cast", ctx.op("clip", ctx.op("round", y), min=float(lo), max=float(hi)), dtype=target)


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx, node, ins, attrs):
    """``saturate(round(x / scale) + zero_point)``, to the zero point's dtype (uint8 by
    default, or ``output_dtype``)."""
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    axis, block = attrs.get("axis", 1), attrs.get("block_size", 0)
    target = dtype(zp) if zp is not None else kiln_dtype(attrs.get("output_dtype", 2) or 2, "output_dtype: ")
    if dt.is_narrow_float(dtype(x)):
        x = _cast(ctx, x, "float32")
    s = _cast(ctx, _broadcastable(ctx, scale, x, axis, block), dtype(x))
    if dt.is_narrow_float(target):
        # float8: x / scale rounded, saturated unless saturate=0, no zero point; float4 (which
        # always saturates) adds its zero point first, as the reference does
        y = ctx.op("divide", x, s)
        if target == "float4_e2m1fn" and zp is not None:
            y = ctx.op("add", y, _cast(ctx, _broadcastable(ctx, zp, x, axis, block), dtype(x)))
        return narrow_float.cast(ctx, y, target, bool(attrs.get("saturate", 1)))
    y = ctx.op("round", ctx.op("divide", x, s))
    if zp is not None:
        y = ctx.op("add", y, _cast(ctx, _broadcastable(ctx, zp, x, axis, block), dtype(x)))
    return _saturate(ctx, y, target)


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx, node, ins, attrs):
    """``(float32(x) - zero_point) * scale``, in the scale's dtype (or ``output_dtype``)."""
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    axis, block = attrs.get("axis", 1), attrs.get("block_size", 0)
    out = kiln_dtype(attrs["output_dtype"], "output_dtype: ") if attrs.get("output_dtype") else dtype(scale)
    y = _cast(ctx, x, "float32")
    if zp is not None:
        y = ctx.op("subtract", y, _cast(ctx, _broadcastable(ctx, zp, x, axis, block), "float32"))
    y = ctx.op("multiply", y, _cast(ctx, _broadcastable(ctx, scale, x, axis, block), "float32"))
    return _cast(ctx, y, out)


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx, node, ins, attrs):
    """uint8 with scale ``(max(x, 0) - min(x, 0)) / 255`` and the zero point that maps 0
    exactly: (y, y_scale, y_zero_point)."""
    x = ins[0]
    if dtype(x) != "float32":
        raise Unsupported(f"x must be float32, got {dtype(x)}")
    zero = scalar_like(ctx, 0, x)
    hi = ctx.op("maximum", ctx.op("max", x), zero)
    lo = ctx.op("minimum", ctx.op("min", x), zero)
    span = ctx.op("where", ctx.op("equal", hi, lo), scalar_like(ctx, 1.0, x), ctx.op("subtract", hi, lo))
    scale = ctx.op("divide", span, scalar_like(ctx, 255.0, x))
    zp = ctx.op("round", ctx.op("clip", ctx.op("neg", ctx.op("divide", lo, scale)), min=0.0, max=255.0))
    y = ctx.op("add", ctx.op("round", ctx.op("divide", x, scale)), zp)
    return [_saturate(ctx, y, "uint8"), scale, ctx.op("cast", zp, dtype="uint8")]


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx, node, ins, attrs):
    """``saturate(round(((a - a_zp) @ (b - b_zp)) * (a_scale * b_scale / y_scale)) + y_zp)``:
    an exact int32 matmul, rescaled in float64 as the ONNX reference does."""
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = ins
    if not dt.is_int(dtype(a)) or not dt.is_int(dtype(b)):
        raise Unsupported(f"a and b must be integers, got {dtype(a)} and {dtype(b)}")
    ai = ctx.op("subtract", _cast(ctx, a, "int32"), _cast(ctx, ctx.op("reshape", a_zp, shape=()), "int32"))
    bi = ctx.op("subtract", _cast(ctx, b, "int32"), _cast(ctx, ctx.op("reshape", b_zp, shape=()), "int32"))
    acc = ctx.op("matmul", ai, bi)
    # the factor is computed in the scales' dtype, then everything in float64
    factor = ctx.op("divide", ctx.op("multiply", a_s, b_s), y_s)
    factor = _cast(ctx, ctx.op("reshape", factor, shape=()), "float64")
    y = ctx.op("multiply", _cast(ctx, acc, "float64"), factor)
    y = ctx.op("add", y, _cast(ctx, ctx.op("reshape", y_zp, shape=()), "float64"))
    return _saturate(ctx, y, dtype(y_zp))
