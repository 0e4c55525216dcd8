"""3-D convolution pieces on the operator library's conv2d, and 3-D ConvTranspose built on them.

A stride-1 3-D convolution is a sum over the depth taps kd of 2-D convolutions of the depth
slices ``kd * dilation .. + out_depth``: stacking those slices in the channels (tap-major
inside each group) and folding the output depth into the batch makes it one grouped conv2d
whose weight holds the depth taps beside the input channels. ConvTranspose is then the usual
conv of the zero-dilated, padded input with the spatially flipped, in/out-swapped weight.
"""
from __future__ import annotations

from .common import Unsupported, static_shape


def conv3d_stride1(ctx, t, wf, groups, dilation):
    """conv3d(t (N, C, D, H, W), wf (O, C/g, KD, KH, KW)), stride 1, no padding."""
    n, c, d, h, w = static_shape(t)
    o, cg, kd, kh, kw = static_shape(wf, "the weight")
    od = d - (kd - 1) * dilation[0]
    if od < 1:
        raise Unsupported(f"a depth of {d} is shorter than the dilated kernel")
    taps = [ctx.op("strided_slice", t, begin=(k * dilation[0],), end=(k * dilation[0] + od,), axes=(2,))
            for k in range(kd)]
    s = ctx.op("concat", *[ctx.op("expand_dims", x, axis=1) for x in taps], axis=1)   # (N, KD, C, OD, H, W)
    s = ctx.op("reshape", s, shape=(n, kd, groups, cg, od, h, w))
    s = ctx.op("permute_dims", s, axes=(0, 4, 2, 1, 3, 5, 6))                       # (N, OD, g, KD, C/g, H, W)
    s = ctx.op("reshape", s, shape=(n * od, groups * kd * cg, h, w))
    w2 = ctx.op("reshape", ctx.op("permute_dims", wf, axes=(0, 2, 1, 3, 4)), shape=(o, kd * cg, kh, kw))
    y = ctx.op("conv2d", s, w2, dilation=tuple(dilation[1:]), groups=groups)         # (N*OD, O, OH, OW)
    _, _, oh, ow = static_shape(y)
    y = ctx.op("reshape", y, shape=(n, od, o, oh, ow))
    return ctx.op("permute_dims", y, axes=(0, 2, 1, 3, 4))


def conv_transpose_3d(ctx, x, w, b, attrs):
    """ONNX ConvTranspose over (N, C, D, H, W) with weight (C, O/g, KD, KH, KW): strides,
    dilations, pads, output_padding, output_shape and auto_pad as the spec (per dim)."""
    n, c, *size = static_shape(x, "the input")
    cw, og, *k = static_shape(w, "the weight")
    g = attrs.get("group", 1)
    strides = list(attrs.get("strides", [1] * 3))
    dil = list(attrs.get("dilations", [1] * 3))
    opad = list(attrs.get("output_padding", [0] * 3))
    ks = [(k[i] - 1) * dil[i] + 1 for i in range(3)]
    auto = attrs.get("auto_pad", "NOTSET")
    out_shape = attrs.get("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = list(out_shape)[-3:] if out_shape is not None else [size[i] * strides[i] for i in range(3)]
        pads = [0] * 6
        for i in range(3):
            total = strides[i] * (size[i] - 1) + opad[i] + ks[i] - out_shape[i]
            small, big = total // 2, total - total // 2
            pads[i], pads[i + 3] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * 6
    elif auto in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0] * 6))
    else:
        raise Unsupported(f"auto_pad={auto} is not supported")
    t = x
    if any(s > 1 for s in strides):  # zero-dilate: s - 1 zeros between neighbours
        t = ctx.op("reshape", t, shape=(n, c, size[0], 1, size[1], 1, size[2], 1))
        t = ctx.op("pad", t, pad_width=((0, 0), (0, 0), (0, 0), (0, strides[0] - 1), (0, 0), (0, strides[1] - 1),
                                        (0, 0), (0, strides[2] - 1)))
        t = ctx.op("reshape", t, shape=(n, c, size[0] * strides[0], size[1] * strides[1], size[2] * strides[2]))
        t = ctx.op("strided_slice", t, begin=(0, 0, 0), end=tuple((size[i] - 1) * strides[i] + 1 for i in range(3)),
                   axes=(2, 3, 4))
    pw = ((0, 0), (0, 0)) + tuple((ks[i] - 1 - pads[i], ks[i] - 1 - pads[i + 3] + opad[i]) for i in range(3))
    if any(p < 0 for pair in pw for p in pair):
        raise Unsupported(f"pads {pads} larger than the dilated kernel {ks} are not supported")
    t = ctx.op("pad", t, pad_width=pw)
    big = -(2 ** 63)
    wf = ctx.op("strided_slice", w, begin=(-1, -1, -1), end=(big, big, big), strides=(-1, -1, -1), axes=(2, 3, 4))
    wf = ctx.op("reshape", wf, shape=(g, cw // g, og, *k))
    wf = ctx.op("permute_dims", wf, axes=(0, 2, 1, 3, 4, 5))
    wf = ctx.op("reshape", wf, shape=(g * og, cw // g, *k))
    y = conv3d_stride1(ctx, t, wf, g, dil)
    if b is not None:
        y = ctx.op("add", y, ctx.op("reshape", b, shape=(1, -1, 1, 1, 1)))
    return y
