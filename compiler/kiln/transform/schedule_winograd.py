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
Each kernel's ``kiln.schedule`` says what it got (e.g. ``"winograd input: channels 16,
rows at tile, parallel"``). The rule's choices are
named decisions (``kiln.schedule.decisions``), recorded in ``kiln.decisions``:
``chunk`` (channels per vectorized step: a divisor of the channels that is a multiple of 4, or
the whole axis when short; default one machine vector) and ``parallel`` (whether the tile loop
runs on the thread pool; default when the kernel is big enough).
"""
from __future__ import annotations

from typing import Tuple

from ..ir import IRModule, PrimFunc
from ..schedule import LoopRV, Schedule, ScheduleError
from ..schedule.decisions import Decisions
from .infra import PassContext
from .schedule_rules import consumers, find, inline_intermediates, loop_rvs, params_of, static_extent

INPUT, OUTPUT = "winograd_input", "winograd_output"
PAD, ROWS, OUT_ROWS = "winograd_pad", "winograd_rows", "winograd_out_rows"


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


def _chunk(channels: int, ctx: PassContext, decide: Decisions) -> int:
    """The ``chunk`` decision: ``channel_chunk`` by default, or another legal width (a
    multiple of 4 dividing ``channels``, up to 4 machine vectors, or the whole axis)."""
    default = channel_chunk(channels, ctx)
    lanes = getattr(ctx, "simd_lanes", None) or 8
    options = [c for c in range(4, 4 * lanes + 1, 4) if channels % c == 0 and c < channels]
    options += [c for c in (channels, default) if c <= 4 * lanes or c == default]
    return decide.choose("chunk", sorted(set(options)), default=default)


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


def _schedule_input(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    sch = Schedule(IRModule({"main": func}), "main")
    info = find(sch.func, INPUT)
    alpha, _, tiles, chans = [static_extent(f) for f in info.loops]
    a, b, t, c = loop_rvs(info)
    chunk = _chunk(chans, ctx, decide)
    c0, c1 = _split(sch, c, chans, chunk)
    sch.reorder(*[lp for lp in (t, c0, a, b, c1) if lp is not None])
    sch.compute_at(sch.get_block(ROWS), a)
    rows = sch.get_loops(sch.get_block(ROWS))
    sch.unroll(a)
    sch.unroll(b)
    sch.unroll(rows[-2])
    sch.vectorize(rows[-1])
    sch.vectorize(c1)
    parts = [f"winograd input: channels {chunk}", "rows at tile"]
    par = _parallel(sch, [t, c0], _big(alpha * alpha * tiles * chans, ctx), decide)
    if par:
        parts.append("parallel")
    # The NHWC padded copy, vectorized along channels: a gather from the channel planes and
    # one contiguous store per pixel (measured 1.9x faster than contiguous loads along the
    # rows with one store per channel, for 64 channels at 56 x 56); parallel with the rest.
    pad = find(sch.func, PAD)
    n, yy, xx, ch = loop_rvs(pad)
    x_shape = [b for b in pad.read() if b in params_of(sch.func)][0].shape
    if len(x_shape) == 5:
        # A channel-blocked input: the channels in steps of its block, so that each step's
        # loads are contiguous (x[n, ch // b, y, x, ch % b] with ch = c_0 * b + c_1).
        block = int(x_shape[4].value)
        if block < chans:
            ch = sch.split(ch, [None, block])[1]
        parts.append("input nchwc")
    sch.vectorize(ch)
    if par:
        sch.parallel(sch.fuse(n, yy))
    parts.append("pad vectorized")
    return sch.func, ", ".join(parts)


def _schedule_output(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    sch = Schedule(IRModule({"main": func}), "main")
    # Epilogue intermediates (batch-norm scale, bias chains) inline into the last epilogue
    # block, which then joins the output transform's store.
    inline_intermediates(sch, lambda b: b.name in (OUTPUT, OUT_ROWS))
    epilogue = 0
    while True:
        out = find(sch.func, OUTPUT)
        buf = out.written()[0]
        if buf in params_of(sch.func):
            break
        users = consumers(sch.func, buf)
        if len(users) != 1:
            raise ScheduleError(f"winograd output: {len(users)} blocks read its result", sch.func)
        sch.reverse_compute_inline(users[0].rv)
        epilogue += 1
    out = find(sch.func, OUTPUT)
    rows = find(sch.func, OUT_ROWS)
    m = static_extent(rows.loops[0])
    if len(out.loops) == 5:
        # Channel-blocked output [N, O/b, OH, OW, b]: chunks within a block, so that each
        # store is a contiguous vector.
        _, blocks, oh, ow, block = [static_extent(f) for f in out.loops]
        n, q, y, x, r = loop_rvs(out)
        chunk = _chunk(block, ctx, decide)
        ty, i = _split(sch, y, oh, m)
        tx, j = _split(sch, x, ow, m)
        r0, o1 = _split(sch, r, block, chunk)
        o0 = r0 if r0 is not None else q
        sch.reorder(*[lp for lp in (n, ty, tx, q, r0, i, j, o1) if lp is not None])
        chans = blocks * block
    else:
        _, chans, oh, ow = [static_extent(f) for f in out.loops]
        n, o, y, x = loop_rvs(out)
        chunk = _chunk(chans, ctx, decide)
        ty, i = _split(sch, y, oh, m)
        tx, j = _split(sch, x, ow, m)
        o0, o1 = _split(sch, o, chans, chunk)
        sch.reorder(*[lp for lp in (n, ty, tx, o0, i, j, o1) if lp is not None])
    at = o0 if o0 is not None else (tx if tx is not None else (ty if ty is not None else n))
    sch.compute_at(sch.get_block(OUT_ROWS), at)
    r_loops = sch.get_loops(sch.get_block(OUT_ROWS))
    for lp in r_loops[-3:-1]:
        sch.unroll(lp)
    sch.vectorize(r_loops[-1])
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(o1)
    parts = [f"winograd output: tile {m}x{m}, channels {chunk}", "rows at tile",
             f"epilogue {'inlined' if epilogue else 'none'}"]
    if len(out.loops) == 5:
        parts.append("output nchwc")
    if _parallel(sch, [n, ty, tx], _big(chans * oh * ow, ctx), decide):
        parts.append("parallel")
    return sch.func, ", ".join(parts)


# The rules by kernel anchor (``kiln.anchor``): ``rule(func, ctx, decide) -> (func, description)``,
# the signature of ``default_schedule``'s rules, so its dispatch can call them directly.
RULES = {INPUT: _schedule_input, OUTPUT: _schedule_output}
