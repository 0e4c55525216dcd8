"""conv2d computed in a channel-blocked layout (NCHW[x]c): the te definitions the default
pipeline uses for a float32 conv2d whose weight is a constant (``transform/conv_blocked.py``
decides when), and for the operator ``conv2d_nchwc`` (``ops/nchwc.py``) that
``transform/layout_nchwc.py`` puts where activations stay channel-blocked from conv to conv.
For a ``conv2d`` this is another tensor program for the same thing, read NCHW and written NCHW;
``conv2d_nchwc`` reads NCHW or ``[N, C/bi, H, W, bi]`` and writes NCHW or ``[N, O/bn, H, W, bn]``.

The weight arrives pre-packed by output-channel blocks of ``bn`` with the input channels
innermost (OHWI[bn]o, ``Wp[o // bn, ky, kx, i, o % bn]``, see ``transform/layout.py``), so one
vector load gives the weights of ``bn`` output channels for one input tap, and the reduction
(kernel rows, kernel columns, input channels) walks the weight sequentially. The result is
computed as ``conv2d_nchwc[n, o // bn, p, o % bn]`` over the flat output pixels
``p = y * W + x`` of each image (or ``[n, o // bn, y, x, o % bn]`` when the tiles run along
rows; the block ``conv2d_nchwc``, which the kernel builder annotates ``kiln.layout = nchwc`` so
that the schedule finds it) and read back as NCHW (or as the blocked output) by the elementwise
block ``conv2d``, which the schedule folds into the register tile's write-back:
``sum over (ry, rx, rc) pad[n, rc, (p // W)*s + ry*d, (p % W)*s + rx*d] * Wp[o // bn, ry, rx, rc, o % bn]``
(the input is broadcast, the weight is a vector load). The pixels are one flat run so that the
register tile's pixels need not fit a row: a 6-pixel tile covers a 7 x 7 image as 8 full tiles
and one of 1 pixel, where tiling each row of 7 wastes 5 of 12 slots
(``transform/conv_blocked.tile_plan`` picks rows or flat). A blocked input is read as
``pad[n, rco, yy, xx, rci]`` over the reductions ``(ry, rx, rco, rci)``: a pixel's channels are
contiguous, and a blocked output is written ``bn`` contiguous channels per pixel.

With ``pixel_major`` an NCHW input is first copied to NHWC (``conv2d_pad_nhwc``, with the
padding if any), so that the reduction over input channels reads each pixel's channels
contiguously instead of one value per channel plane (``transform/conv_blocked.pixel_major``
says when). Regular convolutions and grouped ones whose groups are whole blocks wide are
computed here (a block of a grouped conv reads its group's input channels, ``ob // (blocks a
group) * I/groups + rc``); depthwise ones over NCHW stay in the NCHW schedule, over blocked
activations they are ``depthwise_conv2d_nchwc``.
"""
from __future__ import annotations

from typing import Optional

from .. import te
from ..ir.graph import TensorType
from .common import const_dim
from .nn import _conv_shape
from .transform import padded

# The name of the blocked reduction block (the schedule rule looks for it).
BLOCK_NAME = "conv2d_nchwc"
# The annotation of that block saying where its padding columns lie: "W P S D K" (input width,
# columns of padding before, stride, dilation, kernel width along a row), from which the
# schedule counts the tiles of a row that read no padding (``schedule_conv``, ``pad_inline``).
COLUMNS = "kiln.conv_columns"


def _geometry(x: te.Tensor, w_shape, attrs):
    """The conv's output shape and attributes; ``x`` NCHW or blocked ``[N, C/b, H, W, b]``."""
    in_shape = nchw_shape(x.shape)
    shape, (strides, before, after, dilation, groups, kernel) = _conv_shape(
        "conv2d", TensorType(in_shape, x.dtype), TensorType(tuple(w_shape), x.dtype), attrs, 2)
    return shape, strides, before, after, dilation, groups, kernel


def nchw_shape(shape) -> tuple:
    """The NCHW shape of a tensor that is NCHW (4-D) or channel-blocked ``[N, C/b, H, W, b]``."""
    if len(shape) == 5:
        return (shape[0], const_dim(shape[1]) * const_dim(shape[4]), shape[2], shape[3])
    return tuple(shape)


