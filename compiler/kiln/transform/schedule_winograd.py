"""Schedules of the Winograd transform kernels (``ops/winograd.py``): the rules in ``RULES``,
which ``default_schedule`` dispatches to by the kernel's anchor.

The transforms are small constant matrices applied per tile; written in te as one row's sum
chosen by a Select on the row index (``ops/winograd._by_row``), they become straight-line
code once that index is unrolled: LLVM folds each Select to one row and drops the zero terms.
Both kernels run vectorized over channels (contiguous in ``V`` and ``M``):

- ``winograd_input`` (kernel anchor ``winograd_input``): per tile ``t`` and chunk of input
  channels, for each row ``a`` of ``B^T`` (unrolled): ``winograd_rows[a, 0..alpha)`` computed
  right there (``compute_at``, a few vectors), then ``winograd_input[a, 0..alpha)``; channels
  vectorized, tiles (x channel chunks) parallel. The NHWC padded copy ``winograd_pad`` is its
  own pass over the input, vectorized along the input rows (contiguous loads; the padding
  becomes plain loads in the interior, ``lower/select_partition.py``) and stored per channel;
- ``winograd_output`` (anchor ``winograd_output``, with the conv's fused epilogue): the NCHW
  output loops split into (tile row, tile column, channel chunk, i, j, channel lanes); per
  tile and chunk ``winograd_out_rows`` (``A^T M``, ``m x alpha`` vectors) computed at the
  chunk, then the ``m x m`` outputs (i, j unrolled) with the epilogue (bias, batch norm,
  relu, residual add) inlined into the same store (``reverse_compute_inline``). The store
  writes one pixel of each channel in the chunk (stride ``OH*OW``), as the channel-blocked
  direct conv's write-back does.

The contraction ``winograd_gemm`` is left to ``default_schedule`` (the register-tile rule).
The three stages fused into one kernel (``winograd_conv``, ``transform/fuse_winograd.py``) get
``_schedule_conv``: the same transform schedules per block of tiles, with the contraction of
the block as a register tile of its own (decisions ``tiles``, ``mr``, ``vectors``, ``in_chunk``).
Each kernel's ``kiln.schedule`` says what it got (e.g. ``"winograd input: channels 16,
rows at tile, parallel"``). The rule's choices are
named decisions (``kiln.schedule.decisions``), recorded in ``kiln.decisions``:
``chunk`` (channels per vectorized step: a divisor of the channels that is a multiple of 4, or
the whole axis when short; default one machine vector) and ``parallel`` (whether the tile loop
runs on the thread pool; default when the kernel is big enough).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..ir import IRModule, PrimFunc
from ..schedule import LoopRV, Schedule, ScheduleError
from ..schedule.decisions import Decisions
from .infra import PassContext
from .schedule_rules import consumers, find, inline_intermediates, loop_rvs, params_of, static_extent

INPUT, OUTPUT = "winograd_input", "winograd_output"
PAD, ROWS, OUT_ROWS = "winograd_pad", "winograd_rows", "winograd_out_rows"
CONV, GEMM = "winograd_conv", "winograd_gemm"      # the fused kernel's anchor; its contraction


def channel_chunk(channels: int, ctx: PassContext) -> int:
    """Channels per vectorized step: one machine vector (``simd_lanes``), or half of one, when
    that divides ``channels``; else the whole axis when it is at most a vector, else a vector
    (the last chunk guarded). Measured on AVX-512 (16 lanes): 16 beats 8, 32 and 64 for the
    output transform by 1.3-1.8x at 64 channels, 56 x 56, and the input transform is within 10%."""
    lanes = ctx.simd_lanes
    for c in (lanes, lanes // 2):
        if c >= 4 and channels % c == 0:
            return c
    return channels if channels <= lanes else lanes


def _chunk(channels: int, ctx: PassContext, decide: Decisions, name: str = "chunk") -> int:
    """The ``chunk`` decision (or ``name``): ``channel_chunk`` by default, or another legal
    width (a multiple of 4 dividing ``channels``, up to 4 machine vectors, or the whole axis)."""
    default = channel_chunk(channels, ctx)
    lanes = getattr(ctx, "simd_lanes", None) or 8
    options = [c for c in range(4, 4 * lanes + 1, 4) if channels % c == 0 and c < channels]
    options += [c for c in (channels, default) if c <= 4 * lanes or c == default]
    return decide.choose(name, sorted(set(options)), default=default)


def _split(sch: Schedule, loop: LoopRV, extent: int, factor: int):
    """(outer, inner) of ``loop`` split by ``factor``; outer is None when one chunk covers it."""
    if extent <= factor:
        return None, loop
    return tuple(sch.split(loop, [None, factor]))


def _big(elements: int, ctx: PassContext) -> bool:
    return elements >= ctx.parallel_min_elements


def _parallel(sch: Schedule, loops, default: bool, decide: Decisions) -> bool:
    """The ``parallel`` decision, applied: the ``loops`` fused and run on the thread pool."""
    loops = [lp for lp in loops if lp is not None]
    if not loops or not decide.choose("parallel", [False, True], default=default):
        return False
    sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])
    return True


def _input_transform(sch: Schedule, loops, chans: int, ctx: PassContext, decide: Decisions,
                     name: str = "chunk") -> Tuple[int, Optional[LoopRV]]:
    """``winograd_input``'s loops (a, b, t, c) as (t, channel chunk, a, b (unrolled), lanes),
    ``winograd_rows`` computed at ``a`` (``B^T d``, a few vectors); returns the chunk and the
    chunk loop (None when one chunk covers the channels)."""
    a, b, t, c = loops
    chunk = _chunk(chans, ctx, decide, name)
    c0, c1 = _split(sch, c, chans, chunk)
    sch.reorder(*[lp for lp in (t, c0, a, b, c1) if lp is not None])
    sch.compute_at(sch.get_block(ROWS), a)
    rows = sch.get_loops(sch.get_block(ROWS))
    sch.unroll(a)
    sch.unroll(b)
    sch.unroll(rows[-2])
    sch.vectorize(rows[-1])
    sch.vectorize(c1)
    return chunk, c0


def _pad_copy(sch: Schedule, chans: int, lanes: int) -> Tuple[list, bool]:
    """The NHWC padded copy ``winograd_pad`` vectorized along channels: a gather from the
    channel planes and one contiguous store per pixel (measured 1.9x faster than contiguous
    loads along the rows with one store per channel, for 64 channels at 56 x 56); from a
    channel-blocked input, in steps of its block, so that each step's loads are contiguous
    (``x[n, ch // b, y, x, ch % b]`` with ``ch = c_0 * b + c_1``). From NCHW, a vector of
    ``lanes`` channels at a time over all the rows. Returns the copy's outer loops (those to
    run in parallel) and whether the input is channel-blocked."""
    pad = find(sch.func, PAD)
    *outer, ch = loop_rvs(pad)
    x_shape = [b for b in pad.read() if b in params_of(sch.func)][0].shape
    blocked = len(x_shape) == 5
    if blocked:
        block = int(x_shape[4].value)
        if block < chans:
            ch = sch.split(ch, [None, block])[1]
    elif chans > lanes and chans % lanes == 0:
        # A pixel's channels are gathered from their planes, 16 KiB apart at 64 x 64: all 64
        # channels a pixel kept 64 planes' pages and lines in flight, a vector of them over
        # all the rows 16. GroupNorm U-Net's 64-channel 64 x 64 input transform, one thread,
        # alternated: 5,080 -> 2,097 us on Zen 4 (the model 21.8 -> 17.9 ms).
        c0, ch = sch.split(ch, [None, lanes])
        rows, cols = outer[-2:]
        sch.reorder(c0, rows, cols, ch)
        outer = outer[:-2] + [c0, rows, cols]
    sch.vectorize(ch)
    return outer[:-1], blocked


def _schedule_input(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    sch = Schedule(IRModule({"main": func}), "main")
    info = find(sch.func, INPUT)
    alpha, _, tiles, chans = [static_extent(f) for f in info.loops]
    a, b, t, c = loop_rvs(info)
    chunk, c0 = _input_transform(sch, (a, b, t, c), chans, ctx, decide)
    parts = [f"winograd input: channels {chunk}", "rows at tile"]
    par = _parallel(sch, [t, c0], _big(alpha * alpha * tiles * chans, ctx), decide)
    if par:
        parts.append("parallel")
    # The padded copy is its own pass over the input, parallel with the rest.
    rows, blocked = _pad_copy(sch, chans, ctx.simd_lanes)
    if blocked:
        parts.append("input nchwc")
    if par:
        sch.parallel(sch.fuse(*rows))
    parts.append("pad vectorized")
    return sch.func, ", ".join(parts)


def _inline_epilogue(sch: Schedule, keep) -> int:
    """Inline the conv's fused epilogue into the output transform's store: its intermediates
    (batch-norm scale, bias chains) into the last epilogue block, which then joins the
    ``winograd_output`` block; ``keep`` names the blocks not to inline. Returns how many
    epilogue blocks joined."""
    inline_intermediates(sch, lambda b: b.name in keep)
    epilogue = 0
    while True:
        out = find(sch.func, OUTPUT)
        buf = out.written()[0]
        if buf in params_of(sch.func):
            return epilogue
        users = consumers(sch.func, buf)
        if len(users) != 1:
            raise ScheduleError(f"winograd output: {len(users)} blocks read its result", sch.func)
        sch.reverse_compute_inline(users[0].rv)
        epilogue += 1


def _output_transform(sch: Schedule, ctx: PassContext, decide: Decisions,
                      tiles_per_block: Optional[int] = None) -> dict:
    """The output loops as (n, tile row, tile column, channel chunk, i, j (unrolled), lanes),
    ``winograd_out_rows`` (``A^T M``, ``m x alpha`` vectors) computed at the chunk. With
    ``tiles_per_block``, the tile columns split into blocks of that many (the fused kernel's
    blocks of tiles, outside the chunks). Returns the loops and sizes by name."""
    out = find(sch.func, OUTPUT)
    m = static_extent(find(sch.func, OUT_ROWS).loops[0])
    blocked = len(out.loops) == 5
    if blocked:
        # Channel-blocked output [N, O/b, OH, OW, b]: chunks within a block, so that each
        # store is a contiguous vector.
        _, blocks, oh, ow, block = [static_extent(f) for f in out.loops]
        n, q, y, x, r = loop_rvs(out)
        chunk = _chunk(block, ctx, decide)
        r0, o1 = _split(sch, r, block, chunk)
        chans, chunk_loops = blocks * block, [q, r0]
    else:
        _, chans, oh, ow = [static_extent(f) for f in out.loops]
        n, o, y, x = loop_rvs(out)
        chunk = _chunk(chans, ctx, decide)
        o0, o1 = _split(sch, o, chans, chunk)
        chunk_loops = [o0]
    ty, i = _split(sch, y, oh, m)
    tx, j = _split(sch, x, ow, m)
    tx0 = None
    if tiles_per_block is not None and tx is not None:
        tx0, tx = _split(sch, tx, -(-ow // m), tiles_per_block)
    sch.reorder(*[lp for lp in [n, ty, tx0, tx] + chunk_loops + [i, j, o1] if lp is not None])
    at = next(lp for lp in chunk_loops[::-1] + [tx, tx0, ty, n] if lp is not None)
    sch.compute_at(sch.get_block(OUT_ROWS), at)
    r_loops = sch.get_loops(sch.get_block(OUT_ROWS))
    for lp in r_loops[-3:-1]:
        sch.unroll(lp)
    sch.vectorize(r_loops[-1])
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(o1)
    return dict(n=n, ty=ty, tx0=tx0, tx=tx, m=m, chunk=chunk, chans=chans, oh=oh, ow=ow,
                blocked=blocked)


def _schedule_output(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    sch = Schedule(IRModule({"main": func}), "main")
    epilogue = _inline_epilogue(sch, (OUTPUT, OUT_ROWS))
    lp = _output_transform(sch, ctx, decide)
    m = lp["m"]
    parts = [f"winograd output: tile {m}x{m}, channels {lp['chunk']}", "rows at tile",
             f"epilogue {'inlined' if epilogue else 'none'}"]
    if lp["blocked"]:
        parts.append("output nchwc")
    if _parallel(sch, [lp["n"], lp["ty"], lp["tx"]], _big(lp["chans"] * lp["oh"] * lp["ow"], ctx),
                 decide):
        parts.append("parallel")
    return sch.func, ", ".join(parts)


def tiles_per_block(tile_cols: int, alpha: int, channels: int, out_channels: int,
                    ctx: PassContext) -> int:
    """The fused kernel's tiles per block (decision ``tiles``), along one tile row: the whole
    row when its V and M blocks take at most half of L2, else the largest divisor of the row
    that does (ESPCN's 56 tiles of 64 -> 32 channels: the row, 774 KB). A row measured 6.2 ms
    against 6.6 for 14 tiles and 7.4 for 7 (Xeon, AVX-512, one thread)."""
    per_tile = alpha * alpha * (channels + out_channels) * 4
    fits = [d for d in range(1, tile_cols + 1)
            if tile_cols % d == 0 and d * per_tile <= ctx.machine.l2_bytes // 2]
    return max(fits) if fits else 1


def gemm_tile(tiles: int, panel: int, out_channels: int, ctx: PassContext) -> Tuple[int, int]:
    """The default register tile of the fused contraction: (``mr`` tiles, ``vectors`` of
    output channels), ``mr`` dividing the block's tiles, ``vectors`` a divisor of a panel's
    vectors or whole panels; the most accumulators within ``tile_accumulators``, then the most
    multiply-adds per load (``mr x v / (mr + v)``). ESPCN's 56 tiles of 32 channels: 8 x 2;
    ResNet-18's 14 tiles of 64 channels (panels of 64): 7 x 2, not 2 x 4."""
    best = None
    for v in vector_options(panel, out_channels, ctx):
        fit = [d for d in range(1, min(tiles, 16) + 1)
               if tiles % d == 0 and d * v <= ctx.tile_accumulators]
        mr = max(fit) if fit else 1
        score = (mr * v, mr * v / (mr + v))
        if best is None or score > best[0]:
            best = (score, mr, v)
    return best[1], best[2]


def vector_options(panel: int, out_channels: int, ctx: PassContext) -> List[int]:
    """The register tile's widths in vectors: part of one panel (a divisor of its vectors) or
    whole panels (a divisor of their number)."""
    vecs = max(1, panel // ctx.simd_lanes)
    panels = out_channels // panel
    return [d for d in range(1, vecs + 1) if vecs % d == 0] + \
        [vecs * k for k in range(2, panels + 1) if panels % k == 0]


def _gemm_tile(sch: Schedule, tiles: int, panel: int, out_channels: int, ctx: PassContext,
               decide: Decisions) -> Tuple[int, int]:
    """The contraction of a block, ``M[a, b, t, o] += V[a, b, t, c] * U[o // P, a, b, c, o % P]``,
    as a register tile of ``mr`` tiles (unrolled) x ``v`` vectors of output channels (within a
    panel of ``P``, or whole panels, unrolled), the channels ``c`` streamed outside them:
    loops (a, b, tile rows, column groups, c, tile, [panel,] lanes). Decisions ``mr`` (dividing
    the block's tiles: a guarded last tile, 56 tiles in 4 of 12 and one of 8, ran 3.8x slower
    than 7 of 8) and ``vectors``; defaults from ``gemm_tile``. Returns (mr, v)."""
    gemm = sch.get_block(GEMM)
    a, b, t, o, rc = sch.get_loops(gemm)[-5:]
    lanes = ctx.simd_lanes
    vecs = max(1, panel // lanes)
    mr0, v0 = gemm_tile(tiles, panel, out_channels, ctx)
    v = decide.choose("vectors", vector_options(panel, out_channels, ctx), default=v0)
    mr = decide.choose("mr", [d for d in range(1, min(tiles, 16) + 1) if tiles % d == 0],
                       default=mr0)
    t0, t1 = sch.split(t, [None, mr])
    po, lane = sch.split(o, [None, panel])
    if v <= vecs:
        # part of a panel: its lanes in groups of v vectors, the groups outside the channels
        outer, lane = sch.split(lane, [None, v * lanes]) if v < vecs else (None, lane)
        sch.reorder(*[lp for lp in (a, b, t0, po, outer, rc, t1, lane) if lp is not None])
    else:
        p0, p1 = sch.split(po, [None, v // vecs])
        sch.reorder(a, b, t0, p0, rc, t1, p1, lane)
        sch.unroll(p1)
    sch.decompose_reduction(gemm, rc)
    sch.unroll(t1)
    sch.vectorize(lane)
    sch.vectorize(sch.get_loops(sch.get_block(GEMM + "_init"))[-1])
    return mr, v


def _schedule_conv(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    """``winograd_conv`` (``transform/fuse_winograd.py``), the three stages per block of tiles
    of one tile row::

        for n, tile row, block of tiles (parallel):
            winograd_pad     the block's input rows, NHWC                  (as winograd_input)
            winograd_input   V of the block's tiles: [alpha, alpha, tiles, C]
            winograd_gemm    M of the block: a register tile over channels (``_gemm_tile``)
            for tile, channel chunk:  A^T M A and the epilogue             (as winograd_output)

    V, M and the padded rows are scratch blocks of the block's size (``lower/compact.py``),
    per task, so they stay in L2; the weight U is read by every block."""
    sch = Schedule(IRModule({"main": func}), "main")
    epilogue = _inline_epilogue(sch, (OUTPUT, OUT_ROWS, INPUT, ROWS, PAD))
    alpha, _, _, chans = [static_extent(f) for f in find(sch.func, INPUT).loops]
    gemm = find(sch.func, GEMM)
    out_channels = static_extent(gemm.loops[3])
    u = next(b for b in gemm.read() if b in params_of(sch.func) and len(b.shape) == 5)
    panel = int(u.shape[4].value)
    m = alpha - 2
    tile_cols = -(-static_extent(find(sch.func, OUTPUT).loops[3]) // m)
    options = [d for d in range(1, tile_cols + 1) if tile_cols % d == 0]
    tiles = decide.choose("tiles", options,
                          default=tiles_per_block(tile_cols, alpha, chans, out_channels, ctx))
    lp = _output_transform(sch, ctx, decide, tiles_per_block=tiles)
    at = next(x for x in (lp["tx0"], lp["ty"], lp["n"]) if x is not None)
    # (unit loops kept: a block of one tile still has its tile loop, which the rules below split)
    sch.compute_at(sch.get_block(GEMM), at, preserve_unit_loops=True)
    sch.compute_at(sch.get_block(INPUT), at, preserve_unit_loops=True)
    in_chunk, _ = _input_transform(sch, sch.get_loops(sch.get_block(INPUT))[-4:], chans, ctx,
                                   decide, "in_chunk")
    sch.compute_at(sch.get_block(PAD), at)
    _, blocked = _pad_copy(sch, chans, ctx.simd_lanes)
    mr, vectors = _gemm_tile(sch, tiles, panel, out_channels, ctx, decide)
    parts = [f"winograd conv: tile {m}x{m}, blocks of {tiles} tiles",
             f"gemm tile {mr}x{vectors * ctx.simd_lanes}",
             f"channels {in_chunk} in, {lp['chunk']} out",
             f"epilogue {'inlined' if epilogue else 'none'}"]
    if blocked:
        parts.append("input nchwc")
    if lp["blocked"]:
        parts.append("output nchwc")
    work = alpha * alpha * tile_cols * -(-lp["oh"] // m) * chans * out_channels
    if _parallel(sch, [lp["n"], lp["ty"], lp["tx0"]], _big(work, ctx), decide):
        parts.append("parallel")
    return sch.func, ", ".join(parts)


# The rules by kernel anchor (``kiln.anchor``): ``rule(func, ctx, decide) -> (func, description)``,
# the signature of ``default_schedule``'s rules, so its dispatch can call them directly.
RULES = {INPUT: _schedule_input, OUTPUT: _schedule_output, CONV: _schedule_conv}
