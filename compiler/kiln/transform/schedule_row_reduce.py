"""Vectorized row reductions (softmax's max and sum, layer_norm's mean and variance, sums over
the last axis): the reduction loop is split by a vector width and ``rfactor``-ed, so each of
``lanes`` partial results accumulates one lane of a vector across the row, then a short
scalar loop combines the ``lanes`` partials::

    for k_0 in range(K / 16):                     # partials: 16 lanes = 2 AVX2 registers,
        for k_1 in T.vectorized(16):              # so the exp of softmax's sum runs vectorized
            S_rf[row, k_1] += exp(x[row, k_0 * 16 + k_1] - m[row])
    for k_1 in range(16):
        S[row] += S_rf[row, k_1]

Without it a reduction loop cannot be vectorized (the loop carries the accumulator) and runs
one element, and one scalar ``exp``, at a time. ``compact_buffers`` shrinks ``S_rf`` to one
row's ``lanes`` values.
"""
from __future__ import annotations

from typing import List, Optional

from ..arith import unit_step
from ..ir import BufferLoad, collect, uses_var
from ..schedule import LoopRV, Schedule, ScheduleError
from ..schedule.decisions import Decisions
from .infra import PassContext
from .schedule_rules import BlockInfo, block_infos, static_extent


def row_reduce_lanes(extent: Optional[int], ctx: PassContext) -> Optional[int]:
    """The partials of a row reduction of ``extent`` elements: ``vector_lanes`` (or half of
    it, or 8) when that divides the row at least twice, else None (the reduction stays
    scalar)."""
    if extent is None:
        return None
    for lanes in sorted({ctx.vector_lanes, ctx.vector_lanes // 2, 8}, reverse=True):
        if lanes >= 4 and extent % lanes == 0 and extent >= 2 * lanes:
            return lanes
    return None


def vectorize_row_reductions(sch: Schedule, ctx: PassContext,
                             decide: Optional[Decisions] = None) -> List[str]:
    """``rfactor`` every reduction block whose innermost loop is a contiguous reduction over a
    row (see the module docstring); returns the names of the blocks done. The partials per
    block are the decision ``<block>.rfactor`` (0: stay scalar)."""
    decide = decide if decide is not None else Decisions()
    done = []
    for info in block_infos(sch.func):
        lanes = _fits(info, ctx)
        if lanes is None:
            continue
        extent = static_extent(info.loops[-1])
        options = [0] + [w for w in (8, ctx.simd_lanes, ctx.vector_lanes)
                         if extent % w == 0 and extent >= 2 * w]
        lanes = decide.choose(f"{info.name}.rfactor", options + [lanes], default=lanes)
        if not lanes:
            continue
        k = LoopRV(info.loops[-1].loop_var)
        try:
            k0, k1 = sch.split(k, [None, lanes])
            rf = sch.rfactor(k1, len(info.written()[0].shape))
            sch.vectorize(k1)
            init = sch.decompose_reduction(rf, k0)
            sch.vectorize(sch.get_loops(init)[-1])
        except ScheduleError:
            # (split and rfactor check everything _fits assumes; a failure leaves the block
            # as the failing primitive found it, which is still correct, only scalar.)
            continue
        done.append(info.name)
    return done


def _fits(info: BlockInfo, ctx: PassContext) -> Optional[int]:
    """The lanes to rfactor ``info`` by, or None: a reduction block with an init, whose
    innermost loop is serial, of a constant extent, drives only its reduction iterators, and
    is read contiguously (unit stride in the last index of every load that uses it)."""
    blk = info.block
    if not info.is_reduction or blk.init is None or not info.loops:
        return None
    f = info.loops[-1]
    if f.kind != "serial":
        return None
    lanes = row_reduce_lanes(static_extent(f), ctx)
    if lanes is None:
        return None
    var = f.loop_var
    bindings = list(zip(blk.iter_vars, info.realize.iter_values))
    if any(iv.kind == "spatial" and uses_var(v, var) for iv, v in bindings):
        return None
    driven = [iv.var for iv, v in bindings if iv.kind == "reduce" and uses_var(v, var)]
    if len(driven) != 1:
        return None
    value = next(v for iv, v in bindings if iv.var is driven[0])
    if not unit_step(value, var):
        return None
    rv = driven[0]
    loads = [ld for ld in collect(blk.body, BufferLoad) if uses_var(ld, rv)]
    if not loads:
        return None
    for ld in loads:
        if any(uses_var(i, rv) for i in ld.indices[:-1]) or not unit_step(ld.indices[-1], rv):
            return None   # a strided walk: vector lanes would be gathers
    return lanes