def group_blocks_error(n_out: int, cg: int, groups: int, bn: int,
                       in_block: Optional[int]) -> Optional[str]:
    """Why a grouped conv cannot be computed in blocks of ``bn`` output channels from an input
    in blocks of ``in_block`` (None: NCHW), or None when it can: each output block must lie in
    one group, and a group's ``cg`` input channels and the input's blocks must nest."""
    if groups == 1:
        return None
    if (n_out // groups) % bn:
        return (f"groups={groups}: a block of {bn} output channels must lie in one group of "
                f"{n_out // groups}")
    if in_block is not None and cg % in_block and in_block % cg:
        return (f"groups={groups}: a group's {cg} input channels and the input's blocks of "
                f"{in_block} do not nest")
    return None


def _tap(o, r, stride, dilation):
    return (o * stride if stride != 1 else o) + (r * dilation if dilation != 1 else r)


def conv2d_nchwc(x: te.Tensor, wp: te.Tensor, w_shape, attrs: dict, bn: int,
                 flat: bool = True, pixel_major: bool = False,
                 out_blocked: bool = False) -> te.Tensor:
    """``conv2d(x, W)`` from the packed weight ``wp`` (``[O/bn, KH, KW, I, bn]`` of the
    weight of shape ``w_shape``), computed in blocks of ``bn`` output channels; a grouped conv's
    blocks each lie in one group (``bn`` divides its output channels).
    ``x`` is NCHW, or channel-blocked ``[N, I/bi, H, W, bi]`` (then the reduction runs over
    ``(ry, rx, rco, rci)``, input channel ``rco * bi + rci``, so each step reads a pixel's
    ``bi`` channels contiguously; grouped, over the group's blocks, or its lanes of one
    block). ``flat``: the blocked result over flat pixels ``[N, O/bn, H*W, bn]`` (else ``[N, O/bn, H, W, bn]``, for tiles along rows);
    ``pixel_major``: read an NCHW input through an NHWC copy (module docstring);
    ``out_blocked``: the result is ``[N, O/bn, OH, OW, bn]`` (NCHW[bn]c) instead of NCHW."""
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
    group_out = n_out // groups
    in_block = const_dim(x.shape[4]) if len(x.shape) == 5 else None
    problem = group_blocks_error(n_out, cg, groups, bn, in_block)
    if problem:
        raise ValueError(f"conv2d_nchwc: {problem}")
    if in_block is not None and pixel_major:
        raise ValueError("conv2d_nchwc: a channel-blocked input is read as it is (no NHWC copy)")
    pad = x
    if any(before) or any(after):
        pads = [(0, 0), (0, 0)] + list(zip(before, after)) + ([(0, 0)] if in_block else [])
        pad = padded(x, pads, 0.0, name="conv2d_border" if pixel_major else "conv2d_pad")
    if pixel_major:
        src = pad
        n_, c_, h_, w_ = src.shape
        # The padding (inlined into it) and the transpose in one pass over the input.
        pad = te.compute((n_, h_, w_, c_), lambda n, yy, xq, c: src[n, c, yy, xq],
                         name="conv2d_pad_nhwc")
    def group_base(ob):
        """The first input channel of the group that output block ``ob`` lies in."""
        return ob // (group_out // bn) * cg

    if in_block is not None and groups != 1 and in_block % cg == 0:
        # A group's channels are part of one input block: (ry, rx, one block, cg lanes).
        rco = te.reduce_axis((0, 1), name="rco")
        rci = te.reduce_axis((0, cg), name="rci")
        axes = [ry, rx, rco, rci]

        def term(n, yy, xq, ob, oi):
            base = group_base(ob)
            return pad[n, base // in_block + rco, yy, xq, base % in_block + rci] * \
                wp[ob, ry, rx, rco * cg + rci, oi]
    elif in_block is not None:
        # Whole input blocks: all of them (groups = 1), or the group's cg / in_block.
        rco = te.reduce_axis((0, cg // in_block), name="rco")
        rci = te.reduce_axis((0, in_block), name="rci")
        axes = [ry, rx, rco, rci]

        def term(n, yy, xq, ob, oi):
            first = 0 if groups == 1 else group_base(ob) // in_block
            return pad[n, first + rco, yy, xq, rci] * wp[ob, ry, rx, rco * in_block + rci, oi]
    else:
        rc = te.reduce_axis((0, cg), name="rc")
        axes = [ry, rx, rc]

        def term(n, yy, xq, ob, oi):
            # Grouped: block ob lies in group ob * bn // group_out and reads its cg channels.
            c = rc if groups == 1 else group_base(ob) + rc
            value = pad[n, yy, xq, c] if pixel_major else pad[n, c, yy, xq]
            return value * wp[ob, ry, rx, rc, oi]

    def f(n, ob, *pixel):
        oi = pixel[-1]
        if not flat:
            y, xx = pixel[:2]
        else:
            p = pixel[0]
            y, xx = (p // width, p % width) if width > 1 else (p, 0)
        return te.sum(term(n, _tap(y, ry, sy, dy), _tap(xx, rx, sx, dx), ob, oi), axis=axes)
    in_width = const_dim(x.shape[3])
    columns = {COLUMNS: f"{in_width} {before[1]} {sx} {dx} {kernel[1]}"} if in_width else {}
    out = te.compute(blocked, f, name=BLOCK_NAME, attrs=columns)
    if out_blocked:
        if not flat:
            return out
        return te.compute(blocked[:2] + (height, width, bn),
                          lambda n, ob, y, xx, oi: out[n, ob, y * width + xx, oi], name="conv2d")
    if not flat:
        return te.compute(shape, lambda n, o, y, xx: out[n, o // bn, y, xx, o % bn], name="conv2d")
    return te.compute(shape, lambda n, o, y, xx: out[n, o // bn, y * width + xx, o % bn],
                      name="conv2d")
