"""The schedule of a sliding-window pool over NCHW (``max_pool2d``, ``avg_pool2d``): vectorized
along the output width.

The pool block ``P[n, c, y, x] = max(P[n, c, y, x], X[n, c, y*s + ry, x*s + rx])`` (``where``
the tap is inside the input) gets:

- the window loops ``(ry, rx)`` outside the output column loop ``x``, so each tap updates a
  whole output row (in L1) with vector loads of the input row: contiguous for stride 1, two
  loads and a shuffle for stride 2 (codegen's strided loads);
- the init split off (``decompose_reduction``) and vectorized as well;
- ``(n, c, y)`` fused and parallel; an elementwise block after the pool (``avg_pool2d``'s
  division) computed under the same row loop and vectorized;

and lowering keeps the tap conditions off the interior: the ``where`` of a padded window only
fails for the first (or last) output columns, so ``partition_selects`` splits those columns
off the vectorized loop and the rest runs without conditions or masks.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ..ir import BufferLoad, IRModule, PrimFunc, Var, collect
from ..ir.stmt import BufferStore, IfThenElse
from ..schedule import Schedule, ScheduleError
from ..schedule.decisions import Decisions
from .infra import PassContext
from .schedule_rules import BlockInfo, block_infos, loop_rvs, static_extent

# The shortest output row worth vectorizing (narrower rows keep the generic schedule).
MIN_WIDTH = 4


def pool_block(func: PrimFunc) -> Optional[BlockInfo]:
    """The window reduction block of a pool kernel, or None: the only reduction, four spatial
    loops then the (one or two) reduction loops, each bound to one iterator, one input read
    whose last index uses the last spatial iterator and a reduction iterator."""
    reds = [b for b in block_infos(func) if b.is_reduction]
    if len(reds) != 1:
        return None
    b = reds[0]
    ivs = b.block.iter_vars
    kinds = [iv.kind for iv in ivs]
    if len(ivs) != len(b.loops) or kinds[:4] != ["spatial"] * 4 or \
            any(k != "reduce" for k in kinds[4:]) or not 1 <= len(kinds) - 4 <= 2:
        return None
    for iv, value, loop in zip(ivs, b.realize.iter_values, b.loops):
        if value is not loop.loop_var:
            return None
    store = _update(b.block.body)
    if store is None or len(store.indices) != 4:
        return None
    loads = [ld for ld in collect(store.value, BufferLoad) if ld.buffer not in b.written()]
    if len(loads) != 1 or len(loads[0].indices) != 4:
        return None
    last = set(collect(loads[0].indices[-1], Var))
    reduce_vars = {iv.var for iv in ivs[4:]}
    if ivs[3].var not in last or not last & reduce_vars:
        return None
    if any(iv.var in collect(i, Var) for iv in ivs[4:] for i in store.indices):
        return None
    return b


def _update(body) -> Optional[BufferStore]:
    """The store of a reduction body, under the ``if`` of its ``where`` condition if any."""
    if isinstance(body, IfThenElse) and body.else_case is None:
        body = body.then_case
    return body if isinstance(body, BufferStore) else None


def epilogues_at_rows(sch: Schedule, rows, skip) -> List[str]:
    """Move the elementwise blocks after a pool (avg_pool2d's division) under its fused row
    loop ``rows``, vectorized; blocks named in ``skip`` and reductions stay. Returns the
    description parts of those moved."""
    parts = []
    for b in block_infos(sch.func):
        if b.name in skip or b.is_reduction:
            continue
        try:
            sch.reverse_compute_at(b.rv, rows)
            sch.vectorize(sch.get_loops(b.rv)[-1])
            parts.append(f"{b.name} at rows")
        except ScheduleError:
            pass
    return parts


def schedule_pool(func: PrimFunc, ctx: PassContext,
                  decide: Optional[Decisions] = None) -> Tuple[PrimFunc, str]:
    """Apply the module docstring's schedule; returns (scheduled func, description). Its
    decision: ``parallel`` (the fused rows)."""
    decide = decide if decide is not None else Decisions()
    info = pool_block(func)
    if info is None:
        raise ScheduleError("no sliding-window pool block", func)
    width = static_extent(info.loops[3])
    if width is None or width < MIN_WIDTH:
        raise ScheduleError(f"pool: output width {width} is too narrow to vectorize", func)
    sch = Schedule(IRModule({"main": func}), "main")
    n, c, y, x, *red = loop_rvs(info)
    sch.reorder(*([n, c, y] + red + [x]))
    init = sch.decompose_reduction(info.rv, red[0])
    rows = sch.fuse(n, c, y)
    extents = [static_extent(f) for f in info.loops]
    parts = ["rows", f"vectorize {width}"] + epilogues_at_rows(sch, rows, (info.name, init.name))
    sch.vectorize(x)
    sch.vectorize(sch.get_loops(init)[-1])
    big = None in extents or math.prod(extents) >= ctx.parallel_min_elements
    if decide.choose("parallel", [False, True], default=big):
        sch.parallel(rows)
        parts.append("parallel")
    return sch.func, "pool: " + ", ".join(parts)

