"""When a conv2d is computed channel-blocked (NCHW[x]c, ``ops/conv_nchwc.py``), and the plan
that the weight packing and the schedule (``schedule_conv.py``) share.

A float32 ``conv2d`` with a constant weight (so the weight is packed once at compile time,
``PassContext.prepack_weights``) and static shapes is blocked when it is

a regular convolution (groups = 1) with a multiple of 8 output channels, except a unit-stride
conv with an output at least 16 wide and fewer than 64 multiply-adds per output (``C*KH*KW``):
the NCHW schedule, vectorized along the width, is faster there (the blocked write-back scatters
across channel planes, which only pays off when each output takes enough FMAs). Depthwise
convolutions (groups = channels = output channels) stay NCHW at any stride: since stride-2 lanes
load as two vectors and a shuffle (codegen) and the padding copies rows with vector loads, the
NCHW schedule runs MobileNetV2's stride-2 depthwise layers 1.4-2.7x faster than the blocked
program, which repacks its input to NCHW[bn]c with a gather per element (``ops/conv_nchwc.py``
keeps that program, for a graph-level NCHWc layout that would not need the repack);

the block ``bn`` of output channels (16: two AVX2 vectors, or 8) and the pixels of the register
tile are chosen together from the output width (``conv_tile``, ``tile_score``); the pixels need
not divide the width (the last tile of a row is guarded). The weight is packed along O by ``bn`` (OIHW[bn]o, the existing ``conv2d`` pack
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
# Unit-stride convs at least WIDE wide with fewer multiply-adds per output than MIN_REDUCTION
# stay NCHW (see ``blocked_plan``).
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
    groups = dict(call.attrs).get("groups", 1)
    groups = groups[0] if isinstance(groups, (list, tuple)) else groups
    if groups != 1:         # grouped and depthwise convs keep NCHW (module docstring)
        return None
    strides = dict(call.attrs).get("strides", (1, 1))
    strides = tuple(strides) if isinstance(strides, (list, tuple)) else (strides, strides)
    unit_stride = all(s == 1 for s in strides)
    width = out_ty.static_shape()[3]
    # The NCHW schedule reads input rows with vector loads (stride 2: loads and a shuffle) and
    # stores whole vectors along the width; the blocked tile's write-back stores one channel
    # plane per lane, which costs more than it saves when each output takes few FMAs: a
    # short reduction on a wide image (a 1x1 conv over 16 channels at 112x112 runs 3x faster
    # in NCHW).
    if unit_stride and width >= WIDE and shape[1] * shape[2] * shape[3] < MIN_REDUCTION:
        return None
    tile = conv_tile(shape[0], out_ty.static_shape()[3])
    if tile is None:
        return None
    return layout.PackPlan(CONV_BLOCKED, shape, tile[0], None)


def pixel_tile(width: Optional[int], bn: int, budget: Optional[int] = None) -> int:
    """Pixels XT of the register tile along an output row of ``width`` for a block of ``bn``
    channels: the XT (at most ``width``, with ``XT * bn / 8`` vector accumulators within
    ``budget``) with the best ``tile_score``; on a tie the larger (more FMAs in flight).
    XT need not divide the width: the last tile of a row is guarded (``split``) and
    lowering peels it off (``partition_loops``). 1 for a symbolic width."""
    if width is None:
        return 1
    budget = ACC_BUDGET if budget is None else budget
    most = max(1, min(width, budget // max(1, bn // layout.CHUNK)))
    return max(range(1, most + 1), key=lambda xt: (tile_score(width, bn, xt), xt))


# A reduction step of the tile costs at least MIN_ACC accumulators' worth of FMA issue slots:
# 2 FMA pipes x 4 cycles of FMA latency on znver3, so fewer than 8 accumulators leave pipes
# idle; plus STEP_OVERHEAD slots for the loop and address updates of each step.
MIN_ACC, STEP_OVERHEAD = 8, 2


def tile_score(width: int, bn: int, xt: int) -> float:
    """Useful multiply-adds per issue slot of a row of ``width`` pixels computed in tiles of
    ``xt`` pixels x ``bn`` channels (higher is better). A row takes ``ceil(width / xt)``
    tiles, the last one guarded, and a tile step costs ``max(acc, MIN_ACC) + STEP_OVERHEAD``
    slots (``acc = xt * bn / 8`` vector accumulators), whether or not all its pixels are
    real: so a tile that leaves a short last tile scores lower (7 wide: 4 x 16, not 6 x 16)."""
    vecs = max(1, bn // layout.CHUNK)
    tiles = -(-width // xt)
    return width * vecs / (tiles * (max(xt * vecs, MIN_ACC) + STEP_OVERHEAD))


def conv_tile(channels: int, width: int) -> Optional[Tuple[int, int]]:
    """(bn, XT): the channel block and the pixels of the register tile, the pair with the
    best ``tile_score`` within the accumulator budget; on a tie the one with more
    accumulators, then the wider block (fewer loads per FMA). 56 or 112 wide get 6 x 16, 14
    gets 5 x 16, 7 gets 4 x 16 (a 3-pixel last tile). None when no block divides ``channels``."""
    best = None
    for bn in BLOCK_LANES:
        if channels % bn:
            continue
        xt = pixel_tile(width, bn)
        vecs = max(1, bn // layout.CHUNK)
        key = (tile_score(width, bn, xt), xt * vecs, bn)
        if best is None or key > best[0]:
            best = (key, bn, xt)
    return None if best is None else best[1:]
