"""The schedule of a fused attention kernel (``ops/attention.py``, anchor ``attention``): the
whole of ``softmax(q @ kt * scale + mask) @ v`` per block of ``rows`` query rows of one head,
the blocks (batch x heads x row blocks) run in parallel::

    for b_h_i0 in T.parallel(B * H * M / rows):
        # scores of the rows: a register tile of rows x nr, kt's rows streamed (k outermost)
        for j0, k, ii (unrolled), j1 (vectorized):  score[ii, j] += q[ii, k] * kt[k, j]
        max, exp and sum over each row (vector partials, schedule_row_reduce.py)
        # the rows times v, the same register tile
        for d0, j, ii (unrolled), d1 (vectorized):  pv[ii, d] += exp[ii, j] * v[j, d]
        out[ii, d] = pv[ii, d] / sum[ii]

Scores live in a rows x N scratch buffer (1 KiB for 4 rows of 64 keys), so nothing of
size heads x M x N reaches memory, and the mask and scale are applied where the scores
are read (``attention_logit`` inlined).

With the heads packed in the last axis (``heads=H``, ``ops/attention.py``), a task is a head's
share of its row blocks (the whole head, unless there are fewer heads than twice the cores):
it transposes the head's keys into ``attention_kt`` (a D x N scratch block of the head) once,
then runs its blocks of ``rows`` query rows one after the other as above, the output written
straight into the head's columns::

    for b_h_p in T.parallel(B * H * P):
        attention_kt[k, j] = k[j, h*D + k]          # the head's keys, transposed
        for i0 in range(M / rows / P):
            (the tiles above, q and v read in the head's columns)
            out[i, h*Dv + d] = pv[ii, d] / sum[ii]

Decisions (``kiln.schedule.decisions``): ``rows`` (query rows per block, up to 16; the last
block guarded when they do not divide M), ``nr``
(key columns and value columns per register tile: a multiple of the vector width), ``parts``
(P, heads packed only: tasks per head, dividing its row blocks), and ``parallel``; the row
reductions' ``<block>.rfactor``.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ..ir import IRModule, PrimFunc
from ..schedule import Schedule
from ..schedule.decisions import Decisions
from .infra import PassContext
from .layout import vectors
from .schedule_row_reduce import vectorize_row_reductions
from .schedule_tile import k_unroll, k_unroll_options
from .schedule_rules import block_infos, static_extent

ANCHOR = "attention"
KT = "attention_kt"     # the keys of a head transposed (heads packed in the last axis)


def _divisors(n: int, limit: int) -> List[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def tile_of(m: Optional[int], n: Optional[int], dv: int, ctx: PassContext,
            ragged: bool = True) -> Tuple[int, int]:
    """(rows, nr): ``nr`` columns of up to 4 vectors (no wider than the keys and values need),
    and as many rows as keep the accumulators of a rows x nr tile within
    ``tile_accumulators`` (the registers left after the broadcast operand and the loads),
    dividing ``m`` when a divisor of at least half of them exists; otherwise (a prime ``m``
    such as a ViT's 197 tokens), when ``ragged`` (the row blocks run inside a task of a head,
    so the guarded last one becomes a loop of its own), all of them. A symbolic ``m`` (a prompt
    of any length) or ``n`` (a KV cache of any length) counts as long: all the rows, 4
    vectors; its last tile is guarded."""
    lanes = ctx.simd_lanes
    widest = max(dv, n if n is not None else 4 * lanes)
    vectors = max(1, min(4, -(-widest // lanes)))
    nr = vectors * lanes
    rows_max = max(1, ctx.tile_accumulators // vectors)
    if m is None:
        return rows_max, nr
    rows = max(_divisors(m, rows_max))
    return (rows if 2 * rows >= min(m, rows_max) or not ragged else rows_max), nr


def _extent(sch: Schedule, loop) -> int:
    return static_extent(sch._loop(loop)[0])


def _tile_reduction(sch: Schedule, block: str, tasks, nr: int, ctx: PassContext,
                    decide: Decisions) -> None:
    """``block`` (loops [ii,] x, red under the ``tasks`` loop; no ii loop when one row per
    task) as a register tile: x split by ``nr``, the reduction outside the unrolled rows and
    the vectorized columns, several of its steps a trip (``schedule_tile.k_unroll``; decision
    ``ku_<block>``) when its extent is known."""
    rv = sch.get_block(block)
    loops = sch.get_loops(rv)
    inner = loops[[lp.var for lp in loops].index(tasks.var) + 1:]
    ii = inner[0] if len(inner) == 3 else None
    x, red = inner[-2], inner[-1]
    extent = _extent(sch, x)
    rows = _extent(sch, ii) if ii is not None else 1
    # (a symbolic x, the keys of a cache: tiles of nr, the last one guarded)
    x0, x1 = sch.split(x, [None, nr]) if extent is None or extent > nr else (None, x)
    sch.reorder(*[lp for lp in (x0, red, ii, x1) if lp is not None])
    sch.decompose_reduction(rv, red)
    steps = _extent(sch, red)
    if steps is not None and rows is not None:
        options = k_unroll_options(steps)
        ku = decide.choose(f"ku_{block}", options,
                           default=k_unroll(rows * vectors(min(nr, extent or nr), ctx), options))
        if ku > 1:
            _, k1 = sch.split(red, [None, ku])
            sch.unroll(k1)
    loops = sch.get_loops(sch.get_block(block))
    if ii is not None:
        sch.unroll(loops[-2])
    sch.vectorize(loops[-1])
    init = sch.get_block(f"{block}_init")
    sch.vectorize(sch.get_loops(init)[-1])


def schedule_attention(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    """The rule (module docstring); returns the scheduled function and its description."""
    sch = Schedule(IRModule({"main": func}), "main")
    sch.compute_inline(sch.get_block("attention_logit"))
    out = sch.get_block(ANCHOR)
    loops = sch.get_loops(out)
    packed = any(b.name == KT for b in block_infos(sch.func))
    if packed:
        # (b..., i, h*Dv + d) -> (b..., h, i, d), the loops of the other blocks
        dv = _extent(sch, sch.get_loops(sch.get_block("attention_pv"))[-2])
        h, d = sch.split(loops[-1], [None, dv])
        sch.reorder(*(list(loops[:-2]) + [h, loops[-2], d]))
        loops = sch.get_loops(out)
    m, dv = (_extent(sch, lp) for lp in loops[-2:])
    n = _extent(sch, sch.get_loops(sch.get_block("attention_exp"))[-1])
    if dv is None:
        raise ValueError("attention: the rule needs a static value width")
    # (heads, or a batch of at least a task per core, give tasks with the row blocks inside,
    # where a ragged last block is split off as a loop of its own; fused into the parallel
    # loop it would guard every row)
    batched = packed or len(loops) > 2 and math.prod(
        _extent(sch, lp) or ctx.cores for lp in loops[:-2]) >= ctx.cores
    rows0, nr0 = tile_of(m, n, dv, ctx, ragged=batched)
    rows = decide.choose("rows", list(range(1, 17)), default=rows0)
    lanes = ctx.simd_lanes
    nr = decide.choose("nr", [lanes * v for v in (1, 2, 3, 4)], default=nr0)
    i0 = sch.split(loops[-2], [None, rows])[0] if m is None or rows < m else None
    parts_per_head = 1
    if packed:
        # a task per head (or per P-th of its row blocks); its row blocks in turn, the keys
        # transposed once per task
        heads = list(loops[:-2])
        blocks = -(-m // rows) if m is not None and i0 is not None else 1
        tasks_of_heads = math.prod(_extent(sch, lp) or 1 for lp in heads)
        options = [p for p in range(1, blocks + 1) if blocks % p == 0]
        want = -(-2 * ctx.cores // tasks_of_heads)
        parts_per_head = decide.choose("parts", options,
                                       default=min(p for p in options if p >= want or p == blocks))
        if parts_per_head > 1:
            ip, i0 = sch.split(i0, [parts_per_head, None])
            heads.append(ip)
        tasks = sch.fuse(*heads) if len(heads) > 1 else heads[0]
        at = i0 if i0 is not None else tasks
    elif m is not None and i0 is not None and m % rows and batched:
        # a ragged last row block: tasks of the batch (and heads), the blocks inside
        batch = list(loops[:-2])
        tasks, at = (sch.fuse(*batch) if len(batch) > 1 else batch[0]), i0
    else:
        row_loops = list(loops[:-2]) + ([i0] if i0 is not None else [])
        if not row_loops:
            raise ValueError("attention: one block of rows and no batch: nothing to split")
        tasks = at = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
    for name in ("attention_pv", "attention_sum", "attention_exp", "attention_max",
                 "attention_score"):
        sch.compute_at(sch.get_block(name), at)
    if packed:
        # (a plain copy loop: vector gathers of the keys measured no faster)
        sch.compute_at(sch.get_block(KT), tasks)
    for name in ("attention_score", "attention_pv"):
        _tile_reduction(sch, name, at, nr, ctx, decide)
    exp_cols = sch.get_loops(sch.get_block("attention_exp"))[-1]
    if n is None:   # vector chunks, the last guarded
        exp_cols = sch.split(exp_cols, [None, ctx.vector_lanes])[1]
    sch.vectorize(exp_cols)
    sch.vectorize(sch.get_loops(sch.get_block(ANCHOR))[-1])
    parts = [f"attention: rows {rows}, tile {rows}x{nr}"]
    if packed:
        parts.append("heads packed" + (f", {parts_per_head} tasks a head" if parts_per_head > 1 else ""))
    # multiply-adds of the second product (a symbolic size counts as large)
    rows_per_task = (m or 1 << 10) // parts_per_head if at is not tasks else rows
    work = (_extent(sch, tasks) or 1 << 10) * rows_per_task * (n or 1 << 10) * dv
    if decide.choose("parallel", [False, True], default=work >= ctx.parallel_min_elements):
        sch.parallel(tasks)
        parts.append("parallel")
    done = vectorize_row_reductions(sch, ctx, decide)
    if done:
        parts.append(f"rfactor {len(done)} reduction(s)")
    return sch.func, ", ".join(parts)


RULES = {ANCHOR: schedule_attention}
