"""3-D convolution and pooling (``conv3d``, ``max_pool3d``, ``avg_pool3d``) on the operator
library's 2-D ones: Kiln has no 3-D kernels, and these need none.

A 3-D convolution is one ``conv2d`` over depth windows: the ``KD`` depth taps of every output
depth are stacked into the channels (``(N * D_out, KD * C, H, W)``, grouped as ``(g, KD, C/g)``
so each group still sees only its own channels) and the weight is laid out to match
(``(O, KD * C/g, KH, KW)``, folded at compile time). 3-D pooling is separable and reuses the
ONNX importer's decomposition (pool H and W with D folded into the channels, then D).
"""
from __future__ import annotations

from ...ir.expr import PrimExpr
from .common import Ctx, NotComputed, bind, converter, is_static, shape
from .errors import Unsupported


def _triple(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(int(x) for x in (v * 3 if len(v) == 1 else v))


def _mul(a, b):
    if is_static(a) and is_static(b):
        return a * b
    return (a if isinstance(a, PrimExpr) else b) * (b if isinstance(a, PrimExpr) else a)


def conv3d(ctx: Ctx, x, w, stride, padding, dilation, groups: int):
    """``F.conv3d(x, w)`` without bias, as one ``conv2d`` (see the module docstring)."""
    n, c, d, h, wd = shape(x)
    o, cg, kd, kh, kw = shape(w)
    if not all(is_static(v) for v in (c, d, o, cg, kd, kh, kw)):
        raise Unsupported("3-D convolution needs static channels, depth and kernel")
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = stride, padding, dilation
    d_out = ctx.out_size(2)
    if pd:
        x = ctx.op("pad", x, pad_width=((0, 0), (0, 0), (pd, pd), (0, 0), (0, 0)), pad_value=0.0)
    taps = []
    for t in range(kd):
        begin = t * dd
        s = ctx.op("strided_slice", x, begin=(begin,), end=(begin + sd * (d_out - 1) + 1,), strides=(sd,),
                   axes=(2,))
        taps.append(ctx.op("expand_dims", s, axis=1))
    xs = taps[0] if kd == 1 else ctx.op("concat", *taps, axis=1)            # (N, KD, C, D', H, W)
    xs = ctx.op("reshape", xs, shape=(n, kd, groups, c // groups, d_out, h, wd))
    xs = ctx.op("permute_dims", xs, axes=(0, 4, 2, 1, 3, 5, 6))             # (N, D', g, KD, C/g, H, W)
    xs = ctx.op("reshape", xs, shape=(_mul(n, d_out), kd * c, h, wd))
    w2 = ctx.op("permute_dims", w, axes=(0, 2, 1, 3, 4))                     # (O, KD, C/g, KH, KW)
    w2 = ctx.op("reshape", w2, shape=(o, kd * cg, kh, kw))
    y = ctx.op("conv2d", xs, w2, strides=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=groups)
    y = ctx.op("reshape", y, shape=(n, d_out, o, ctx.out_size(3), ctx.out_size(4)))
    return ctx.op("permute_dims", y, axes=(0, 2, 1, 3, 4))


def _pool3d(ctx: Ctx, kop, x, kernel, stride, padding, dilation, **kw):
    from ..onnx.common import Unsupported as OnnxUnsupported
    from ..onnx.nn import _pool as onnx_pool
    try:
        return onnx_pool(ctx, kop, x, list(kernel), list(stride), list(dilation), list(padding) * 2, **kw)
    except OnnxUnsupported as e:
        raise Unsupported(str(e)) from None


@converter("aten.max_pool3d_with_indices")
def max_pool3d_with_indices(ctx: Ctx, node, args, kwargs):
    return max_pool3d(ctx, node, args, kwargs), NotComputed("the max-pool indices")


@converter("aten.max_pool3d")
def max_pool3d(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    k = _triple(a["kernel_size"])
    stride = _triple(a["stride"]) if a["stride"] else k
    return _pool3d(ctx, "max_pool2d", a["self"], k, stride, _triple(a["padding"]), _triple(a["dilation"]),
                   ceil_mode=bool(a["ceil_mode"]))


@converter("aten.avg_pool3d")
def avg_pool3d(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    if a["divisor_override"] is not None:
        raise Unsupported("divisor_override is not supported")
    k = _triple(a["kernel_size"])
    stride = _triple(a["stride"]) if a["stride"] else k
    return _pool3d(ctx, "avg_pool2d", a["self"], k, stride, _triple(a["padding"]), (1, 1, 1),
                   ceil_mode=bool(a["ceil_mode"]), count_include_pad=bool(a["count_include_pad"]))
