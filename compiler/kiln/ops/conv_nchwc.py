"""conv2d computed in a channel-blocked layout (NCHW[x]c): the te definitions the default
pipeline uses for a float32 conv2d whose weight is a constant (``transform/conv_blocked.py``
decides when). The operator itself, its shape rule and numpy reference stay ``conv2d`` in
``nn.py``; this is another tensor program for the same thing, read NCHW and written NCHW.

The weight arrives pre-packed by output-channel blocks of ``bn`` with the input channels
innermost (OHWI[bn]o, ``Wp[o // bn, ky, kx, i, o % bn]``, see ``transform/layout.py``), so one
vector load gives the weights of ``bn`` output channels for one input tap, and the reduction
(kernel rows, kernel columns, input channels) walks the weight sequentially. The result is computed as
``conv2d_nchwc[n, o // bn, p, o % bn]`` over the flat output pixels ``p = y * W + x`` of each
image (or ``[n, o // bn, y, x, o % bn]`` when the tiles run along rows; the block ``conv2d_nchwc``, which the kernel builder annotates ``kiln.layout = nchwc`` so
that the schedule finds it) and read back as NCHW by the elementwise block ``conv2d``, which the
schedule folds into the register tile's write-back:
``sum over (ry, rx, rc) pad[n, rc, (p // W)*s + ry*d, (p % W)*s + rx*d] * Wp[o // bn, ry, rx, rc, o % bn]``
(the input is broadcast, the weight is a vector load). The pixels are one flat run so that the
register tile's pixels need not fit a row: a 6-pixel tile covers a 7 x 7 image as 8 full tiles
and one of 1 pixel, where tiling each row of 7 wastes 5 of 12 slots
(``transform/conv_blocked.tile_plan`` picks rows or flat).

With ``pixel_major`` the input is first copied to NHWC (``conv2d_pad_nhwc``, with the padding
if any), so that the reduction over input channels reads each pixel's channels contiguously
instead of one value per channel plane (``transform/conv_blocked.pixel_major`` says when). Only regular convolutions (groups = 1)
are blocked: depthwise ones measured faster in the NCHW schedule (``transform/conv_blocked.py``).
"""
from __future__ import annotations

from .. import te
from ..ir.graph import TensorType
from .common import const_dim
from .nn import _conv_shape
from .transform import padded

# The name of the blocked reduction block (the schedule rule looks for it).
BLOCK_NAME = "conv2d_nchwc"


def _geometry(x: te.Tensor, w_shape, attrs):
    shape, (strides, before, after, dilation, groups, kernel) = _conv_shape(
        "conv2d", TensorType(x.shape, x.dtype), TensorType(tuple(w_shape), x.dtype), attrs, 2)
    return shape, strides, before, after, dilation, groups, kernel


def _tap(o, r, stride, dilation):
    return (o * stride if stride != 1 else o) + (r * dilation if dilation != 1 else r)


def conv2d_nchwc(x: te.Tensor, wp: te.Tensor, w_shape, attrs: dict, bn: int,
                 flat: bool = True, pixel_major: bool = False) -> te.Tensor:
    """NCHW ``conv2d(x, W)`` from the packed weight ``wp`` (``[O/bn, KH, KW, I, bn]`` of the
    weight of shape ``w_shape``), computed in blocks of ``bn`` output channels; groups must be 1.
    ``flat``: the blocked result over flat pixels ``[N, O/bn, H*W, bn]`` (else
    ``[N, O/bn, H, W, bn]``, for tiles along rows); ``pixel_major``: read the input through an
    NHWC copy (module docstring)."""
    shape, strides, before, after, dilation, groups, kernel = _geometry(x, w_shape, attrs)
    n_out, cg = int(w_shape[0]), int(w_shape[1])
    if n_out % bn:
        raise ValueError(f"conv2d_nchwc: {n_out} output channels are not a multiple of {bn}")
    height, width = const_dim(shape[2]), const_dim(shape[3])
    if height is None or width is None:
        raise ValueError(f"conv2d_nchwc: the output size {shape[2:]} must be static")
    blocked = (shape[0], n_out // bn) + ((height * width,) if flat else (height, width)) + (bn,)
    ry = te.reduce_axis((0, kernel[0]), name="ry")
    rx = te.reduce_axis((0, kernel[1]), name="rx")
    sy, sx = strides
    dy, dx = dilation
    if groups != 1:
        raise ValueError(f"conv2d_nchwc: groups={groups} with weight {tuple(w_shape)}; only regular "
                         "convolutions (groups = 1) are computed channel-blocked")
    pad = x
    if any(before) or any(after):
        pad = padded(x, [(0, 0), (0, 0)] + list(zip(before, after)), 0.0,
                     name="conv2d_border" if pixel_major else "conv2d_pad")
    if pixel_major:
        src = pad
        n_, c_, h_, w_ = src.shape
        # The padding (inlined into it) and the transpose in one pass over the input.
        pad = te.compute((n_, h_, w_, c_), lambda n, yy, xq, c: src[n, c, yy, xq],
                         name="conv2d_pad_nhwc")

        def read(n, c, yy, xq):
            return pad[n, yy, xq, c]
    else:
        def read(n, c, yy, xq):
            return pad[n, c, yy, xq]
    rc = te.reduce_axis((0, cg), name="rc")

    def f(n, ob, *pixel):
        oi = pixel[-1]
        if not flat:
            y, xx = pixel[:2]
        else:
            p = pixel[0]
            y, xx = (p // width, p % width) if width > 1 else (p, 0)
        return te.sum(read(n, rc, _tap(y, ry, sy, dy), _tap(xx, rx, sx, dx)) *
                      wp[ob, ry, rx, rc, oi], axis=[ry, rx, rc])
    out = te.compute(blocked, f, name=BLOCK_NAME)
    if not flat:
        return te.compute(shape, lambda n, o, y, xx: out[n, o // bn, y, xx, o % bn], name="conv2d")
    return te.compute(shape, lambda n, o, y, xx: out[n, o // bn, y * width + xx, o % bn],
                      name="conv2d")

