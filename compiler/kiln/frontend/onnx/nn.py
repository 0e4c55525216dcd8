"""Convolution, pooling, dense, normalisation, softmax, resize."""
from __future__ import annotations

import math

import numpy as np

from .common import Unsupported, converter, dim, dtype, ndim, norm_axis, scalar_like, static_shape
from .resize import general_resize


def _same_pads(in_sizes, kernel, strides, dilations, mode):
    begins, ends = [], []
    for i, k, s, d in zip(in_sizes, kernel, strides, dilations):
        if not isinstance(i, int):
            raise Unsupported(f"auto_pad={mode} needs static spatial dims")
        out = -(-i // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
        small, big = total // 2, total - total // 2
        if mode == "SAME_UPPER":
            begins.append(small); ends.append(big)
        else:
            begins.append(big); ends.append(small)
    return begins + ends


def _pads(attrs, x, kernel, strides, dilations, nsp):
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(attrs.get("pads", [0] * (2 * nsp)))
    if auto == "VALID":
        return [0] * (2 * nsp)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        sizes = [dim(s) for s in x.ty.shape[2:]]
        return _same_pads(sizes, kernel, strides, dilations, auto)
    raise Unsupported(f"auto_pad={auto} is not supported")


@converter("Conv", since=1)
def conv(ctx, node, ins, attrs):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    nd = ndim(x)
    nsp = nd - 2
    if nsp not in (1, 2):
        raise Unsupported(f"{nsp}-D convolution is not supported (1-D and 2-D are)")
    kernel = attrs.get("kernel_shape") or [dim(s) for s in w.ty.shape[2:]]
    strides = list(attrs.get("strides", [1] * nsp))
    dil = list(attrs.get("dilations", [1] * nsp))
    pads = _pads(attrs, x, kernel, strides, dil, nsp)
    groups = attrs.get("group", 1)
    if nsp == 2:
        y = ctx.op("conv2d", x, w, strides=tuple(strides), padding=tuple(pads),
                   dilation=tuple(dil), groups=groups)
    else:
        y = ctx.op("conv1d", x, w, strides=tuple(strides), padding=tuple(pads),
                   dilation=tuple(dil), groups=groups)
    if b is not None:
        bb = ctx.op("reshape", b, shape=(1, -1) + (1,) * nsp)
        y = ctx.op("add", y, bb)
    return y


@converter("ConvTranspose", since=1)
def conv_transpose(ctx, node, ins, attrs):
    # y = conv(zero-dilate(x, strides) padded by d*(k-1) - pads, flip(w) with in/out swapped)
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    nsp = ndim(x) - 2
    if nsp == 3:
        from .conv3d import conv_transpose_3d
        return conv_transpose_3d(ctx, x, w, b, attrs)
    if nsp not in (1, 2):
        raise Unsupported(f"{nsp}-D ConvTranspose is not supported (1-D, 2-D and 3-D are)")
    if nsp == 1:
        x = ctx.op("expand_dims", x, axis=2)
        w = ctx.op("expand_dims", w, axis=2)
        one = lambda key, d: [d] + list(attrs[key]) if key in attrs else None
        attrs = dict(attrs)
        for key, d in (("strides", 1), ("dilations", 1), ("output_padding", 0), ("kernel_shape", 1)):
            if key in attrs:
                attrs[key] = one(key, d)
        if "pads" in attrs:
            attrs["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        if attrs.get("output_shape") is not None:
            attrs["output_shape"] = [1] + list(attrs["output_shape"])[-1:]
    groups = attrs.get("group", 1)
    N, C, H, W = [dim(s) for s in x.ty.shape]
    Cw, Og, kh, kw = static_shape(w, "the weight")
    if not isinstance(H, int) or not isinstance(W, int):
        raise Unsupported("ConvTranspose needs static spatial dims")
    strides = list(attrs.get("strides", [1, 1]))
    dil = list(attrs.get("dilations", [1, 1]))
    opad = list(attrs.get("output_padding", [0, 0]))
    ks = [(kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1]
    auto = attrs.get("auto_pad", "NOTSET")
    out_shape = attrs.get("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        if out_shape is None:
            out_shape = [H * strides[0], W * strides[1]]
        out_shape = list(out_shape)[-2:]
        pads = [0, 0, 0, 0]
        for i, n_in in enumerate((H, W)):
            total = strides[i] * (n_in - 1) + opad[i] + ks[i] - out_shape[i]
            if auto != "SAME_UPPER":  # SAME_LOWER, and NOTSET with output_shape (ONNX spec)
                pads[i], pads[i + 2] = total - total // 2, total // 2
            else:
                pads[i], pads[i + 2] = total // 2, total - total // 2
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    elif auto in ("NOTSET", ""):
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
    else:
        raise Unsupported(f"auto_pad={auto} is not supported")
    s0, s1 = strides
    t = x
    if s0 > 1 or s1 > 1:
        t = ctx.op("reshape", x, shape=(N, C, H, 1, W, 1))
        t = ctx.op("pad", t, pad_width=((0, 0), (0, 0), (0, 0), (0, s0 - 1), (0, 0), (0, s1 - 1)))
        t = ctx.op("reshape", t, shape=(N, C, H * s0, W * s1))
        t = ctx.op("strided_slice", t, begin=(0, 0), end=((H - 1) * s0 + 1, (W - 1) * s1 + 1), axes=(2, 3))
    eh, ew = ks[0] - 1, ks[1] - 1
    pw = ((0, 0), (0, 0), (eh - pads[0], eh - pads[2] + opad[0]), (ew - pads[1], ew - pads[3] + opad[1]))
    t = ctx.op("pad", t, pad_width=pw)
    # weight (C, O/g, kh, kw) -> (O, C/g, kh, kw), spatially flipped
    wf = ctx.op("strided_slice", w, begin=(-1, -1), end=(-(2 ** 63), -(2 ** 63)), strides=(-1, -1), axes=(2, 3))
    g = groups
    wf = ctx.op("reshape", wf, shape=(g, Cw // g, Og, kh, kw))
    wf = ctx.op("permute_dims", wf, axes=(0, 2, 1, 3, 4))
    wf = ctx.op("reshape", wf, shape=(g * Og, Cw // g, kh, kw))
    y = ctx.op("conv2d", t, wf, dilation=tuple(dil), groups=g)
    if b is not None:
        y = ctx.op("add", y, ctx.op("reshape", b, shape=(1, -1, 1, 1)))
    if nsp == 1:
        y = ctx.op("squeeze", y, axis=(2,))
    return y


@converter("Gemm", since=1)
def gemm(ctx, node, ins, attrs):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if attrs.get("transA", 0):
        a = ctx.op("permute_dims", a, axes=(1, 0))
    if attrs.get("transB", 0):
        y = ctx.op("linear", a, b)
    else:
        y = ctx.op("matmul", a, b)
    if alpha != 1.0:
        y = ctx.op("multiply", y, scalar_like(ctx, alpha, y))
    if c is not None:
        if beta != 1.0:
            c = ctx.op("multiply", c, scalar_like(ctx, beta, c))
        y = ctx.op("add", y, c)
    return y


@converter("MatMul", since=1)
def matmul(ctx, node, ins, attrs):
    return ctx.op("matmul", ins[0], ins[1])


@converter("BatchNormalization", since=1)
def batch_norm(ctx, node, ins, attrs):
    x, s, b, m, v = ins[:5]
    eps = attrs.get("epsilon", 1e-5)
    if attrs.get("training_mode", 0) or len([o for o in node.output if o]) > 1:
        return _batch_norm_training(ctx, x, s, b, m, v, eps, attrs.get("momentum", 0.9))
    return ctx.op("batch_norm", x, s, b, m, v, axis=1, eps=eps)


def _batch_norm_training(ctx, x, s, b, m, v, eps, momentum):
    """Normalised by the batch's own mean and (biased) variance over every axis but 1; the
    running statistics come back updated: running * momentum + batch * (1 - momentum)."""
    axes = tuple(a for a in range(ndim(x)) if a != 1)
    mean = ctx.op("mean", x, axis=axes)
    diff = ctx.op("subtract", x, ctx.op("mean", x, axis=axes, keepdims=True))
    var = ctx.op("mean", ctx.op("multiply", diff, diff), axis=axes)
    y = ctx.op("batch_norm", x, s, b, mean, var, axis=1, eps=eps)
    keep, new = scalar_like(ctx, momentum, x), scalar_like(ctx, 1 - momentum, x)
    run_mean = ctx.op("add", ctx.op("multiply", m, keep), ctx.op("multiply", mean, new))
    run_var = ctx.op("add", ctx.op("multiply", v, keep), ctx.op("multiply", var, new))
    return [y, run_mean, run_var]


@converter("InstanceNormalization", since=1)
def instance_norm(ctx, node, ins, attrs):
    x, s, b = ins
    c = dim(x.ty.shape[1])
    return ctx.op("group_norm", x, s, b, num_groups=c, eps=attrs.get("epsilon", 1e-5))


@converter("LayerNormalization", since=17)
def layer_norm(ctx, node, ins, attrs):
    x, scale = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    n = ndim(x)
    axis = norm_axis(attrs.get("axis", -1), n)
    nshape = tuple(x.ty.shape[axis:])
    if attrs.get("stash_type", 1) != 1:
        raise Unsupported("stash_type other than float32 is not supported")
    if tuple(scale.ty.shape) != nshape or len(scale.ty.shape) != n - axis:
        scale = ctx.op("broadcast_to", scale, shape=tuple(dim(s) for s in nshape))
    if b is None:
        b = ctx.const(np.zeros([dim(s) for s in nshape], dtype=np.dtype(dtype(x))))
    elif len(b.ty.shape) != n - axis:
        b = ctx.op("broadcast_to", b, shape=tuple(dim(s) for s in nshape))
    axes = tuple(range(axis, n))
    eps = attrs.get("epsilon", 1e-5)
    y = ctx.op("layer_norm", x, scale, b, axes=axes, eps=eps)
    if len(node.output) == 1:
        return y
    m = ctx.op("mean", x, axis=axes, keepdims=True)
    d = ctx.op("subtract", x, m)
    var = ctx.op("mean", ctx.op("multiply", d, d), axis=axes, keepdims=True)
    inv = ctx.op("rsqrt", ctx.op("add", var, scalar_like(ctx, eps, var)))
    return [y, m, inv]


@converter("RMSNormalization", since=23)
def rms_norm(ctx, node, ins, attrs):
    x, scale = ins[0], ins[1]
    n = ndim(x)
    axis = norm_axis(attrs.get("axis", -1), n)
    nshape = tuple(dim(s) for s in x.ty.shape[axis:])
    if attrs.get("stash_type", 1) != 1:
        raise Unsupported("stash_type other than float32 is not supported")
    if len(scale.ty.shape) != n - axis or tuple(dim(s) for s in scale.ty.shape) != nshape:
        scale = ctx.op("broadcast_to", scale, shape=nshape)
    return ctx.op("rms_norm", x, scale, axes=tuple(range(axis, n)), eps=attrs.get("epsilon", 1e-5))


@converter("GroupNormalization", since=18)
def group_norm(ctx, node, ins, attrs):
    x, scale, b = ins
    g = attrs["num_groups"]
    c = dim(x.ty.shape[1])
    if ctx.opset < 21 or dim(scale.ty.shape[0]) != c:
        # opset 18: scale/bias per group -> per channel
        scale = ctx.op("reshape", ctx.op("broadcast_to", ctx.op("reshape", scale, shape=(g, 1)), shape=(g, c // g)), shape=(c,))
        b = ctx.op("reshape", ctx.op("broadcast_to", ctx.op("reshape", b, shape=(g, 1)), shape=(g, c // g)), shape=(c,))
    return ctx.op("group_norm", x, scale, b, num_groups=g, eps=attrs.get("epsilon", 1e-5))


@converter("MeanVarianceNormalization", since=1)
def mvn(ctx, node, ins, attrs):
    x = ins[0]
    axes = tuple(attrs.get("axes", [0, 2, 3]))
    m = ctx.op("mean", x, axis=axes, keepdims=True)
    d = ctx.op("subtract", x, m)
    var = ctx.op("mean", ctx.op("multiply", d, d), axis=axes, keepdims=True)
    return ctx.op("divide", d, ctx.op("add", ctx.op("sqrt", var), scalar_like(ctx, 1e-9, var)))


@converter("LpNormalization", since=1)
def lp_norm(ctx, node, ins, attrs):
    x = ins[0]
    axis = attrs.get("axis", -1)
    p = attrs.get("p", 2)
    if p == 1:
        nrm = ctx.op("sum", ctx.op("abs", x), axis=axis, keepdims=True)
    elif p == 2:
        nrm = ctx.op("sqrt", ctx.op("sum", ctx.op("multiply", x, x), axis=axis, keepdims=True))
    else:
        raise Unsupported(f"p={p} is not supported")
    z = scalar_like(ctx, 0, x)
    safe = ctx.op("where", ctx.op("equal", nrm, z), scalar_like(ctx, 1, x), nrm)
    return ctx.op("divide", x, safe)


def _pool1d_as_2d(fn):
    def wrapped(ctx, node, ins, attrs):
        x = ins[0]
        if ndim(x) != 3:
            return fn(ctx, node, ins, attrs)
        a = dict(attrs)
        for key, d in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
            if key in a:
                a[key] = [d] + list(a[key])
        if "pads" in a:
            a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
        y = fn(ctx, node, [ctx.op("expand_dims", x, axis=2)] + list(ins[1:]), a)
        if isinstance(y, (list, tuple)):  # MaxPool's values and Indices
            return [ctx.op("squeeze", t, axis=(2,)) for t in y]
        return ctx.op("squeeze", y, axis=(2,))
    return wrapped


def _pool_common(attrs, x, node):
    if ndim(x) not in (4, 5):
        raise Unsupported(f"only 1-D, 2-D and 3-D pooling are supported, got a {ndim(x)}-D input")
    nsp = ndim(x) - 2
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * nsp))
    dil = list(attrs.get("dilations", [1] * nsp))
    pads = _pads(attrs, x, kernel, strides, dil, nsp)
    return kernel, strides, dil, pads


def _pool(ctx, kop, x, kernel, strides, dil, pads, **kw):
    """``kop`` (max_pool2d or avg_pool2d) over the spatial dims of a 4-D or 5-D input.

    A 3-D window is separable: pool (H, W) with D folded into the channels, then pool D with
    H*W flattened. Max is exact that way, and so is average: its divisor (taps inside the
    input, or inside the padded input) is a product of per-dim counts, so it splits too."""
    if ndim(x) == 4:
        return ctx.op(kop, x, pool_size=tuple(kernel), strides=tuple(strides),
                      padding=tuple(pads), dilation=tuple(dil), **kw)
    n, c, d, h, w = static_shape(x)
    t = ctx.op("reshape", x, shape=(n, c * d, h, w))
    t = ctx.op(kop, t, pool_size=tuple(kernel[1:]), strides=tuple(strides[1:]),
               padding=(pads[1], pads[2], pads[4], pads[5]), dilation=tuple(dil[1:]), **kw)
    _, _, h2, w2 = static_shape(t)
    t = ctx.op("reshape", t, shape=(n, c, d, h2 * w2))
    t = ctx.op(kop, t, pool_size=(kernel[0], 1), strides=(strides[0], 1),
               padding=(pads[0], 0, pads[3], 0), dilation=(dil[0], 1), **kw)
    return ctx.op("reshape", t, shape=(n, c, static_shape(t)[2], h2, w2))


@converter("MaxPool", since=1)
@_pool1d_as_2d
def max_pool(ctx, node, ins, attrs):
    x = ins[0]
    kernel, strides, dil, pads = _pool_common(attrs, x, node)
    y = _pool(ctx, "max_pool2d", x, kernel, strides, dil, pads, ceil_mode=bool(attrs.get("ceil_mode", 0)))
    if len([o for o in node.output if o]) > 1:
        from .pool_indices import max_pool_with_indices
        return max_pool_with_indices(ctx, x, y, kernel, strides, dil, pads, attrs.get("storage_order", 0))
    return y


@converter("AveragePool", since=1)
@_pool1d_as_2d
def avg_pool(ctx, node, ins, attrs):
    x = ins[0]
    kernel, strides, dil, pads = _pool_common(attrs, x, node)
    return _pool(ctx, "avg_pool2d", x, kernel, strides, dil, pads,
                 ceil_mode=bool(attrs.get("ceil_mode", 0)),
                 count_include_pad=bool(attrs.get("count_include_pad", 0)))


@converter("LpPool", since=1)
@_pool1d_as_2d
def lp_pool(ctx, node, ins, attrs):
    x = ins[0]
    kernel, strides, dil, pads = _pool_common(attrs, x, node)
    p = float(attrs.get("p", 2))
    xp = ctx.op("power", ctx.op("abs", x), scalar_like(ctx, p, x))
    m = _pool(ctx, "avg_pool2d", xp, kernel, strides, dil, pads,
              ceil_mode=bool(attrs.get("ceil_mode", 0)), count_include_pad=True)
    s = ctx.op("multiply", m, scalar_like(ctx, int(np.prod(kernel)), x))
    return ctx.op("power", s, scalar_like(ctx, 1.0 / p, x))


@converter("LRN", since=1)
def lrn(ctx, node, ins, attrs):
    """``x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta``; the window
    sum is an average pool (padding counted, so the divisor is always ``size``) over C."""
    x = ins[0]
    shp = static_shape(x)
    size = attrs["size"]
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    sq = ctx.op("reshape", ctx.op("multiply", x, x), shape=(shp[0], 1, shp[1], int(np.prod(shp[2:]))))
    lo, hi = (size - 1) // 2, size // 2          # floor and ceil of (size - 1) / 2
    m = ctx.op("avg_pool2d", sq, pool_size=(size, 1), strides=(1, 1), padding=(lo, 0, hi, 0),
               count_include_pad=True)
    # alpha / size * (size * mean) = alpha * mean
    den = ctx.op("add", scalar_like(ctx, bias, x), ctx.op("multiply", m, scalar_like(ctx, alpha, x)))
    den = ctx.op("reshape", ctx.op("power", den, scalar_like(ctx, -beta, x)), shape=tuple(shp))
    return ctx.op("multiply", x, den)


@converter("GlobalAveragePool", since=1)
def global_avg_pool(ctx, node, ins, attrs):
    x = ins[0]
    return ctx.op("mean", x, axis=tuple(range(2, ndim(x))), keepdims=True)


@converter("GlobalMaxPool", since=1)
def global_max_pool(ctx, node, ins, attrs):
    x = ins[0]
    return ctx.op("max", x, axis=tuple(range(2, ndim(x))), keepdims=True)


def _softmax(name):
    def conv_fn(ctx, node, ins, attrs):
        x = ins[0]
        n = ndim(x)
        if ctx.opset >= 13:
            return ctx.op(name, x, axis=attrs.get("axis", -1))
        axis = norm_axis(attrs.get("axis", 1), n)
        if axis == n - 1:
            return ctx.op(name, x, axis=-1)
        shape = static_shape(x)
        t = ctx.op("reshape", x, shape=(int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
        t = ctx.op(name, t, axis=-1)
        return ctx.op("reshape", t, shape=shape)
    return conv_fn


converter("Softmax", since=1)(_softmax("softmax"))
converter("LogSoftmax", since=1)(_softmax("log_softmax"))


@converter("SpaceToDepth", since=1)
def space_to_depth(ctx, node, ins, attrs):
    x = ins[0]
    b = attrs["blocksize"]
    N, C, H, W = [dim(s) for s in x.ty.shape]
    t = ctx.op("reshape", x, shape=(N, C, H // b, b, W // b, b))
    if attrs.get("mode", "DCR") == "CRD":
        t = ctx.op("permute_dims", t, axes=(0, 1, 3, 5, 2, 4))
    else:
        t = ctx.op("permute_dims", t, axes=(0, 3, 5, 1, 2, 4))
    return ctx.op("reshape", t, shape=(N, C * b * b, H // b, W // b))


@converter("DepthToSpace", since=1)
def depth_to_space(ctx, node, ins, attrs):
    x = ins[0]
    b = attrs["blocksize"]
    N, C, H, W = [dim(s) for s in x.ty.shape]
    if attrs.get("mode", "DCR") == "DCR":
        t = ctx.op("reshape", x, shape=(N, b, b, C // (b * b), H, W))
        t = ctx.op("permute_dims", t, axes=(0, 3, 4, 1, 5, 2))
    else:
        t = ctx.op("reshape", x, shape=(N, C // (b * b), b, b, H, W))
        t = ctx.op("permute_dims", t, axes=(0, 1, 4, 2, 5, 3))
    return ctx.op("reshape", t, shape=(N, C // (b * b), H * b, W * b))


@converter("Resize", since=11)
def resize(ctx, node, ins, attrs):
    """The resize2d operator where it fits (NCHW, integral sizes, its modes), else the general
    per-axis decomposition of resize.py (cubic, antialias, any rank, fractional scales...)."""
    try:
        return _resize2d(ctx, node, ins, attrs)
    except Unsupported:
        # _resize2d checks everything before it builds anything, so nothing is left behind
        return general_resize(ctx, node, ins, attrs)


def _resize2d(ctx, node, ins, attrs):
    x = ins[0]
    scales = ctx.need_value(ins[2], "scales") if len(ins) > 2 and ins[2] is not None else None
    sizes = ctx.need_value(ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise Unsupported(f"mode={mode} is not supported (nearest, linear are)")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    if ctm not in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
        raise Unsupported(f"coordinate_transformation_mode={ctm} is not supported")
    if attrs.get("antialias", 0):
        raise Unsupported("antialias=1 is not supported")
    if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Unsupported("keep_aspect_ratio_policy is not supported")
    if ndim(x) != 4:
        raise Unsupported("only 4-D (N, C, H, W) inputs are supported")
    shape = [dim(s) for s in x.ty.shape]
    axes = attrs.get("axes")
    if axes is not None:
        axes = [norm_axis(a, 4) for a in axes]
        full_s = [1.0] * 4
        full_z = list(shape)
        for k, a in enumerate(axes):
            if scales is not None and scales.size:
                full_s[a] = float(scales[k])
            if sizes is not None and sizes.size:
                full_z[a] = int(sizes[k])
        if scales is not None and scales.size:
            scales = np.asarray(full_s)
        if sizes is not None and sizes.size:
            sizes = np.asarray(full_z)
    if sizes is not None and sizes.size:
        out = [int(v) for v in sizes]
    elif scales is not None and scales.size:
        if not all(isinstance(s, int) for s in shape[2:]):
            raise Unsupported("scales need static H, W")
        if any(float(s) != 1.0 for s in scales[:2]):
            raise Unsupported("scaling N or C is not supported")
        out = [shape[0], shape[1]] + [int(math.floor(shape[i] * float(scales[i]))) for i in (2, 3)]
        for i in (2, 3):
            if out[i] != shape[i] * float(scales[i]):
                raise Unsupported("non-integral output size from scales is not supported")
    else:
        raise Unsupported("Resize needs constant scales or sizes")
    if out[:2] != shape[:2]:
        raise Unsupported("resizing N or C is not supported")
    return ctx.op("resize2d", x, size=(out[2], out[3]), method=mode,
                  coordinate_transformation_mode=ctm,
                  rounding_method=attrs.get("nearest_mode", "round_prefer_floor"))
