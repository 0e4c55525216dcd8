"""ONNX integer convolution and matmul: ConvInteger, MatMulInteger, QLinearConv.

MatMulInteger is an int32 matmul of the zero-point-shifted operands. The convolutions run the
operator library's float conv in float64 on the shifted integers: every product and partial
sum of 8-bit operands is an integer far below 2^53, so the float64 result is the exact int32
accumulator the spec asks for; QLinearConv then rescales it in float64 as the ONNX reference.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, ndim, static_shape
from .nn import conv
from .quantize import _cast, _saturate


def _shifted(ctx, x, zp, to, channel_axis=None):
    """``x - zp`` in dtype ``to``; a per-channel ``zp`` (1-D, more than one element) lines up
    with ``channel_axis`` of x."""
    x = _cast(ctx, x, to)
    if zp is None:
        return x
    shp = static_shape(zp, "the zero point")
    if int(np.prod(shp)) == 1:
        zp = ctx.op("reshape", zp, shape=())
    elif channel_axis is not None and len(shp) == 1:
        zp = ctx.op("reshape", zp, shape=tuple(-1 if a == channel_axis else 1 for a in range(ndim(x))))
    return ctx.op("subtract", x, _cast(ctx, zp, to))


def _check_int(*xs):
    for x in xs:
        if not dt.is_int(dtype(x)):
            raise Unsupported(f"the operands must be 8-bit integers, got {dtype(x)}")


@converter("MatMulInteger", since=10)
def matmul_integer(ctx, node, ins, attrs):
    """(A - a_zero_point) @ (B - b_zero_point) in int32; a per-row a_zero_point (M,) and a
    per-column b_zero_point (N,) are allowed."""
    a, b = ins[0], ins[1]
    a_zp = ins[2] if len(ins) > 2 else None
    b_zp = ins[3] if len(ins) > 3 else None
    _check_int(a, b)
    ai = _shifted(ctx, a, a_zp, "int32", channel_axis=ndim(a) - 2)
    bi = _shifted(ctx, b, b_zp, "int32", channel_axis=ndim(b) - 1)
    return ctx.op("matmul", ai, bi)


def _int_conv(ctx, node, x, x_zp, w, w_zp, attrs):
    """The exact integer accumulator of conv(x - x_zp, w - w_zp), as float64."""
    _check_int(x, w)
    xf = _shifted(ctx, x, x_zp, "float64")
    wf = _shifted(ctx, w, w_zp, "float64", channel_axis=0)
    return conv(ctx, node, [xf, wf], attrs)


@converter("ConvInteger", since=10)
def conv_integer(ctx, node, ins, attrs):
    """conv(x - x_zero_point, w - w_zero_point) as int32 (w_zero_point may be per output channel)."""
    x, w = ins[0], ins[1]
    x_zp = ins[2] if len(ins) > 2 else None
    w_zp = ins[3] if len(ins) > 3 else None
    return ctx.op("cast", _int_conv(ctx, node, x, x_zp, w, w_zp, attrs), dtype="int32")


@converter("QLinearConv", since=10)
def qlinear_conv(ctx, node, ins, attrs):
    """saturate(round((conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale) + y_zp),
    w_scale and w_zp per output channel or scalar."""
    ins = list(ins) + [None] * (9 - len(ins))
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = ins[:9]
    acc = _int_conv(ctx, node, x, x_zp, w, w_zp, attrs)
    nsp = ndim(acc) - 2
    if bias is not None:
        acc = ctx.op("add", acc, ctx.op("reshape", _cast(ctx, bias, "float64"), shape=(1, -1) + (1,) * nsp))
    ws = _cast(ctx, w_s, "float32")
    if len(static_shape(w_s, "w_scale")) == 1 and static_shape(w_s)[0] > 1:
        ws = ctx.op("reshape", ws, shape=(1, -1) + (1,) * nsp)
    else:
        ws = ctx.op("reshape", ws, shape=())
    # the factor in the scales' dtype (float32), then the rescale in float64, as the reference
    factor = ctx.op("divide", ctx.op("multiply", ctx.op("reshape", x_s, shape=()), ws),
                    ctx.op("reshape", y_s, shape=()))
    y = ctx.op("multiply", acc, _cast(ctx, factor, "float64"))
    target = dtype(y_zp) if y_zp is not None else dtype(x)
    if y_zp is not None:
        y = ctx.op("add", y, _cast(ctx, ctx.op("reshape", y_zp, shape=()), "float64"))
    return _saturate(ctx, y, target)
