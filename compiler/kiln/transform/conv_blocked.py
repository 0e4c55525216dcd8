"""When a conv2d is computed channel-blocked (NCHW[x]c, ``ops/conv_nchwc.py``), and the plan
that the weight packing and the schedule (``schedule_conv.py``) share.

A float32 ``conv2d`` with a constant weight (so the weight is packed once at compile time,
``PassContext.prepack_weights``) and static shapes is blocked when it is

- a regular convolution (groups = 1) with a multiple of 8 output channels, or
- a depthwise convolution (groups = channels = output channels) with a multiple of 8 channels,

except a unit-stride depthwise conv, or a unit-stride conv with an output at least 16 wide and
fewer than 64 multiply-adds per output (``C*KH*KW``): the NCHW schedule, vectorized along the
width, is faster there (the blocked write-back scatters across channel planes, which only pays
off when each output takes enough FMAs);

the block ``bn`` of output channels (16: two AVX2 vectors, or 8) and the pixels of the register
tile are chosen together from the output width (``conv_tile``). The weight is packed along O by ``bn`` (OIHW[bn]o, the existing ``conv2d`` pack
of ``layout.py`` with panels of ``bn``). Any other conv2d (grouped, channel counts not a multiple
of 8, weights given at run time, ``PassContext(conv_blocking=False)``) keeps the NCHW program
and its width-vectorized schedule.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..ir.graph import Call, Constant, TensorType
from . import layout
from .infra import PassContext

# The weight pack of a blocked conv: along O (dim 0) by the channel block, the rest as
# (KH, KW, I): Wp[o // bn, ky, kx, i, o % bn], in the order the reduction loops read it
# (``by`` is neither "cols" nor "rows": only ever packed at compile time).
CONV_BLOCKED = layout.PackRule(1, 0, "ohwi", "blocked", rest=(1, 2, 0))
ANNOTATION = ("kiln.layout", "nchwc")
# Unit-stride depthwise convs, and unit-stride convs at least WIDE wide with fewer multiply-adds
# per output than MIN_REDUCTION, stay NCHW (see ``blocked_plan``).
WIDE, MIN_REDUCTION = 16, 64
BLOCK_LANES = (16, 8)
# Vector accumulators of the register tile: 16 ymm registers hold the accumulators plus the
# weight vectors and one broadcast input; 12 leaves room for both without spilling (a 7 x 16
# tile, 14 accumulators, spills and runs ~1.7x slower than 4 x 16 on znver3).
ACC_BUDGET = 12


def blocked_plan(call: Call, ctx: PassContext) -> Optional[layout.PackPlan]:
    """The pack plan of a conv2d to compute channel-blocked, or None (module docstring)."""
    if call.op != "conv2d" or not ctx.conv_blocking or not ctx.prepack_weights:
        return None
    if len(call.args) != 2 or not isinstance(call.args[1], Constant):
        return None
    x_ty, w_ty, out_ty = call.args[0].ty, call.args[1].ty, call.ty
    if not all(isinstance(t, TensorType) and t.dtype == "float32" and t.static_shape() is not None
               for t in (x_ty, w_ty, out_ty)):
        return None
    shape = w_ty.static_shape()
    channels = x_ty.static_shape()[1]
    groups = dict(call.attrs).get("groups", 1)
    groups = groups[0] if isinstance(groups, (list, tuple)) else groups
    depthwise = groups == channels == shape[0] and shape[1] == 1
    if groups != 1 and not depthwise:
        return None
    strides = dict(call.attrs).get("strides", (1, 1))
    strides = tuple(strides) if isinstance(strides, (list, tuple)) else (strides, strides)
    unit_stride = all(s == 1 for s in strides)
    width = out_ty.static_shape()[3]
    # With a unit stride the NCHW schedule reads contiguous input rows and stores whole
    # vectors along the width; the blocked tile's write-back stores one channel plane per
    # lane (and a blocked depthwise conv first repacks its input), which costs more than it
    # saves when each output takes few FMAs: depthwise (9 taps), or a short reduction on a
    # wide image (a 1x1 conv over 16 channels at 112x112 runs 3x faster in NCHW).
    if unit_stride and (depthwise or (width >= WIDE and
                                      shape[1] * shape[2] * shape[3] < MIN_REDUCTION)):
        return None
    tile = conv_tile(shape[0], out_ty.static_shape()[3])
    if tile is None:
        return None
    return layout.PackPlan(CONV_BLOCKED, shape, tile[0], None)


def pixel_tile(width: Optional[int], bn: int, budget: Optional[int] = None) -> int:
    """Pixels XT of the register tile along an output row of ``width``: the largest divisor
    of ``width`` with ``XT * bn / 8`` vector accumulators within ``budget`` (1 if none)."""
    if width is None:
        return 1
    budget = ACC_BUDGET if budget is None else budget
    most = max(1, budget // max(1, bn // layout.CHUNK))
    return max(d for d in range(1, min(width, most) + 1) if width % d == 0)


def conv_tile(channels: int, width: int) -> Optional[Tuple[int, int]]:
    """(bn, XT): the channel block and the pixels of the register tile, the pair with the
    most accumulators (FMAs in flight) within the budget; on a tie the wider block (fewer
    loads per FMA). A width of 7 or 14 gets 7 x 8 (7 accumulators) rather than 1 x 16 or
    2 x 16. None when no block divides ``channels``."""
    best = None
    for bn in BLOCK_LANES:
        if channels % bn:
            continue
        xt = pixel_tile(width, bn)
        acc = xt * max(1, bn // layout.CHUNK)
        if best is None or acc > best[0]:
            best = (acc, bn, xt)
    return None if best is None else best[1:]
