"""When a conv2d is computed channel-blocked (NCHW[x]c, ``ops/conv_nchwc.py``), and the plan
that the weight packing and the schedule (``schedule_conv.py``) share.

A float32 ``conv2d`` with a constant weight (so the weight is packed once at compile time,
``PassContext.prepack_weights``) and static shapes is blocked when it is

a regular convolution (groups = 1) with a multiple of 8 output channels, or a grouped one whose
groups are multiples of 8 channels wide (``group_width``: each block of output channels lies in
one group and reads its input channels), except a unit-stride
conv with an output at least 16 wide and fewer than 64 multiply-adds per output (``C*KH*KW``):
the NCHW schedule, vectorized along the width, is faster there (the blocked write-back scatters
across channel planes, which only pays off when each output takes enough FMAs). Depthwise
convolutions (groups = channels = output channels) of an NCHW input stay NCHW at any stride:
repacking their input to NCHW[bn]c would cost a gather per element. Where the activations are
channel-blocked already (``layout_nchwc.py``), a conv reads and writes them blocked
(``conv2d_nchwc``: its write-back stores whole vectors, so the exception above does not apply
there, and ``nchwc_compute`` picks its tile form) and a depthwise conv is
``depthwise_conv2d_nchwc``;

a 1x1 unit-stride conv on a small image reads its input through an NHWC copy (``pixel_major``);

the block ``bn`` of output channels (16: two AVX2 vectors, or 8) and the pixels of the register
tile are chosen together from the output size (``conv_tile``, ``tile_plan``): the tile runs
along each output row, or along the image's ``H * W`` pixels as one flat run when rows are
short (7 or 14 wide); it need not divide either (the last tile of a row or image is guarded).
The weight is packed along O by ``bn`` (OIHW[bn]o, the existing ``conv2d`` pack of ``layout.py``
with panels of ``bn``; a grouped conv's weight ``[O, I/groups, KH, KW]`` the same way). Any
other conv2d (groups narrower than 8 channels, channel counts not a multiple
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
# Vector accumulators of the register tile: ``ctx.tile_accumulators`` (the register file holds
# the accumulators plus the weight vectors and one broadcast input; on AVX2, 12 of 16 leaves
# room for both without spilling: a 7 x 16 tile, 14 accumulators, spills and runs ~1.7x slower
# than 4 x 16 on znver3).
# Output pixels per image up to which a 1x1 conv reads its input in NHWC (``pixel_major``).
PIXEL_MAJOR_PIXELS = 64


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
    if group_width(call) is None:     # depthwise and narrow groups keep NCHW (module docstring)
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
    out_shape = out_ty.static_shape()
    if conv_tile(group_width(call), out_shape[2], out_shape[3], ctx) is None:
        return None
    return layout.PackPlan(CONV_BLOCKED, shape, conv_block(call, ctx), None)


# A grouped conv is computed channel-blocked when its groups are a multiple of this many
# output channels wide: a block of output channels (8 at the least) must lie in one group,
# whose input channels it then reads.
GROUP_MULTIPLE = 8


def conv_groups(call: Call) -> int:
    """The ``groups`` attribute of a conv call (1 when absent; a 1-tuple taken as its value)."""
    groups = dict(call.attrs).get("groups", 1)
    return groups[0] if isinstance(groups, (list, tuple)) else groups


def group_width(call: Call) -> Optional[int]:
    """The output channels per group of the conv2d ``call`` (all of them when groups = 1), or
    None for a grouped conv whose groups are not a multiple of ``GROUP_MULTIPLE`` channels
    wide (depthwise convs among them).

    RegNet's 3x3 convs in groups of 8 channels (``[208, 8, 3, 3]``, groups 26) are blocked in
    8-channel blocks, one group each, vectorized over its output channels; in NCHW they were
    vectorized along rows of 7 or 14 pixels (RegNetY-400MF: 16-29 GFLOP/s there)."""
    groups = conv_groups(call)
    width = call.args[1].ty.static_shape()[0] // groups
    return None if groups != 1 and width % GROUP_MULTIPLE else width


# A block of three 8-channel groups, for the channel counts of MobileNet-style models that 16
# does not divide (24, 72, 120): 3 full vectors on AVX2; 1.5 on AVX-512, where the only other
# choice, 8-channel blocks, fills half of each vector. Measured (one thread, alternating rounds,
# on a Xeon with AVX-512, also compiled for AVX2): MobileNetV2's 144 -> 24 and 96 -> 24 1x1
# convs at 56 x 56 ran 1.2-1.5x faster in 24-channel blocks (tile 8 x 24 on AVX-512, 4 x 24 on
# AVX2) than in 8-channel ones; 48 channels ran the same in 16- or 24-channel blocks, so counts
# that 16 divides keep the power-of-two blocks.
TRIPLE_BLOCK = 24
# Five 8-channel groups, where 8 channels are half a vector (AVX-512): 2.5 vectors, for the
# counts that neither 16 nor 24 divides but 40 does (40, 200, 440: MnasNet's, EfficientNet's
# and MobileNetV3's 28 x 28 stages, RegNetY-400MF's last), which otherwise fill half of every
# vector. Not where 24 divides (120): the depthwise convs between such convs run in the same
# blocks, and a 5 x 5 one over 120 channels took 84-88 us in 40-channel blocks against 77 in
# 24-channel ones (its unrolled taps keep more input vectors live than registers hold).
QUINTUPLE_BLOCK = 40
# Blocks that are not a whole number of vectors on every target, each only where 16 and the
# narrower ones of them do not divide the channels (a count that 16 divides fills whole
# vectors in 16- or 32-channel blocks).
_ODD_BLOCKS = (TRIPLE_BLOCK, QUINTUPLE_BLOCK)


def block_lanes(ctx: PassContext) -> Tuple[int, ...]:
    """The channel blocks ``bn`` a blocked conv may use, widest first: two vectors, one
    vector, ``TRIPLE_BLOCK`` and 8 channels (so that any multiple of 8 blocks), and
    ``QUINTUPLE_BLOCK`` where 8 channels are less than a vector: (24, 16, 8) on AVX2,
    (40, 32, 24, 16, 8) on AVX-512, (24, 8, 4) on NEON. ``channel_blocks`` says which of them
    a given channel count may use."""
    lanes = ctx.simd_lanes
    blocks = {2 * lanes, lanes, TRIPLE_BLOCK, 8}
    if lanes > 8:
        blocks.add(QUINTUPLE_BLOCK)
    return tuple(sorted(blocks, reverse=True))


def channel_blocks(channels: int, ctx: PassContext) -> Tuple[int, ...]:
    """The blocks of ``block_lanes`` that ``channels`` output channels may be computed in,
    widest first: those that divide it, ``TRIPLE_BLOCK`` only where 16 does not,
    ``QUINTUPLE_BLOCK`` only where neither 16 nor 24 does.

    >>> channel_blocks(200, PassContext(target="llvm -mcpu=skylake-avx512").resolved())
    (40, 8)
    """
    def allowed(b):
        narrower = [16] + [o for o in _ODD_BLOCKS if o < b]
        return b not in _ODD_BLOCKS or all(channels % n for n in narrower)
    return tuple(b for b in block_lanes(ctx) if channels % b == 0 and allowed(b))


def flat_pixels(call: Call, ctx: PassContext) -> bool:
    """Whether the blocked ``call`` is computed over flat pixels (its tiles run along the
    image's ``H * W`` pixels, ``tile_plan``), rather than along each row."""
    out, width = call.ty.static_shape(), group_width(call)
    if width is None or conv_tile(width, out[2], out[3], ctx) is None:
        return False
    return tile_plan(conv_block(call, ctx), out[2], out[3], ctx)[1]


def pixel_major(call: Call) -> bool:
    """Whether the blocked ``call`` reads its input through an NHWC copy
    (``ops/conv_nchwc.py``): a 1x1 unit-stride conv without padding on a small image (at most
    ``PIXEL_MAJOR_PIXELS`` output pixels). Each tile's reduction then reads its pixels'
    channels contiguously instead of one value per channel plane, once per channel block.
    Measured (alternating rounds, one thread, against the NCHW read): MobileNetV2's 7 x 7
    1x1 convs run 1.3-1.45x faster (160->960, 960->160, 960->320, 320->1280); its 14 x 14 ones
    0.87-1.0x (the copy costs more than it saves there), 3x3 512 @7 0.9x."""
    w = call.args[1].ty.static_shape()
    out = call.ty.static_shape()
    if w is None or out is None or tuple(w[2:]) != (1, 1) or not _unit_unpadded(call):
        return False
    return out[2] * out[3] <= PIXEL_MAJOR_PIXELS


def pixel_tile(width: Optional[int], bn: int, ctx: PassContext, budget: Optional[int] = None,
               overhead: Optional[int] = None) -> int:
    """Pixels XT of the register tile along a run of ``width`` output pixels (a row, or an
    image's ``H * W``) for a block of ``bn`` channels: the XT (at most ``width``, with
    ``XT * bn / simd_lanes`` vector accumulators within ``budget``, by default
    ``ctx.tile_accumulators``) with the best ``tile_score``; on a tie the larger (more FMAs in
    flight). XT need not divide the run: its last tile is guarded (``split``) and lowering
    peels it off (``partition_loops``). 1 for a symbolic width."""
    if width is None:
        return 1
    budget = ctx.tile_accumulators if budget is None else budget
    most = max(1, min(width, MAX_PIXELS, budget // layout.vectors(bn, ctx)))
    return max(range(1, most + 1),
               key=lambda xt: (tile_score(width, bn, xt, ctx, overhead), xt))


# A reduction step of the tile costs at least ``ctx.min_accumulators`` accumulators' worth of
# FMA issue slots (FMA pipes x latency: 2 x 4 on current x86 and AArch64 cores, so fewer than 8
# accumulators leave pipes idle), plus STEP_OVERHEAD slots for the loop and address updates.
STEP_OVERHEAD = layout.STEP_OVERHEAD
# The most pixels a tile unrolls: each is one broadcast and one input pointer per step.
MAX_PIXELS = 16
# A tile over the flat pixels of an image may cross a row, so its pixels' input addresses are
# not one base plus constant offsets: each pixel keeps its own pointer, and with a 6 x 16
# tile LLVM spills one. Measured (alternating rounds, one thread): 6 x 16 over flat pixels is
# 3-5% slower than per row at widths 28-112 (where rows waste 1-2 of 10 tiles), 10% faster at
# 14 and 20% faster at 7; one extra slot per step is the overhead that matches both.
FLAT_OVERHEAD = 1


def tile_score(width: int, bn: int, xt: int, ctx: PassContext,
               overhead: Optional[int] = None) -> float:
    """Useful multiply-adds per issue slot of a run of ``width`` pixels computed in tiles of
    ``xt`` pixels x ``bn`` channels (higher is better). A run takes ``ceil(width / xt)``
    tiles, the last one guarded, and a tile step costs ``max(acc, min_accumulators) +
    overhead`` slots (``acc = xt * ceil(bn / simd_lanes)`` vector accumulators; ``overhead``
    defaults to ``STEP_OVERHEAD``), whether or not all its pixels are real: so a tile that
    leaves a short last tile scores lower. The useful work counts ``bn / simd_lanes`` vectors
    per pixel: a block that fills its vectors partly (8 or 24 channels on AVX-512) scores
    below one that fills them."""
    overhead = STEP_OVERHEAD if overhead is None else overhead
    vecs = layout.vectors(bn, ctx)
    tiles = -(-width // xt)
    return width * (bn / ctx.simd_lanes) / (tiles * (max(xt * vecs, ctx.min_accumulators)
                                                     + overhead))


def tile_plan(bn: int, height: int, width: int, ctx: PassContext) -> Tuple[int, bool, float]:
    """(XT, flat, score) for a block of ``bn`` channels over an ``height`` x ``width`` output:
    tiles along each row, or (``flat``) along the image's ``H * W`` pixels as one run, whose
    tiles may cross rows and cost ``FLAT_OVERHEAD`` more per step. Flat wins where rows are
    short: 7 wide gets 5 x 16 over 49 pixels (10 tiles) instead of 4 + 3 per row (14), 14
    wide 6 x 16 over 196 (33) instead of 5 + 5 + 4 (42); 28 and wider stay per row."""
    xt = pixel_tile(width, bn, ctx)
    if height == 1:
        # (one row is one flat run, its tiles never crossing a row; the flat form's schedule
        # can split the run among the cores, which a chain of 1-D convs needs: each core then
        # reads the samples it wrote)
        return xt, True, tile_score(width, bn, xt, ctx)
    best = (xt, False, tile_score(width, bn, xt, ctx))
    if height > 1:
        over = STEP_OVERHEAD + FLAT_OVERHEAD
        xt = pixel_tile(height * width, bn, ctx, overhead=over)
        score = tile_score(height * width, bn, xt, ctx, over)
        if score > best[2]:
            best = (xt, True, score)
    return best


def conv_tile(channels: int, height: int, width: int,
              ctx: PassContext) -> Optional[Tuple[int, int, bool]]:
    """(bn, XT, flat): the channel block and the register tile (``tile_plan``) for an
    ``height`` x ``width`` output, the block with the best score within the accumulator
    budget; on a tie the one with more accumulators, then the wider block (fewer loads per
    FMA). None when no block divides ``channels``."""
    best = None
    for bn in channel_blocks(channels, ctx):
        xt, flat, score = tile_plan(bn, height, width, ctx)
        vecs = layout.vectors(bn, ctx)
        key = (score, xt * vecs, bn)
        if best is None or key > best[0]:
            best = (key, bn, xt, flat)
    return None if best is None else best[1:]


def conv_block(call: Call, ctx: PassContext) -> int:
    """The output-channel block of the blocked ``conv2d`` ``call``: with ``ctx.tuning_db``,
    the layer's best record (the tuner's ``conv_block`` decision, ``tune/layers.py``), else
    ``conv_tile``'s pick (blocks within a group of a grouped conv, ``group_width``)."""
    o = group_width(call)
    _, _, h, w = call.ty.static_shape()
    if ctx.tuning_db:
        from ..tune.layers import BLOCK, recorded_choice
        block = recorded_choice(call, ctx, BLOCK, list(channel_blocks(o, ctx)))
        if block is not None:
            return block
    return conv_tile(o, h, w, ctx)[0]


def nchwc_compute(call: Call, args, ctx: PassContext):
    """The te program of a ``conv2d_nchwc`` call (``ops/nchwc.py``) on the te tensors ``args``:
    tiles over flat pixels or along rows as ``tile_plan`` picks for its block (the weight's)
    and output size; an NCHW input of a small 1x1 conv read through an NHWC copy
    (``pixel_major``)."""
    from ..ops.nchwc import conv2d_nchwc_compute
    w = call.args[1].ty.static_shape()
    out = call.ty.static_shape()
    flat = tile_plan(w[4], out[2], out[3], ctx)[1]
    x = call.args[0].ty.static_shape()
    nhwc = len(x) == 4 and tuple(w[1:3]) == (1, 1) and _unit_unpadded(call) and \
        out[2] * out[3] <= PIXEL_MAJOR_PIXELS
    return conv2d_nchwc_compute(args, dict(call.attrs), flat=flat, pixel_major=nhwc)


def _unit_unpadded(call: Call) -> bool:
    attrs = dict(call.attrs)
    strides = attrs.get("strides", (1, 1))
    strides = tuple(strides) if isinstance(strides, (list, tuple)) else (strides, strides)
    padding = attrs.get("padding", (0,))
    padding = tuple(padding) if isinstance(padding, (list, tuple)) else (padding,)
    return all(s == 1 for s in strides) and all(p == 0 for p in padding)
