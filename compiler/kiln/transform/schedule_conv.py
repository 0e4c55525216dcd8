"""The register-tile schedule of a channel-blocked conv2d (``ops/conv_nchwc.py``).

The reduction block ``conv2d_nchwc[n, ob, y, x, oi]``, or ``[n, ob, p, oi]`` over the flat
output pixels ``p = y * W + x`` of an image (``oi`` the ``bn`` output channels of a block,
``bn`` = 8 or 16; ``conv_blocked.tile_plan`` picks the form) gets:

- a register tile of ``XT`` output pixels x ``bn`` channels, the pixels along an output row,
  or consecutive pixels of the flat run that may cross rows, so that only the image's last
  tile is partial (``tile 5x16 flat``): ``oi``
  vectorized (one or two AVX2 vectors), the ``XT`` pixels unrolled, so each step of the
  reduction loads the ``bn`` weights of one input tap once (contiguous, pre-packed
  OHWI[bn]o) and broadcasts one input value per pixel: ``XT * bn / 8`` FMAs per
  ``XT + bn / 8`` loads, whatever the stride;
- the reduction outside the tile as (input channel blocks, kernel rows, kernel columns,
  ``REDUCE_CHANNELS`` input channels), the tile accumulated in a local buffer
  (``cache_write``) that LLVM keeps in registers;
- the NCHW epilogue (bias, batch norm, relu/clip, a residual add) folded into the tile's
  write-back: the output block is first re-iterated over ``(n, ob, y, x, oi)``
  (``block_iter.split_block_iter``), or ``(n, ob, p, oi)`` (then ``fuse_block_iter``), so
  that it reads the tile one to one
  (``reverse_compute_inline``); the write-back stores ``bn`` channels of one pixel (a
  scatter across channel planes, once per tile);
- padding read in place (the decision ``pad_inline``, the default for tiles along rows): a tap
  outside the input reads zero through a select, and lowering (``select_partition``) splits
  the loop over a row's tiles so that the tiles away from its ends read every tap without
  that test, and the row's test, the same for a whole row of taps, is a branch. No copy:
  MobileNetV2's 3 -> 32 stride-2 stem 244 -> 196-200 us at one thread, the same conv over an
  input padded beforehand 194-196; ResNet's 7 x 7 stem 1618 -> 1534-1564, a 128-channel
  stride-2 3x3 conv at 28 x 28 392 -> 362-365. Otherwise (flat tiles, whose pixels' rows and
  columns are not affine in the tile loop, or when the tuner says so) the padding is a pass
  of its own; or, by rows with a padded copy that would not fit in half of L2 (the decision
  ``pad_rows``), computed per output row, right before its tiles, into a buffer of the rows
  it reads (compacted by lowering: 3 x W x ``bn`` for a 3x3 kernel), so that the copy stays
  in cache (lowering copies each row's interior as plain vectors, ``select_partition``);
- ``(n, ob, y)`` fused and parallel: one block of output channels keeps its weights in cache
  while all its rows stream past; or ``(n, y, ob)`` when re-reading the weights per row costs
  less than re-reading the input per channel block (1x1 convs on large images). Flat tiles:
  ``(n, ob)`` fused and parallel, or the tile loop when there are few channel blocks or it goes
  outermost (it stays a loop of its own, see below);
- with channel blocks outer, each output row (flat: each pixel tile) also fetches a part of
  the next channel block's weight into L2; a 1x1 conv with rows outer (not flat) fetches the
  next input row instead (``prefetch.prefetch_next_block``; the decision
  ``prefetch``): inside a model that weight is in memory, and without it the block's first
  row waits on it (ResNet-18: 11% faster at one thread).

``bn`` and ``XT`` are chosen together (``conv_blocked.conv_tile``). ``XT`` need not divide the
row or the image: the split guards the last tile, and lowering (``partition_loops``) peels that
tile off so that the other tiles run without guards.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

from ..ir import Buffer, BufferLoad, IRModule, PrimFunc, Var, collect
from ..schedule import Schedule, ScheduleError
from ..schedule.decisions import Decisions
from ..ops.conv_nchwc import COLUMNS
from .block_iter import BlockIterError, fuse_block_iter, split_block_iter
from .conv_blocked import ANNOTATION, FLAT_OVERHEAD, STEP_OVERHEAD, pixel_tile
from .infra import PassContext
from .layout import vectors
from .prefetch import LINE_ELEMENTS, prefetch_next_block
from .schedule_tile import REMOTE_BYTE_COST
from .schedule_rules import (block_infos, consumers, find, inline_intermediates, loop_rvs,
                             schedule_spatial, static_extent, tile_write_back)

# Input channels per step of the reduction's outer loop: (rc_0, ry, rx, rc_1) with rc_1 of
# this many channels keeps the input rows of one step in L1 (rc innermost over all channels
# re-reads each row from L2 per tap) and stops LLVM from unrolling the kernel loops around a
# shared broadcast (rc outermost, (ry, rx) unrolled: a 6 x 16 tile spills, 3x slower).
REDUCE_CHANNELS = 8
# Input channels per reduction step when the input is channel-blocked and the kernel larger
# than 1x1 (a divisor of its block); a 1x1 conv: POINTWISE_STEP_CHANNELS below. Measured (one
# thread, alternating rounds): 3x3 convs of ResNet-18 within 4% either way on AVX2 and AVX-512.
# (A 1x1 conv's step of 8 channels, not unrolled, was slower than the whole block: MobileNetV2's
# 960 -> 320 at 7 x 7 on AVX2, block 16, 0.46 ms against 0.37.)
BLOCKED_REDUCE_CHANNELS = 8
# A 1x1 conv over a channel-blocked input reduces POINTWISE_STEP_CHANNELS channels of a pixel per
# step, unrolled: four copies of the tile's step (one broadcast per pixel, the block's weight
# vectors, the multiply-adds) per trip of the loop, which leaves fewer loop and address updates
# to share the issue slots with the tile. ResNet-50's and ResNeXt-50's 1x1 convs at 7x7-56x56
# (input blocks of 16 and 32 channels) ran 2-10% faster each at one thread (AVX-512; AVX2
# within noise to 3% faster), the models 4-5% (bench/RESULTS.md, "Session 20"). Only while the
# block holds POINTWISE_MIN_STEPS such steps: with 2 (8-channel blocks) the unrolled step of a
# 12-pixel flat tile spilled its accumulators (ResNeXt-50's 28 x 28 256 -> 512 conv 2.2x
# slower). 3x3 convs gained nothing from it (ResNet-18's: 1-3% slower).
POINTWISE_STEP_CHANNELS = 4
POINTWISE_MIN_STEPS = 4
# Images x channel blocks enough to share among the threads; with fewer, the pixel tiles of
# each channel block are run in parallel instead.
PARALLEL_TASKS = 4


def find_blocked_conv(func: PrimFunc) -> Optional[str]:
    """The name of the channel-blocked conv reduction block of ``func``, or None."""
    for b in block_infos(func):
        if b.annotated(ANNOTATION) and b.is_reduction:
            return b.name
    return None


def schedule_blocked_conv(func: PrimFunc, ctx: PassContext,
                          decide: Optional[Decisions] = None) -> Tuple[PrimFunc, str]:
    """Apply the module docstring's schedule; returns (scheduled func, description). Its
    choices are ``decide``'s: ``pad_inline``, ``xt`` (pixels of the tile), ``rows_outer``,
    ``ci`` (input channels per reduction step), ``parallel`` and, by rows, ``pad_rows``."""
    decide = decide if decide is not None else Decisions()
    conv = find_blocked_conv(func)
    if conv is None:
        raise ScheduleError("no channel-blocked conv2d block", func)
    sch = Schedule(IRModule({"main": func}), "main")
    # Inline the NCHW view and the elementwise epilogue into the output block; the padding
    # for now stays (``pad_inline`` below).
    inline_intermediates(sch, lambda b: b.name.startswith("conv2d_pad"))
    epilogue = _regroup_epilogue(sch.func, conv)
    if epilogue is not None:
        sch = Schedule(IRModule({"main": epilogue}), "main")
    info = find(sch.func, conv)
    inline_pad = False
    loops = loop_rvs(info)
    extents = [static_extent(f) for f in info.loops]
    n_sp = sum(1 for iv in info.block.iter_vars if iv.kind == "spatial")
    bn = extents[n_sp - 1]
    flat = n_sp == 4
    if flat:
        # One run of H * W pixels: only the image's last tile is partial.
        (n, ob, p, oi), red = loops[:n_sp], loops[n_sp:]
        xt = _choose_pixels(decide, extents[2], bn, ctx,
                            pixel_tile(extents[2], bn, ctx, overhead=STEP_OVERHEAD + FLAT_OVERHEAD))
        rows_outer = decide.choose("rows_outer", [False, True],
                                   default=_rows_outer(info, extents, _out_rows(sch.func, info),
                                                       extents[2], ctx))
        po, pi = sch.split(p, [None, xt]) if xt < extents[2] else (None, p)
        par = [n, ob]
        if po is not None:
            par = [n, po, ob] if rows_outer else [n, ob, po]
    else:
        # Tiles along each row (the last one of a row partial): the tile's pixels then share
        # one input row, so their addresses are one base plus constant offsets.
        (n, ob, y, x, oi), red = loops[:n_sp], loops[n_sp:]
        xt = _choose_pixels(decide, extents[3], bn, ctx, pixel_tile(extents[3], bn, ctx))
        rows_outer = decide.choose("rows_outer", [False, True],
                                   default=_rows_outer(info, extents, extents[2],
                                                       extents[2] * extents[3], ctx))
        po, pi = sch.split(x, [None, xt]) if xt < extents[3] else (None, x)
        par = [n, y, ob] if rows_outer else [n, ob, y]
        pad = _padding_block(sch.func)
        if pad is not None and decide.choose(
                "pad_inline", [False, True], default=_pad_inline_default(info, xt, extents[3])):
            # The padding read in place: a tap outside the input reads zero through a select,
            # and lowering (``select_partition``) splits the tiles whose taps all fall inside
            # the input off the row's first and last ones, without that test.
            sch.compute_inline(pad.rv)
            inline_pad = True
    outer = par + ([po] if po is not None and po not in par else [])
    if len(red) == 3:
        ry, rx, rc = red
        c_ext = extents[n_sp + 2]
        divisors = [d for d in range(1, min(4 * REDUCE_CHANNELS, c_ext) + 1) if c_ext % d == 0]
        ci = max(d for d in divisors if d <= REDUCE_CHANNELS)
        ci = decide.choose("ci", divisors, default=ci)
        if 1 < ci < c_ext:
            rco, rci = sch.split(rc, [None, ci])
            red = [rco, ry, rx, rci]
    elif len(red) == 4:
        # A channel-blocked input: (ry, rx, rco, rci), rci the ``bi`` channels of a pixel.
        ry, rx, rco, rci = red
        bi = extents[n_sp + 3]
        divisors = [d for d in range(1, bi + 1) if bi % d == 0]
        taps = (extents[n_sp] or 1) * (extents[n_sp + 1] or 1)
        if taps == 1:
            step = POINTWISE_STEP_CHANNELS
            default = step if bi % step == 0 and bi // step >= POINTWISE_MIN_STEPS else bi
        else:
            default = max(d for d in divisors if d <= BLOCKED_REDUCE_CHANNELS)
        ci = decide.choose("ci", divisors, default=default)
        red = [rco, ry, rx, rci]
        if ci < bi:
            rcio, rcii = sch.split(rci, [None, ci])
            red = [rco, rcio, ry, rx, rcii]
            if taps == 1 and ci <= POINTWISE_STEP_CHANNELS:
                sch.unroll(rcii)
    sch.reorder(*(outer + red + [pi, oi]))

    # The epilogue joins the write-back when it reads the tile one to one (it does once
    # regrouped); otherwise it stays a separate elementwise pass over the blocked result.
    write_back, fused = tile_write_back(sch, info)
    sch.reverse_compute_at(write_back, outer[-1])
    init = sch.decompose_reduction(info.rv, red[0])
    if xt > 1:
        sch.unroll(pi)
    sch.vectorize(oi)
    init_loops = sch.get_loops(init)
    sch.vectorize(init_loops[-1])
    if xt > 1:
        sch.unroll(init_loops[-2])
    wb_loops = sch.get_loops(write_back)
    sch.vectorize(wb_loops[-1])
    if xt > 1:
        sch.unroll(wb_loops[-2])

    parts = [f"tile {xt}x{bn}" + (" flat" if flat else ""),
             "rows outer" if rows_outer else "channel blocks outer", f"epilogue {fused}"]
    if inline_pad:
        parts.append("padding in place")
    if any(b.name.startswith("conv2d_pad_nhwc") for b in block_infos(sch.func)):
        parts.append("input nhwc")
    work = math.prod(e for e in extents if e is not None)
    if decide.choose("parallel", [False, True], default=work >= ctx.parallel_min_elements * 16):
        # The tile loop stays a loop of its own (not fused with the others): lowering peels
        # its guarded last tile off only there (``partition_loops`` needs the guard linear in
        # the loop variable), and the tile's accumulators need a constant pixel count.
        blocks_parallel = True      # the parallel loop walks the channel blocks
        pad = _padding_block(sch.func) if not flat and rows_outer else None
        if pad is not None and decide.choose(
                "pad_rows", [False, True], default=_pad_rows_default(pad, extents[2], ctx)):
            # Each output row pads the input rows it reads, right before its tiles: the rows
            # stay in L1/L2 instead of a padded copy of the whole input going through memory.
            row = sch.fuse(n, y)
            sch.parallel(row)
            sch.compute_at(pad.rv, row)
            pad_loops = sch.get_loops(find(sch.func, pad.name).rv)
            sch.vectorize(pad_loops[-1])
            parts.append("pad per row")
        elif not flat:
            sch.parallel(sch.fuse(*par))
        elif po is None or (not rows_outer and extents[0] * extents[1] >= PARALLEL_TASKS):
            sch.parallel(sch.fuse(n, ob))
        else:
            sch.parallel(po)
            blocks_parallel = False
        parts.append("parallel")
        fetched = None
        if blocks_parallel and not rows_outer \
                and decide.choose("prefetch", [False, True], default=True):
            # Each row (flat: each pixel tile) fetches part of the next channel block's weight
            # (``prefetch.py``).
            fetched = prefetch_next_block(sch.func, conv, _operands(info)[1],
                                          1 if flat else extents[2])
            what = "prefetch next block"
        elif rows_outer and not flat and _operand_bytes(info)[2] \
                and decide.choose("prefetch", [False, True], default=True):
            # A 1 x 1 conv with rows outer: each channel block of a row fetches part of the
            # input row after it, every input channel block's run of it.
            fetched = prefetch_next_block(sch.func, conv, _operands(info)[0], extents[1])
            what = "prefetch next row"
        if fetched is not None:
            sch = Schedule(IRModule({"main": fetched}), "main")
            parts.append(what)
    # Blocks left at the root: padding / packing, an epilogue that could not be folded.
    for b in block_infos(sch.func):
        if not b.is_reduction and b.loops and all(f.kind == "serial" for f in b.loops) \
                and _at_root(sch.func, b):
            schedule_spatial(sch, b.name, ctx)
    return sch.func, "conv nchwc: " + ", ".join(parts)


def _is_padding(b) -> bool:
    """Whether block ``b`` is the conv's zero padding (``conv2d_pad``, not an NHWC copy)."""
    return b.name.startswith("conv2d_pad") and not b.name.startswith("conv2d_pad_nhwc")


