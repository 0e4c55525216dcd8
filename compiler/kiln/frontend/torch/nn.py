"""Neural-network ATen ops: convolution, pooling, normalisation, dense products, attention,
embedding, softmax, padding."""
from __future__ import annotations

import math

import numpy as np

from .common import Ctx, NotComputed, bind, converter, is_static, ndim, norm_axis, shape
from .errors import Unsupported
from .volumetric import conv3d


def _pair(v, n=2):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(int(x) for x in (v * n if len(v) == 1 else v))


@converter("aten.convolution")
def convolution(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x, w, b = a["input"], a["weight"], a["bias"]
    nsp = ndim(x) - 2
    if a["transposed"]:
        return _conv_transpose(ctx, a, nsp)
    if nsp not in (1, 2, 3):
        raise Unsupported(f"{nsp}-D convolution is not supported (1-D, 2-D and 3-D are)")
    if nsp == 3:
        y = conv3d(ctx, x, w, _pair(a["stride"], 3), _pair(a["padding"], 3), _pair(a["dilation"], 3),
                   int(a["groups"]))
    else:
        op = "conv2d" if nsp == 2 else "conv1d"
        y = ctx.op(op, x, w, strides=_pair(a["stride"], nsp), padding=_pair(a["padding"], nsp),
                   dilation=_pair(a["dilation"], nsp), groups=int(a["groups"]))
    if b is not None:
        y = ctx.op("add", y, ctx.op("reshape", b, shape=(1, -1) + (1,) * nsp))
    return y


def _conv_transpose(ctx: Ctx, a, nsp):
    """The ONNX importer's ConvTranspose (zero-dilate, pad, convolve with the flipped weight),
    reused rather than written twice: torch's arguments as ONNX attributes."""
    from ..onnx.common import Unsupported as OnnxUnsupported
    from ..onnx.nn import conv_transpose as onnx_conv_transpose
    pad = _pair(a["padding"], nsp)
    attrs = {"strides": list(_pair(a["stride"], nsp)), "dilations": list(_pair(a["dilation"], nsp)),
             "output_padding": list(_pair(a["output_padding"], nsp)), "pads": list(pad) * 2,
             "group": int(a["groups"])}
    try:
        return onnx_conv_transpose(ctx, None, [a["input"], a["weight"], a["bias"]], attrs)
    except OnnxUnsupported as e:
        raise Unsupported(str(e)) from None


@converter("aten.max_pool2d_with_indices")
def max_pool2d_with_indices(ctx, node, args, kwargs):
    return max_pool2d(ctx, node, args, kwargs), NotComputed("the max-pool indices")


@converter("aten.max_pool2d")
def max_pool2d(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    k = _pair(a["kernel_size"])
    stride = _pair(a["stride"]) if a["stride"] else k
    return ctx.op("max_pool2d", a["self"], pool_size=k, strides=stride, padding=_pair(a["padding"]),
                  dilation=_pair(a["dilation"]), ceil_mode=bool(a["ceil_mode"]))


@converter("aten.avg_pool2d")
def avg_pool2d(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    if a["divisor_override"] is not None:
        raise Unsupported("divisor_override is not supported")
    k = _pair(a["kernel_size"])
    stride = _pair(a["stride"]) if a["stride"] else k
    return ctx.op("avg_pool2d", a["self"], pool_size=k, strides=stride, padding=_pair(a["padding"]),
                  ceil_mode=bool(a["ceil_mode"]), count_include_pad=bool(a["count_include_pad"]))


@converter("aten._adaptive_avg_pool2d", "aten.adaptive_avg_pool2d")
def adaptive_avg_pool2d(ctx, node, args, kwargs):
    x, size = args[0], _pair(args[1])
    h, w = shape(x)[2:]
    if (h, w) == size:
        return x
    if size == (1, 1):
        return ctx.op("mean", x, axis=(2, 3), keepdims=True)     # a reduction, as ONNX's GlobalAveragePool
    return ctx.op("adaptive_avg_pool2d", x, output_size=size)


@converter("aten.adaptive_max_pool2d")
def adaptive_max_pool2d(ctx, node, args, kwargs):
    """Global (output 1x1) or evenly dividing bins, as a max reduction or a max pool."""
    x, size = args[0], _pair(args[1])
    h, w = shape(x)[2:]
    if size == (1, 1):
        y = ctx.op("max", x, axis=(2, 3), keepdims=True)
    elif is_static(h) and is_static(w) and h % size[0] == 0 and w % size[1] == 0:
        k = (h // size[0], w // size[1])
        y = ctx.op("max_pool2d", x, pool_size=k, strides=k)
    else:
        raise Unsupported(f"adaptive max pooling of {h}x{w} to {size[0]}x{size[1]} (uneven bins) is not supported")
    return y, NotComputed("the adaptive max-pool indices")


def _ones(ctx, x, axis, value):
    c = shape(x)[axis]
    if not is_static(c):
        raise Unsupported("a norm without weight needs a static channel count")
    return ctx.const(np.full((c,), value), x.ty.dtype)


@converter("aten._native_batch_norm_legit_no_training")
def batch_norm(ctx: Ctx, node, args, kwargs):
    x, w, b, mean, var, _momentum, eps = args
    w = w if w is not None else _ones(ctx, x, 1, 1.0)
    b = b if b is not None else _ones(ctx, x, 1, 0.0)
    y = ctx.op("batch_norm", x, w, b, mean, var, axis=1, eps=float(eps))
    return y, NotComputed("the batch-norm mean"), NotComputed("the batch-norm variance")


@converter("aten._native_batch_norm_legit.no_stats")
def batch_norm_batch_stats(ctx: Ctx, node, args, kwargs):
    """Normalisation by the batch's own statistics per channel (what instance_norm exports as:
    a batch norm with no running statistics over (1, N*C, ...))."""
    x, w, b, _training, _momentum, eps = args
    d = x.ty.dtype
    axes = tuple(i for i in range(ndim(x)) if i != 1)
    m = ctx.op("mean", x, axis=axes, keepdims=True)
    dev = ctx.op("subtract", x, m)
    var = ctx.op("mean", ctx.op("multiply", dev, dev), axis=axes, keepdims=True)
    y = ctx.op("multiply", dev, ctx.op("rsqrt", ctx.op("add", var, ctx.const(float(eps), d))))
    bshape = (1, -1) + (1,) * (ndim(x) - 2)
    if w is not None:
        y = ctx.op("multiply", y, ctx.op("reshape", w, shape=bshape))
    if b is not None:
        y = ctx.op("add", y, ctx.op("reshape", b, shape=bshape))
    return y, NotComputed("the batch mean"), NotComputed("the batch rstd")


@converter("aten._native_batch_norm_legit", "aten.native_batch_norm", "aten._native_batch_norm_legit_functional")
def batch_norm_training(ctx, node, args, kwargs):
    raise Unsupported("batch norm in training mode (call model.eval() before torch.export.export)")


@converter("aten.native_layer_norm")
def layer_norm(ctx: Ctx, node, args, kwargs):
    x, normalized, w, b, eps = args
    n, k = ndim(x), len(normalized)
    axes = tuple(range(n - k, n))
    if w is None or b is None:
        dims = shape(x)[n - k:]
        if not all(is_static(d) for d in dims):
            raise Unsupported("a layer norm without weight needs static normalised dims")
        w = w if w is not None else ctx.const(np.ones(dims), x.ty.dtype)
        b = b if b is not None else ctx.const(np.zeros(dims), x.ty.dtype)
    y = ctx.op("layer_norm", x, w, b, axes=axes, eps=float(eps))
    return y, NotComputed("the layer-norm mean"), NotComputed("the layer-norm rstd")


@converter("aten.native_group_norm")
def group_norm(ctx: Ctx, node, args, kwargs):
    x, w, b, _n, _c, _hw, group, eps = args
    w = w if w is not None else _ones(ctx, x, 1, 1.0)
    b = b if b is not None else _ones(ctx, x, 1, 0.0)
    y = ctx.op("group_norm", x, w, b, num_groups=int(group), eps=float(eps))
    return y, NotComputed("the group-norm mean"), NotComputed("the group-norm rstd")


# ---- dense products ----------------------------------------------------------------------
def _dense(ctx: Ctx, a, b):
    """a @ b, as ``linear`` when b is a transposed 2-D weight (what Linear exports as). When a
    is ``x.view(-1, d)`` of a batched x (GPT-2's Conv1D), x itself is multiplied and the result
    flattened after: the kernel then sees ``batch`` and ``seq`` apart, not only their product,
    which it could not bind them from."""
    x = ctx.flattened.get(a)
    if x is not None:
        y = _dense(ctx, x, b)
        return ctx.op("reshape", y, shape=(ctx.out_size(0), ctx.out_size(1)))
    src = ctx.transposed.get(b)
    if src is not None:
        return ctx.op("linear", a, src)
    return ctx.op("matmul", a, b)


@converter("aten.linear")
def linear(ctx: Ctx, node, args, kwargs):
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else kwargs.get("bias")
    y = ctx.op("linear", x, w)
    return y if b is None else ctx.op("add", y, b)


@converter("aten.addmm")
def addmm(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    y = _dense(ctx, a["mat1"], a["mat2"])
    d = y.ty.dtype
    if a["alpha"] != 1:
        y = ctx.op("multiply", y, ctx.const(a["alpha"], d))
    bias = a["self"]
    if a["beta"] != 1:
        bias = ctx.op("multiply", bias, ctx.const(a["beta"], d))
    return ctx.op("add", y, bias) if a["beta"] != 0 else y


@converter("aten.mm")
def mm(ctx, node, args, kwargs):
    return _dense(ctx, args[0], args[1])


@converter("aten.bmm", "aten.matmul")
def bmm(ctx, node, args, kwargs):
    return ctx.op("matmul", args[0], args[1])


@converter("aten.scaled_dot_product_attention")
def sdpa(ctx: Ctx, node, args, kwargs):
    """softmax(q @ k^T * scale + mask) @ v, the form the fuse_attention pass makes one kernel of."""
    a = bind(node, args, kwargs)
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if a["dropout_p"]:
        raise Unsupported("attention dropout is not supported (inference)")
    if a["enable_gqa"]:
        raise Unsupported("enable_gqa is not supported")
    d = q.ty.dtype
    n = ndim(k)
    dk = shape(q)[-1]
    if not is_static(dk):
        raise Unsupported("attention needs a static head size")
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(dk)
    kt = ctx.op("permute_dims", k, axes=tuple(range(n - 2)) + (n - 1, n - 2))
    s = ctx.op("multiply", ctx.op("matmul", q, kt), ctx.const(scale, d))
    if a["is_causal"]:
        L, S = shape(q)[-2], shape(k)[-2]
        if not (is_static(L) and is_static(S)):
            raise Unsupported("is_causal attention needs static sequence lengths (pass a mask instead)")
        causal = np.where(np.tril(np.ones((L, S), bool)), 0.0, -np.inf)
        s = ctx.op("add", s, ctx.const(causal, d))
    if mask is not None:
        if mask.ty.dtype == "bool":
            mask = ctx.op("where", mask, ctx.const(0.0, d), ctx.const(-np.inf, d))
        s = ctx.op("add", s, mask)
    return ctx.op("matmul", ctx.op("softmax", s, axis=-1), v)


@converter("aten.embedding")
def embedding(ctx, node, args, kwargs):
    return ctx.op("take", args[0], args[1], axis=0)


@converter("aten._softmax", "aten.softmax")
def softmax(ctx: Ctx, node, args, kwargs):
    x = ctx.cast(args[0], ctx.out_dtype())
    return ctx.op("softmax", x, axis=norm_axis(int(args[1]), ndim(x)))


@converter("aten._log_softmax", "aten.log_softmax")
def log_softmax(ctx: Ctx, node, args, kwargs):
    x = ctx.cast(args[0], ctx.out_dtype())
    return ctx.op("log_softmax", x, axis=norm_axis(int(args[1]), ndim(x)))


@converter("aten.constant_pad_nd")
def constant_pad_nd(ctx: Ctx, node, args, kwargs):
    x, pad = args[0], [int(p) for p in args[1]]
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    n = ndim(x)
    width = [(0, 0)] * n
    for i in range(len(pad) // 2):          # torch lists pads from the last dim backwards
        width[n - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return ctx.op("pad", x, pad_width=tuple(width), pad_value=float(value))


def _resize_size(x, output_size, scales):
    if output_size:
        return tuple(int(s) for s in output_size)
    h, w = shape(x)[2:]
    if not (is_static(h) and is_static(w)):
        raise Unsupported("upsampling by a scale factor needs static spatial dims")
    return int(math.floor(h * scales[0])), int(math.floor(w * scales[1]))


@converter("aten.upsample_nearest2d.vec")
def upsample_nearest2d(ctx: Ctx, node, args, kwargs):
    """torch's nearest: source = floor(dest * in / out), ONNX's asymmetric + floor."""
    a = bind(node, args, kwargs)
    x = a["input"]
    size = _resize_size(x, a["output_size"], a["scale_factors"])
    return ctx.op("resize2d", x, size=size, method="nearest", coordinate_transformation_mode="asymmetric",
                  rounding_method="floor")


@converter("aten.upsample_bilinear2d.vec")
def upsample_bilinear2d(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x = a["input"]
    size = _resize_size(x, a["output_size"], a["scale_factors"])
    mode = "align_corners" if a["align_corners"] else "pytorch_half_pixel"
    return ctx.op("resize2d", x, size=size, method="linear", coordinate_transformation_mode=mode)
