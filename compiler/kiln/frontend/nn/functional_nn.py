"""The ops behind the layers: linear, convolution, pooling, resizing, normalisation, embedding
and scaled dot-product attention, with PyTorch's signatures (re-exported by
``kiln.nn.functional``).

>>> # inside forward:
>>> # y = F.conv2d(x, w, b, stride=2, padding=1)          -> conv2d, reshape(b), add
>>> # o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ...ir import dtype as dt
from .tensor import Tensor, constant, emit, fail, is_static, static_int

__all__ = ["linear", "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
           "interpolate", "layer_norm", "rms_norm", "group_norm", "batch_norm", "embedding",
           "scaled_dot_product_attention"]


def _tuple(v, n: int, what: str) -> tuple:
    """An int or an n-tuple as an n-tuple of ints (PyTorch's ``_pair``)."""
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise fail(f"{what} must be an int or {n} ints, got {tuple(v)}")
        return tuple(int(x) for x in v)
    return (int(v),) * n


def _bias_add(y: Tensor, bias: Optional[Tensor], axis: int) -> Tensor:
    """``y + bias`` with ``bias`` [C] broadcast along ``axis`` (channels) of ``y``."""
    if bias is None:
        return y
    trailing = y.ndim - 1 - axis
    b = bias if trailing == 0 else bias.reshape(bias.shape[0], *([1] * trailing))
    return y + b


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``x @ weight.T + bias`` with ``weight`` [out, in] (operator ``linear``, then ``add``)."""
    return _bias_add(emit("linear", x, weight), bias, -1 % max(1, x.ndim))


def _conv_padding(padding, kernel, dilation, strides, n: int, what: str):
    """PyTorch's conv padding (an int, n ints, "valid" or "same") as (before..., after...)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * (2 * n)
        if padding != "same":
            raise fail(f"{what}: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
        if any(s != 1 for s in strides):
            raise fail(f"{what}: padding='same' needs stride 1, got stride {strides}")
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        # PyTorch puts the odd element after (right/bottom)
        return tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
    pads = _tuple(padding, n, f"{what}: padding")
    return pads + pads


def conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """1-D convolution, x [N, C, L], weight [O, C/groups, K] (operator ``conv1d``)."""
    strides, dil = _tuple(stride, 1, "conv1d: stride"), _tuple(dilation, 1, "conv1d: dilation")
    kernel = (static_int(weight.shape[-1], "conv1d: kernel size"),)
    pad = _conv_padding(padding, kernel, dil, strides, 1, "conv1d")
    y = emit("conv1d", x, weight, strides=strides, padding=pad, dilation=dil, groups=int(groups))
    return _bias_add(y, bias, 1)


def conv2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D convolution, NCHW input, OIHW weight (operator ``conv2d``); ``padding`` as PyTorch:
    an int, (ph, pw), 'valid' or 'same'."""
    strides, dil = _tuple(stride, 2, "conv2d: stride"), _tuple(dilation, 2, "conv2d: dilation")
    kernel = tuple(static_int(k, "conv2d: kernel size") for k in weight.shape[-2:])
    pad = _conv_padding(padding, kernel, dil, strides, 2, "conv2d")
    y = emit("conv2d", x, weight, strides=strides, padding=pad, dilation=dil, groups=int(groups))
    return _bias_add(y, bias, 1)


def _pool_args(kernel_size, stride, padding, dilation, what):
    kernel = _tuple(kernel_size, 2, f"{what}: kernel_size")
    strides = kernel if stride is None or (isinstance(stride, (list, tuple)) and not stride) \
        else _tuple(stride, 2, f"{what}: stride")
    ph, pw = _tuple(padding, 2, f"{what}: padding")
    return kernel, strides, (ph, pw, ph, pw), _tuple(dilation, 2, f"{what}: dilation")


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False) -> Tensor:
    """Max pooling over H, W of an NCHW tensor; ``stride`` defaults to ``kernel_size``."""
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation, "max_pool2d")
    return emit("max_pool2d", x, pool_size=k, strides=s, padding=p, dilation=d,
                ceil_mode=bool(ceil_mode))


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Average pooling over H, W of an NCHW tensor (PyTorch's defaults)."""
    k, s, p, d = _pool_args(kernel_size, stride, padding, 1, "avg_pool2d")
    return emit("avg_pool2d", x, pool_size=k, strides=s, padding=p, dilation=d,
                ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    """Average pooling to ``output_size`` (an int, or (h, w) where None keeps that size)."""
    if not isinstance(output_size, (list, tuple)):
        output_size = (output_size, output_size)
    size = tuple(x.shape[-2 + i] if s is None else int(s) for i, s in enumerate(output_size))
    return emit("adaptive_avg_pool2d", x, output_size=size)


# PyTorch's interpolate conventions as ONNX Resize modes: (method, coordinates, rounding)
_RESIZE = {"nearest": ("nearest", "asymmetric", "floor"),
           "bilinear": ("linear", "pytorch_half_pixel", "round_prefer_floor")}


def interpolate(x: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: Optional[bool] = None) -> Tensor:
    """Resize H, W of an NCHW tensor (operator ``resize2d``) to ``size`` or by ``scale_factor``,
    with PyTorch's coordinate conventions for ``mode`` 'nearest' and 'bilinear'."""
    if mode not in _RESIZE:
        raise fail(f"interpolate: mode {mode!r} is not supported; use one of {sorted(_RESIZE)}")
    if (size is None) == (scale_factor is None):
        raise fail("interpolate: give exactly one of size and scale_factor")
    if size is None:
        sh, sw = scale_factor if isinstance(scale_factor, (list, tuple)) else (scale_factor,) * 2
        size = (int(math.floor(static_int(x.shape[-2], "interpolate: height") * sh)),
                int(math.floor(static_int(x.shape[-1], "interpolate: width") * sw)))
    size = _tuple(size, 2, "interpolate: size")
    method, coords, rounding = _RESIZE[mode]
    if align_corners:
        if mode == "nearest":
            raise fail("interpolate: align_corners applies only to bilinear")
        coords = "align_corners"
    return emit("resize2d", x, size=size, method=method, coordinate_transformation_mode=coords,
                rounding_method=rounding)


def _affine(x: Tensor, shape, param: Optional[Tensor], fill: float) -> Tensor:
    # the norm operators take gamma/beta always; a layer without them passes ones/zeros
    return param if param is not None else constant(np.full(tuple(shape), fill), x.dtype)


def layer_norm(x: Tensor, normalized_shape, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims (operator ``layer_norm``)."""
    shape = _tuple(normalized_shape, len(normalized_shape), "layer_norm: normalized_shape") \
        if isinstance(normalized_shape, (list, tuple)) else (int(normalized_shape),)
    axes = tuple(range(-len(shape), 0))
    return emit("layer_norm", x, _affine(x, shape, weight, 1.0), _affine(x, shape, bias, 0.0),
                axes=axes, eps=float(eps))


def rms_norm(x: Tensor, normalized_shape, weight: Optional[Tensor] = None,
             eps: Optional[float] = None) -> Tensor:
    """RMS normalisation over the trailing dims; ``eps`` defaults to the dtype's machine epsilon
    (as PyTorch)."""
    shape = tuple(int(s) for s in normalized_shape) if isinstance(normalized_shape, (list, tuple)) \
        else (int(normalized_shape),)
    eps = float(np.finfo(dt.to_numpy(x.dtype)).eps) if eps is None else float(eps)
    return emit("rms_norm", x, _affine(x, shape, weight, 1.0), axes=tuple(range(-len(shape), 0)),
                eps=eps)


def group_norm(x: Tensor, num_groups: int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Group normalisation of [N, C, ...] with per-channel affine ``weight``/``bias``."""
    c = static_int(x.shape[1], "group_norm: channels")
    return emit("group_norm", x, _affine(x, (c,), weight, 1.0), _affine(x, (c,), bias, 0.0),
                num_groups=int(num_groups), eps=float(eps))


def batch_norm(x: Tensor, running_mean: Tensor, running_var: Tensor,
               weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Inference batch norm over channel axis 1 with the running statistics (PyTorch's
    argument order)."""
    if training:
        raise fail("batch_norm: training mode is not supported; Kiln compiles inference graphs")
    c = static_int(x.shape[1], "batch_norm: channels")
    return emit("batch_norm", x, _affine(x, (c,), weight, 1.0), _affine(x, (c,), bias, 0.0),
                running_mean, running_var, axis=1, eps=float(eps))


def embedding(input: Tensor, weight: Tensor) -> Tensor:  # noqa: A002 - PyTorch's name
    """Rows of ``weight`` [num, dim] at integer ``input`` (operator ``take`` on axis 0)."""
    return emit("take", weight, input, axis=0)


def _repeat_heads(t: Tensor, rep: int) -> Tensor:
    # [..., Hk, S, E] -> [..., Hk * rep, S, E], each head repeated rep times in a row
    # (torch.repeat_interleave(dim=-3), as enable_gqa does)
    *lead, hk, s, e = t.shape
    y = t.unsqueeze(-3).expand(*lead, hk, rep, s, e)
    return y.reshape(*lead, hk * rep, s, e)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` for q [..., L, E], k [..., S, E], v [..., S, Ev]
    (PyTorch's semantics). ``attn_mask``: bool (True = attend) or additive float, broadcast to
    [..., L, S]. ``is_causal``: query i attends to keys 0..i (top-left aligned, as PyTorch);
    it needs static L and S (pass an ``attn_mask`` input for symbolic lengths).
    ``enable_gqa``: k/v with fewer heads (dim -3) are repeated to q's heads.

    Masked scores are set to the dtype's lowest finite value rather than -inf, so that a graph
    constant never holds an infinity; the softmax is the same unless a whole row is masked.
    """
    if dropout_p:
        raise fail("scaled_dot_product_attention: dropout is not supported at inference")
    if is_causal and attn_mask is not None:
        raise fail("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    e = static_int(query.shape[-1], "scaled_dot_product_attention: the embedding size E")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] is not query.shape[-3]:
        hq = static_int(query.shape[-3], "sdpa: query heads")
        hk = static_int(key.shape[-3], "sdpa: key heads")
        if hq % hk:
            raise fail(f"scaled_dot_product_attention: {hq} query heads are not a multiple of {hk} key heads")
        key, value = _repeat_heads(key, hq // hk), _repeat_heads(value, hq // hk)
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    scores = (query @ key.mT) * scale
    lowest = float(np.finfo(dt.to_numpy(scores.dtype)).min)
    if is_causal:
        length, source = query.shape[-2], key.shape[-2]
        if not (is_static(length) and is_static(source)):
            raise fail("scaled_dot_product_attention: is_causal needs static sequence lengths, got "
                       f"L={length}, S={source}; pass a causal attn_mask as an input instead")
        attn_mask = constant(np.tril(np.ones((int(length), int(source)), dtype=bool)))
    if attn_mask is not None:
        if dt.is_bool(attn_mask.dtype):
            scores = emit("where", attn_mask, scores, constant(lowest, scores.dtype))
        else:
            scores = scores + attn_mask
    return scores.softmax(-1) @ value