def _padding_block(func: PrimFunc):
    """The conv's one padding block, or None."""
    pads = [b for b in block_infos(func) if _is_padding(b)]
    return pads[0] if len(pads) == 1 else None


def _pad_inline_default(info, xt: int, width: int) -> bool:
    """Whether a conv by rows reads its padding in place (``pad_inline``) by default: when
    at least half of a row's full tiles (``xt`` of its ``width`` output pixels each) read no
    padding column, as ``select_partition`` needs to split them off the others (the conv's
    ``COLUMNS`` annotation gives where the padding lies). Otherwise every tap of every tile
    would test its column: so read, an 8 x 8 image's 3x3 conv (one tile a row) took 1.85x the
    time it took from a padded copy, and a 5x5 one on 35 x 35 (three tiles, one inside) 1.11x."""
    geometry = dict(info.block.annotations).get(COLUMNS)
    if geometry is None:
        return False
    in_width, before, stride, dilation, kernel = (int(v) for v in geometry.split())
    tiles = width // xt
    # Tile t reads input columns t*xt*s - P .. (t*xt + xt - 1)*s + (K - 1)*d - P.
    first = -(-before // (xt * stride))
    last = (in_width + before - (kernel - 1) * dilation - (xt - 1) * stride - 1) // (xt * stride)
    inside = max(0, min(tiles - 1, last) - first + 1)
    return inside >= 1 and 2 * inside >= tiles


def _pad_rows_default(pad, out_rows: int, ctx: PassContext) -> bool:
    """Whether a conv by rows pads its input rows per output row (``pad_rows``) rather than in
    a pass of its own (``pad``, its padding block): when the padded copy would not fit in half
    of L2, and there are rows for every core."""
    if out_rows < 4 * ctx.cores:
        return False
    buf = pad.written()[0]
    return math.prod(int(d.value) for d in buf.shape) * 4 > ctx.machine.l2_bytes // 2


def _choose_pixels(decide: Decisions, run: int, bn: int, ctx: PassContext, default: int) -> int:
    """The ``xt`` decision: pixels of the tile along a run of ``run`` pixels, within the
    accumulator budget."""
    most = max(1, min(run, ctx.tile_accumulators // vectors(bn, ctx)))
    return decide.choose("xt", list(range(1, most + 1)) + [default], default=default)


def _out_rows(func: PrimFunc, info) -> int:
    """The output rows H of a flat blocked conv, read off the NCHW view ``[N, O, H, W]`` that
    its epilogue writes (1 when that is not found)."""
    for e in consumers(func, info.written()[0]):
        for buf in e.written():
            if len(buf.shape) in (4, 5):      # NCHW, or NCHW[bn]c
                return int(buf.shape[2].value)
    return 1


def _operands(info) -> Tuple[Optional[Buffer], Optional[Buffer]]:
    """(input, weight) buffers of a blocked conv block: the input is the operand indexed by the
    output row."""
    y_var = info.block.iter_vars[2].var
    data = weight = None
    for ld in collect(info.store.value, BufferLoad):
        if ld.buffer in info.written():
            continue
        if any(y_var in collect(i, Var) for i in ld.indices):
            data = ld.buffer
        else:
            weight = ld.buffer
    return data, weight


def _grouped(info) -> bool:
    """Whether a blocked conv block is a grouped conv's: the input channel it reads depends on
    the block of output channels (``ops/conv_nchwc.py``)."""
    ob_var = info.block.iter_vars[1].var
    data = _operands(info)[0]
    return any(ld.buffer is data and any(ob_var in collect(i, Var) for i in ld.indices)
               for ld in collect(info.store.value, BufferLoad))


def _operand_bytes(info) -> Tuple[int, int, bool]:
    """(input bytes, weight bytes, whether the kernel is 1 x 1) of a blocked conv block."""
    data, weight = _operands(info)
    in_bytes = 4 * math.prod(int(d.value) for d in data.shape) if data is not None else 0
    w_bytes, pointwise = 0, False
    if weight is not None:
        shape = [int(d.value) for d in weight.shape]
        w_bytes = 4 * math.prod(shape)
        pointwise = len(shape) == 5 and shape[1] == shape[2] == 1   # (O/b, KH, KW, I, b)
    return in_bytes, w_bytes, pointwise


def _input_bytes_read(data: Buffer, in_bytes: int, rows: int, pixels: int) -> int:
    """The bytes of a 1 x 1 conv's input ``data`` (``in_bytes`` in all) that one pass over its
    output (``rows`` rows, ``pixels`` pixels) reads: with stride ``s``, every ``s``-th row,
    and of a channel-blocked input whose pixel fills a cache line or more (blocks of 16
    channels or more), every ``s``-th pixel of those rows. All of it when ``rows`` is not a
    row count (an output row longer than the input's)."""
    shape = [int(d.value) for d in data.shape]
    height, width = shape[2], shape[3]
    if rows > height or pixels // rows > width:
        return in_bytes
    read = in_bytes * rows // height
    if len(shape) == 5 and shape[4] >= LINE_ELEMENTS:
        read = read * (pixels // rows) // width
    return read


def _rows_outer(info, extents, rows: int, pixels: int, ctx: PassContext) -> bool:
    """Whether the pixel tiles go outside the channel blocks: each row of the input is then
    read once while all weights are re-read per output row (of ``rows``), instead of each
    channel block's weights read once while the whole input is re-read per block. Picks the
    smaller re-read traffic (a grouped conv's blocks re-read nothing: channel blocks outer);
    and on more than one core, a 1 x 1 conv whose weights fit in 3/8 of L2 goes by rows like
    a matmul (``schedule_tile.split_rows``): each core then reads only its rows of the input,
    which the kernel before wrote into its cache (MobileNetV2's pointwise convs: 2-3% faster
    at 2 threads, 1 thread unchanged). The weights must stay in L2 beside the rows of input
    and output that stream past them: ResNet-50's 256 <-> 1024 convs at 14 x 14 (1 MiB of
    weight, half of L2) ran 4-5% faster by channel blocks at two threads; MobileNetV2's
    160 <-> 960 (600 KB) 1-3% slower by channel blocks, so they keep rows (session 19).
    The input counts as the bytes the conv reads (``_input_bytes_read``): ResNet-50's stride-2
    512 -> 1024 conv at 28 x 28 counted all 1.6 MB of its input and went by rows, re-reading
    its 2 MiB of weight per output row: 1.87 ms, by channel blocks 1.22 (one thread; 2.56 ->
    2.01 compiled for AVX2). Re-reads from L2 cost little next to those from further out: when
    the weights fit in 3/8 of L2 and the input does not, the rows go outside whatever the
    counts say (ResNet-18's stride-2 64 -> 128 3x3 conv at 56 x 56: 5-8% faster at one
    thread, 13-18% at two; ResNet-50's 128-channel one 11-20%)."""
    _, blocks = extents[:2]
    if _grouped(info):
        # Each channel block reads only its group's input channels: nothing is re-read.
        return False
    in_bytes, w_bytes, pointwise = _operand_bytes(info)
    data = _operands(info)[0]
    if pointwise and data is not None:
        in_bytes = _input_bytes_read(data, in_bytes, rows, pixels)
    if rows * w_bytes < blocks * in_bytes:
        return True
    l2_share = 3 * ctx.machine.l2_bytes // 8
    if w_bytes <= l2_share < in_bytes:
        # The weights stay in L2 for every row while the input streams past once; by channel
        # blocks the input, too large for L2, would come from further out for every block.
        return True
    return ctx.cores > 1 and pointwise and w_bytes <= l2_share \
        and REMOTE_BYTE_COST * in_bytes >= w_bytes


def _regroup_epilogue(func: PrimFunc, conv: str) -> Optional[PrimFunc]:
    """``func`` with the block reading the blocked conv result re-iterated over the blocked
    channels and the flat pixels, ``(n, ob, p, oi)`` (``split_block_iter``, then
    ``fuse_block_iter`` of ``(y, x)``), or None when it is not in that form."""
    out = find(func, conv).written()[0]
    readers = consumers(func, out)
    if len(readers) != 1:
        return None
    e = readers[0]
    bn = int(out.shape[-1].value)
    flat = len(out.shape) == 4
    try:
        if len(e.written()[0].shape) == 5:     # a blocked output: already (n, ob, y, x, oi)
            return fuse_block_iter(func, e.name, 2, 2) if flat else None
        func = split_block_iter(func, e.name, 1, bn)
        return fuse_block_iter(func, e.name, 2, 2) if flat else func
    except BlockIterError:
        return None


def _at_root(func: PrimFunc, b) -> bool:
    body = func.body.block.body
    tops = body.seq if hasattr(body, "seq") else (body,)
    return bool(b.loops) and any(b.loops[0] is t for t in tops)
