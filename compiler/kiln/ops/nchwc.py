"""Operators over channel-blocked activations (NCHW[b]c): ``layout_transform``,
``conv2d_nchwc``, ``depthwise_conv2d_nchwc``, ``max_pool2d_nchwc``, ``avg_pool2d_nchwc``.

A channel-blocked tensor holds an NCHW tensor ``X[N, C, H, W]`` as ``Xb[N, C/b, H, W, b]``
with ``Xb[n, q, y, x, r] = X[n, q * b + r, y, x]`` (``b`` divides ``C``): the ``b`` channels of
a pixel are contiguous, so a kernel vectorized over channels loads and stores whole vectors.
The layout is named ``"NCHW"`` or ``"NCHW{b}c"`` (``"NCHW16c"``). ``transform/layout_nchwc.py``
rewrites regions of a graph into these operators; elementwise operators, residual adds and
``mean`` over the spatial axes need no blocked variant (they work on the 5-D tensors as they
are, a per-channel constant re-laid out as ``[1, C/b, 1, 1, b]``).

- ``layout_transform(x, src, dst)``: NCHW <-> NCHW[b]c, or from one block to another;
- ``conv2d_nchwc(x, w, strides, padding, dilation, out_layout, groups)``: a regular or grouped
  convolution of an NCHW or blocked input with the weight pre-packed as
  ``w[O/bo, KH, KW, I/groups, bo]`` (``w[o // bo, ky, kx, i, o % bo] = W[o, i, ky, kx]``), writing
  NCHW[bo]c (``out_layout="NCHW{bo}c"``) or NCHW (``out_layout="NCHW"``); its tensor program is
  ``conv_nchwc.conv2d_nchwc``, scheduled by ``transform/schedule_conv.py``;
- ``depthwise_conv2d_nchwc(x, w, strides, padding, dilation)``: a depthwise convolution
  (one filter per channel) of a blocked input with the weight packed ``w[C/b, KH, KW, b]``
  (``w[q, ky, kx, r] = W[q * b + r, 0, ky, kx]``): each tap is one vector multiply-add of
  ``b`` channels, whatever the stride (``transform/schedule_nchwc.py``);
- ``max_pool2d_nchwc`` / ``avg_pool2d_nchwc``: ``max_pool2d`` / ``avg_pool2d`` (same attributes)
  of a blocked input, vectorized over the channels of a block.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from .. import te
from ..ir.expr import Cast
from ..ir.graph import TensorType
from .common import (FLOAT_DTYPES, check_dtype, const_dim, error, get_attrs, literal, out_type, shape_str, tensor_args)
from .conv_nchwc import conv2d_nchwc as _conv_te, group_blocks_error, nchw_shape
from .nn import (_conv_attrs, _out_dim, _pool_attrs, _ref_avg_pool, _ref_conv, _ref_max_pool,
                 _window, _window_count)
from .registry import register

DEPTHWISE_BLOCK = "depthwise_nchwc"
_LAYOUT = re.compile(r"^NCHW(?:(\d+)c)?$")


# ---- layouts ----------------------------------------------------------------------------------

def parse_layout(op: str, layout) -> Optional[int]:
    """The channel block of a layout name: None for ``"NCHW"``, 16 for ``"NCHW16c"``."""
    m = _LAYOUT.match(layout) if isinstance(layout, str) else None
    if m is None or (m.group(1) is not None and int(m.group(1)) < 1):
        raise error(op, f"layout {layout!r} is not 'NCHW' or 'NCHW<b>c' (b >= 1)")
    return int(m.group(1)) if m.group(1) is not None else None


def layout_name(block: Optional[int]) -> str:
    """``"NCHW"`` for None, else ``"NCHW{block}c"``."""
    return "NCHW" if not block else f"NCHW{block}c"


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """numpy: NCHW ``x`` as ``[N, C/block, H, W, block]``."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked(x: np.ndarray) -> np.ndarray:
    """numpy: a blocked ``[N, C/b, H, W, b]`` array as NCHW."""
    n, q, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, q * b, h, w))


