"""Schedules of the channel-blocked depthwise conv and pools (``ops/nchwc.py``), vectorized over
the ``b`` channels of a block.

``depthwise_nchwc[n, q, y, x, r] = sum over (ry, rx) X[n, q, y*s + ry*d - p, x*s + rx*d - p, r] *
w[q, ry, rx, r]`` where the tap is inside the input (``depthwise``):

- a register tile of ``XT`` output pixels along a row x the ``b`` channels of a block: the
  loops ``(n, q, y, x_0, ry, rx, x_1, r)``, ``x_1`` (``XT`` pixels) and the taps unrolled,
  ``r`` vectorized, so each tap is one weight load shared by ``XT`` vector multiply-adds of
  contiguous input loads (stride 2 reads every other pixel: whole vectors still, no shuffle);
  the tile accumulated in a local buffer (``cache_write``) that LLVM keeps in registers;
- the elementwise epilogue (bias, batch norm, relu/clip) folded into the tile's write-back,
  contiguous vector stores;
- no padded copy: the taps outside the input are skipped (``ops/nchwc.py``: the reduction's
  ``where``, a well-predicted branch per tap), so the input is read from memory once;
- ``(n, y, q)`` fused and parallel: rows outside the channel blocks, so the threads split the
  image by rows (on one core, ``(n, q, y)``).

Decisions (``kiln.schedule.decisions``): ``xt`` (pixels of the tile: default the most within
the accumulator budget, at most ``MAX_PIXELS``, scored like the conv tiles so that the last
tile of a row is not mostly empty) and ``parallel``.

The pools (``max_pool2d`` / ``avg_pool2d_sum`` blocks over a blocked input, ``pool``): the loops
``(n, q, y, x, ry, rx, r)`` with ``r`` vectorized (the window's ``where`` condition does not
depend on ``r``: one branch per tap, whole-vector loads), ``(n, q, y)`` fused and parallel,
the average's division computed under the same row.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

from ..ir import IRModule, PrimFunc
from ..ops.nchwc import DEPTHWISE_BLOCK
from ..schedule import Schedule, ScheduleError
from ..schedule.decisions import Decisions
from .conv_blocked import STEP_OVERHEAD, tile_score
from .infra import PassContext
from .layout import vectors
from .schedule_pool import epilogues_at_rows
from .schedule_rules import (block_infos, find, inline_intermediates, loop_rvs, static_extent,
                             tile_write_back)

# Reduction blocks of the pools ``pool nchwc`` schedules.
_POOL_BLOCKS = ("max_pool2d", "avg_pool2d_sum", "mean_sum", "sum", "max")
# The most pixels a depthwise tile unrolls.
MAX_PIXELS = 8


def find_depthwise(func: PrimFunc) -> Optional[str]:
    """The name of the blocked depthwise reduction block of ``func``, or None."""
    for b in block_infos(func):
        if b.name.startswith(DEPTHWISE_BLOCK) and b.is_reduction and len(b.loops) == 7:
            return b.name
    return None


def depthwise_pixels(width: int, block: int, ctx: PassContext) -> int:
    """The default ``xt``: pixels of the tile along an output row of ``width`` for a block of
    ``block`` channels, within the accumulator budget, the best ``conv_blocked.tile_score``
    (on a tie the larger)."""
    most = max(1, min(width, MAX_PIXELS, ctx.tile_accumulators // vectors(block, ctx)))
    return max(range(1, most + 1),
               key=lambda xt: (tile_score(width, block, xt, ctx, STEP_OVERHEAD), xt))


def schedule_depthwise(func: PrimFunc, ctx: PassContext,
                       decide: Optional[Decisions] = None) -> Tuple[PrimFunc, str]:
    """The module docstring's depthwise schedule; returns (scheduled func, description)."""
    decide = decide if decide is not None else Decisions()
    name = find_depthwise(func)
    if name is None:
        raise ScheduleError("no channel-blocked depthwise block", func)
    sch = Schedule(IRModule({"main": func}), "main")
    inline_intermediates(sch, lambda b: False)
    info = find(sch.func, name)
    extents = [static_extent(f) for f in info.loops]
    n, q, y, x, r, ry, rx = loop_rvs(info)
    width, block = extents[3], extents[4]
    most = max(1, min(width, ctx.tile_accumulators // vectors(block, ctx)))
    default = depthwise_pixels(width, block, ctx)
    xt = decide.choose("xt", list(range(1, most + 1)), default=default)
    x0, x1 = sch.split(x, [None, xt]) if xt < width else (None, x)
    outer = [lp for lp in (n, q, y, x0) if lp is not None]
    sch.reorder(*(outer + [ry, rx, x1, r]))
    write_back, fused = tile_write_back(sch, info)
    sch.reverse_compute_at(write_back, outer[-1])
    init = sch.decompose_reduction(info.rv, ry)
    for lp in (ry, rx, x1):
        sch.unroll(lp)
    sch.vectorize(r)
    for blk in (init, write_back):
        loops = sch.get_loops(blk)
        sch.vectorize(loops[-1])
        sch.unroll(loops[-2])
    parts = [f"depthwise nchwc: tile {xt}x{block}", f"epilogue {fused}"]
    work = math.prod(e for e in extents if e is not None)
    if decide.choose("parallel", [False, True], default=work >= ctx.parallel_min_elements):
        if ctx.cores > 1:
            # Rows outside the channel blocks: the threads split the image by rows, as the
            # 1 x 1 convs around it do (``schedule_conv._rows_outer``), so each core reads the
            # rows it wrote (MobileNetV2 at 2 threads: 2.56-2.63 ms against 2.59-2.67)
            sch.reorder(n, y, q)
            sch.parallel(sch.fuse(n, y, q))
        else:
            sch.parallel(sch.fuse(n, q, y))
        parts.append("parallel")
    return sch.func, ", ".join(parts)


def find_blocked_pool(func: PrimFunc) -> Optional[str]:
    """The window reduction block of a pool over a blocked input, or of a global pool (``mean``
    / ``sum`` / ``max`` over its spatial axes, ``layout_nchwc.py``): the only reduction, its
    spatial iterators then two reduction ones, one loop each, the last spatial iterator
    indexing the lanes of a block (the last dimension of a 5-D input); else None."""
    reds = [b for b in block_infos(func) if b.is_reduction]
    if len(reds) != 1 or not reds[0].name.startswith(_POOL_BLOCKS):
        return None
    b = reds[0]
    kinds = [iv.kind for iv in b.block.iter_vars]
    spatial = len(kinds) - 2
    if spatial not in (3, 5) or kinds != ["spatial"] * spatial + ["reduce"] * 2 or \
            len(b.loops) != len(kinds):
        return None
    lane = b.block.iter_vars[spatial - 1].var
    inputs = [r for r in b.block.reads if r.buffer not in b.written()]
    if len(inputs) != 1 or len(inputs[0].buffer.shape) != 5:
        return None
    last = inputs[0].region[-1]
    return b.name if last.extent.value == 1 and last.min is lane else None


def schedule_blocked_pool(func: PrimFunc, ctx: PassContext,
                          decide: Optional[Decisions] = None) -> Tuple[PrimFunc, str]:
    """The module docstring's pool schedule; returns (scheduled func, description)."""
    decide = decide if decide is not None else Decisions()
    name = find_blocked_pool(func)
    if name is None:
        raise ScheduleError("no channel-blocked pool block", func)
    sch = Schedule(IRModule({"main": func}), "main")
    inline_intermediates(sch, lambda b: b.name == name)
    info = find(sch.func, name)
    extents = [static_extent(f) for f in info.loops]
    *spatial, r, ry, rx = loop_rvs(info)
    sch.reorder(*(spatial + [ry, rx, r]))
    init = sch.decompose_reduction(info.rv, ry)
    sch.vectorize(r)
    sch.vectorize(sch.get_loops(init)[-1])
    rows = sch.fuse(*spatial[:3])
    parts = ["pool nchwc: vectorize channels"] + epilogues_at_rows(sch, rows, (info.name, init.name))
    work = math.prod(e for e in extents if e is not None)
    if decide.choose("parallel", [False, True], default=work >= ctx.parallel_min_elements):
        sch.parallel(rows)
        parts.append("parallel")
    return sch.func, ", ".join(parts)