def _blocked_input(op: str, x: TensorType) -> tuple:
    """(N, C, H, W, b) of a static blocked ``[N, C/b, H, W, b]`` tensor type."""
    shape = x.static_shape()
    if shape is None or len(shape) != 5:
        raise error(op, f"expects a static channel-blocked input [N, C/b, H, W, b], got "
                        f"{shape_str(x.shape)}")
    n, q, h, w, b = shape
    return n, q * b, h, w, b


# ---- layout_transform -------------------------------------------------------------------------

def _transform_attrs(op, x: TensorType, attrs):
    a = get_attrs(op, attrs, src="NCHW", dst="NCHW")
    src, dst = parse_layout(op, a["src"]), parse_layout(op, a["dst"])
    shape = x.static_shape()
    if shape is None or len(shape) != (5 if src else 4):
        raise error(op, f"expects a static {'5' if src else '4'}-D {a['src']} input, got "
                        f"{shape_str(x.shape)}")
    if src and shape[4] != src:
        raise error(op, f"input {shape_str(x.shape)} is not {a['src']}")
    n, c, h, w = nchw_shape(shape)
    if dst and c % dst:
        raise error(op, f"{c} channels do not split into blocks of {dst}")
    return src, dst, (n, c, h, w)


def _infer_transform(types, attrs):
    (x,) = tensor_args("layout_transform", types, count=1)
    _, dst, (n, c, h, w) = _transform_attrs("layout_transform", x, attrs)
    return out_type((n, c // dst, h, w, dst) if dst else (n, c, h, w), x.dtype)


def _compute_transform(args, attrs):
    (x,) = args
    src, dst, (n, c, h, w) = _transform_attrs("layout_transform", TensorType(x.shape, x.dtype),
                                              attrs)

    def read(nn, ch, y, xx):
        return x[nn, ch // src, y, xx, ch % src] if src else x[nn, ch, y, xx]
    if not dst:
        return te.compute((n, c, h, w), read, name="layout_transform")
    return te.compute((n, c // dst, h, w, dst),
                      lambda nn, q, y, xx, r: read(nn, q * dst + r, y, xx),
                      name="layout_transform")


def _ref_transform(x, src="NCHW", dst="NCHW"):
    s, d = parse_layout("layout_transform", src), parse_layout("layout_transform", dst)
    nchw = from_blocked(x) if s else x
    return to_blocked(nchw, d) if d else np.ascontiguousarray(nchw)


register("layout_transform", infer=_infer_transform, compute=_compute_transform,
         reference=_ref_transform, pattern="injective", num_args=1,
         doc="layout_transform(x, src='NCHW', dst='NCHW16c'): the same tensor in another "
             "layout: NCHW <-> NCHW[b]c ([N, C/b, H, W, b], channel q * b + r at [:, q, :, :, r]) "
             "or from one channel block to another.")


# ---- conv2d_nchwc -----------------------------------------------------------------------------

def _conv_args(op, types, attrs):
    x, w = tensor_args(op, types, names=("data", "weight"), count=2)
    a = get_attrs(op, attrs, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                  out_layout="NCHW", groups=1)
    ws = w.static_shape()
    if ws is None or len(ws) != 5:
        raise error(op, f"expects a packed weight [O/b, KH, KW, I, b], got {shape_str(w.shape)}")
    if x.dtype != w.dtype:
        raise error(op, f"input dtype {x.dtype} and weight dtype {w.dtype} differ")
    xs = x.static_shape()
    if xs is None or len(xs) not in (4, 5):
        raise error(op, f"expects a static NCHW or NCHW[b]c input, got {shape_str(x.shape)}")
    bo = ws[4]
    out_block = parse_layout(op, a["out_layout"])
    if out_block is not None and out_block != bo:
        raise error(op, f"out_layout {a['out_layout']} does not match the weight's block of {bo}")
    w_shape = (ws[0] * bo, ws[3], ws[1], ws[2])          # OIHW
    problem = group_blocks_error(w_shape[0], w_shape[1], a["groups"], bo,
                                 xs[4] if len(xs) == 5 else None)
    if problem:
        raise error(op, problem)
    conv = {k: a[k] for k in ("strides", "padding", "dilation", "groups")}
    return x, w_shape, bo, out_block, conv


def _infer_conv_nchwc(types, attrs):
    from .nn import _conv_shape
    x, w_shape, bo, out_block, conv = _conv_args("conv2d_nchwc", types, attrs)
    shape, _ = _conv_shape("conv2d_nchwc", TensorType(nchw_shape(x.static_shape()), x.dtype),
                           TensorType(w_shape, x.dtype), conv, 2)
    n, o, oh, ow = (const_dim(d) for d in shape)
    return out_type((n, o // bo, oh, ow, bo) if out_block else (n, o, oh, ow), x.dtype)


def conv2d_nchwc_compute(args, attrs, flat: bool = False, pixel_major: bool = False):
    """The te program of ``conv2d_nchwc`` (``ops/conv_nchwc.py``); ``flat`` and
    ``pixel_major`` are the kernel builder's choices (``transform/conv_blocked.py``)."""
    x, wp = args
    types = [TensorType(x.shape, x.dtype), TensorType(wp.shape, wp.dtype)]
    _, w_shape, bo, out_block, conv = _conv_args("conv2d_nchwc", types, attrs)
    return _conv_te(x, wp, w_shape, conv, bo, flat, pixel_major and len(x.shape) == 4,
                    out_blocked=out_block is not None)


def unpack_conv_weight(wp: np.ndarray) -> np.ndarray:
    """numpy: the OIHW weight of a packed ``[O/b, KH, KW, I, b]`` one."""
    q, kh, kw, i, b = wp.shape
    return np.ascontiguousarray(wp.transpose(0, 4, 3, 1, 2).reshape(q * b, i, kh, kw))


def pack_conv_weight(w: np.ndarray, block: int) -> np.ndarray:
    """numpy: OIHW ``w`` packed as ``[O/block, KH, KW, I, block]`` (O a multiple of block)."""
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // block, block, i, kh, kw).transpose(0, 3, 4, 2, 1))


def _ref_conv_nchwc(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                    out_layout="NCHW", groups=1):
    xn = from_blocked(x) if x.ndim == 5 else x
    y = _ref_conv(2)(xn, unpack_conv_weight(w), strides=strides, padding=padding,
                     dilation=dilation, groups=groups)
    block = parse_layout("conv2d_nchwc", out_layout)
    return to_blocked(y, block) if block else y


register("conv2d_nchwc", infer=_infer_conv_nchwc,
         compute=lambda args, attrs: conv2d_nchwc_compute(args, attrs),
         reference=_ref_conv_nchwc, pattern="out_fusable", num_args=2,
         doc="conv2d_nchwc(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), "
             "out_layout='NCHW', groups=1): conv2d of an NCHW or NCHW[bi]c input x with the "
             "weight packed as [O/bo, KH, KW, I/groups, bo] (w[o // bo, ky, kx, i, o % bo] = "
             "W[o, i, ky, kx]); the output is NCHW, or NCHW[bo]c with out_layout='NCHW<bo>c'. "
             "Grouped: bo divides each group's output channels, and a blocked input's block "
             "divides each group's input channels or is a multiple of them.")


# ---- depthwise_conv2d_nchwc ---------------------------------------------------------------------

def _dw_geometry(op, x: TensorType, w: TensorType, attrs):
    n, c, h, wd, b = _blocked_input(op, x)
    ws = w.static_shape()
    if ws is None or len(ws) != 4 or ws[0] * ws[3] != c or ws[3] != b:
        raise error(op, f"expects a weight [C/b, KH, KW, b] = [{c // b}, KH, KW, {b}] for input "
                        f"{shape_str(x.shape)}, got {shape_str(w.shape)}")
    if x.dtype != w.dtype:
        raise error(op, f"input dtype {x.dtype} and weight dtype {w.dtype} differ")
    a = get_attrs(op, attrs, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    strides, before, after, dilation, _ = _conv_attrs(op, dict(a, groups=1), 2)
    kernel = ws[1:3]
    out = [_out_dim(op, (h, wd)[d], kernel[d], strides[d], dilation[d], before[d], after[d])
           for d in range(2)]
    return (n, c // b, const_dim(out[0]), const_dim(out[1]), b), strides, before, after, \
        dilation, kernel


def _infer_dw(types, attrs):
    x, w = tensor_args("depthwise_conv2d_nchwc", types, names=("data", "weight"), count=2)
    shape = _dw_geometry("depthwise_conv2d_nchwc", x, w, attrs)[0]
    return out_type(shape, x.dtype)


def _compute_dw(args, attrs):
    x, wp = args
    shape, strides, before, after, dilation, kernel = _dw_geometry(
        "depthwise_conv2d_nchwc", TensorType(x.shape, x.dtype), TensorType(wp.shape, wp.dtype),
        attrs)
    # The taps outside the input are skipped (the reduction's ``where``: an ``if`` around the
    # multiply-add, never read), not read from a padded copy: the input is read once, and
    # inside the image every condition holds (a well-predicted branch per tap).
    nchw = (shape[0], shape[1] * shape[4], shape[2], shape[3])
    ry, rx, taps = _window(x, nchw, kernel, strides, dilation, before, after)

    def f(n, q, y, xx, r):
        (py, px), cond = taps(y, xx)
        return te.sum(x[n, q, py, px, r] * wp[q, ry, rx, r], axis=[ry, rx], where=cond)
    return te.compute(shape, f, name=DEPTHWISE_BLOCK)


def pack_depthwise_weight(w: np.ndarray, block: int) -> np.ndarray:
    """numpy: a depthwise OIHW weight ``[C, 1, KH, KW]`` packed as ``[C/block, KH, KW, block]``."""
    c, _, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(c // block, block, kh, kw).transpose(0, 2, 3, 1))


def _ref_dw(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)):
    q, kh, kw, b = w.shape
    wn = w.transpose(0, 3, 1, 2).reshape(q * b, 1, kh, kw)
    y = _ref_conv(2)(from_blocked(x), wn, strides=strides, padding=padding, dilation=dilation,
                     groups=q * b)
    return to_blocked(y, b)


register("depthwise_conv2d_nchwc", infer=_infer_dw, compute=_compute_dw, reference=_ref_dw,
         pattern="out_fusable", num_args=2,
         doc="depthwise_conv2d_nchwc(x, w, strides=(1, 1), padding=(0, 0, 0, 0), "
             "dilation=(1, 1)): depthwise conv2d (groups = channels, one filter each) of an "
             "NCHW[b]c input x with the weight packed as [C/b, KH, KW, b] (w[q, ky, kx, r] = "
             "W[q * b + r, 0, ky, kx]); the output is NCHW[b]c.")


# ---- pools --------------------------------------------------------------------------------------

def _pool_geometry(op, x: TensorType, attrs, extra):
    _blocked_input(op, x)
    shape4, pool, strides, dilation, before, after, a = _pool_attrs(
        op, TensorType(tuple(x.shape[:4]), x.dtype), attrs, extra)
    shape = tuple(const_dim(d) for d in shape4) + (const_dim(x.shape[4]),)
    return shape, pool, strides, dilation, before, after, a


def _infer_pool(op, extra):
    def infer(types, attrs):
        (x,) = tensor_args(op, types, count=1)
        check_dtype(op, x.dtype, FLOAT_DTYPES)
        return out_type(_pool_geometry(op, x, attrs, extra)[0], x.dtype)
    return infer


def _compute_max_pool(args, attrs):
    (x,) = args
    shape, pool, strides, dilation, before, after, _ = _pool_geometry(
        "max_pool2d_nchwc", TensorType(x.shape, x.dtype), attrs, {})
    ry, rx, taps = _window(x, shape, pool, strides, dilation, before, after)

    def f(n, q, y, xx, r):
        (py, px), cond = taps(y, xx)
        return te.max(x[n, q, py, px, r], axis=[ry, rx], where=cond)
    return te.compute(shape, f, name="max_pool2d")


def _compute_avg_pool(args, attrs):
    (x,) = args
    shape, pool, strides, dilation, before, after, a = _pool_geometry(
        "avg_pool2d_nchwc", TensorType(x.shape, x.dtype), attrs, {"count_include_pad": False})
    include = bool(a["count_include_pad"])
    ry, rx, taps = _window(x, shape, pool, strides, dilation, before, after)

    def f(n, q, y, xx, r):
        (py, px), cond = taps(y, xx)
        return te.sum(x[n, q, py, px, r], axis=[ry, rx], where=cond)
    total = te.compute(shape, f, name="avg_pool2d_sum")

    # Windows wholly inside the (un)padded input count every tap (as avg_pool2d).
    exact = all((include or before[d] == 0) and
                (shape[2 + d] - 1) * strides[d] + (pool[d] - 1) * dilation[d] - before[d]
                < const_dim(x.shape[2 + d]) + (after[d] if include else 0) for d in range(2))

    def g(n, q, y, xx, r):
        if exact:
            return total[n, q, y, xx, r] / literal(pool[0] * pool[1], x.dtype)
        cnt = [_window_count(o, x.shape[2 + d], pool[d], strides[d], dilation[d], before[d],
                             after[d], include) for d, o in enumerate((y, xx))]
        return total[n, q, y, xx, r] / Cast(x.dtype, cnt[0] * cnt[1])
    return te.compute(shape, g, name="avg_pool2d")


def _blocked_ref(ref):
    def reference(x, **attrs):
        return to_blocked(ref(from_blocked(x), **attrs), x.shape[4])
    return reference


def _ref_max_pool_b(x, pool_size, strides=None, padding=(0, 0, 0, 0), dilation=(1, 1),
                    ceil_mode=False):
    return _blocked_ref(_ref_max_pool)(x, pool_size=pool_size, strides=strides, padding=padding,
                                       dilation=dilation, ceil_mode=ceil_mode)


def _ref_avg_pool_b(x, pool_size, strides=None, padding=(0, 0, 0, 0), dilation=(1, 1),
                    ceil_mode=False, count_include_pad=False):
    return _blocked_ref(_ref_avg_pool)(x, pool_size=pool_size, strides=strides, padding=padding,
                                       dilation=dilation, ceil_mode=ceil_mode,
                                       count_include_pad=count_include_pad)


register("max_pool2d_nchwc", infer=_infer_pool("max_pool2d_nchwc", {}), compute=_compute_max_pool,
         reference=_ref_max_pool_b, pattern="reduce", num_args=1,
         doc="max_pool2d_nchwc(x, pool_size, strides=None, padding=(0, 0, 0, 0), "
             "dilation=(1, 1), ceil_mode=False): max_pool2d of an NCHW[b]c input (same "
             "attributes), NCHW[b]c output.")
register("avg_pool2d_nchwc", infer=_infer_pool("avg_pool2d_nchwc", {"count_include_pad": False}),
         compute=_compute_avg_pool, reference=_ref_avg_pool_b, pattern="reduce", num_args=1,
         doc="avg_pool2d_nchwc(x, pool_size, strides=None, padding=(0, 0, 0, 0), "
             "dilation=(1, 1), ceil_mode=False, count_include_pad=False): avg_pool2d of an "
             "NCHW[b]c input (same attributes), NCHW[b]c output.")
