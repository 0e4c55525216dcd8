"""The default GPU rules, chosen per block: ``schedule_gpu(func) -> (func', rules used)``.

Elementwise intermediates are first inlined into their consumers (as the CPU rules do). Each
remaining top-level block of a tensor program is one kernel (``kernels.plan_kernels``); the
rule is chosen per block:

* ``gpu_warp_reduce`` for a **row reduction**: a float32 sum/max/min block whose loops are its
  spatial loops then its reduction loops, with a reduction of at least 32 elements and not too
  many rows (softmax's max and sum, layer_norm's mean and variance, a matrix-vector product:
  the MLP and the decoder at batch 1). One warp per output element: the rows are fused and
  bound to ``blockIdx.x``; the reduction is fused, split by 32 and its inner loop bound to
  ``threadIdx.x`` with the annotation ``kiln.cuda.warp_reduce``. Each lane accumulates every
  32nd element in a register, then the CUDA lowering (``lower.KernelLowerer``) combines the 32
  partial results with five ``shfl.sync.bfly`` (``llvm.nvvm.shfl.sync.bfly.f32``) and lane 0
  writes the result. (The schedule primitives refuse to bind a reduction loop to threads; the
  annotation is what makes it a cross-thread reduction, so the rule sets both on the IR.)
* ``gpu_matmul_tiles`` (``gpu_matmul``) for a matmul whose i, j and k are multiples of 16:
  16 x 16 thread blocks over 16 x 16 tiles of C, the operands staged through shared memory one
  16-wide slice of k at a time, the accumulator in a register. Tried first.
* ``gpu_spatial`` otherwise (``schedule.bind_spatial_loops``): one output element per thread,
  its reduction serial; correct for every kernel of the operator library.

A program is named after the rules its blocks used (``gpu_warp_reduce+gpu_spatial``).
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ...ir import (Add, BufferLoad, BufferStore, For, Max, Min, PrimFunc, Var, post_order_visit,
                   structural_equal, transform)
from .schedule import DEFAULT_THREADS, bind_block_spatial

WARP = 32
WARP_REDUCE = "kiln.cuda.warp_reduce"      # loop annotation: value is the combiner's name
# Above this many rows (output elements), one thread per row already fills the GPU.
MAX_WARP_ROWS = 32768
COMBINERS = {Add: "sum", Max: "max", Min: "min"}


def _vars(exprs) -> set:
    out = set()
    for e in exprs:
        post_order_visit(e, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out


def row_reduction(realize, fors: List[For]) -> Optional[Tuple[int, str]]:
    """``(number of spatial loops, combiner)`` when the block of ``realize`` inside the loops
    ``fors`` is a row reduction the warp rule takes (see the module docstring), else None."""
    block = realize.block
    body = block.body
    if block.init is None or not isinstance(body, BufferStore) or body.buffer.dtype != "float32":
        return None
    combiner = COMBINERS.get(type(body.value))
    if combiner is None:
        return None
    acc = [x for x in (body.value.a, body.value.b) if isinstance(x, BufferLoad)
           and x.buffer is body.buffer and len(x.indices) == len(body.indices)
           and all(structural_equal(i, j) for i, j in zip(x.indices, body.indices))]
    if len(acc) != 1:
        return None
    spatial_vals = [v for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind == "spatial"]
    reduce_vals = [v for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind != "spatial"]
    spatial_vars, reduce_vars = _vars(spatial_vals), _vars(reduce_vals)
    if spatial_vars & reduce_vars or any(f.kind != "serial" for f in fors):
        return None
    n_spatial = 0
    while n_spatial < len(fors) and fors[n_spatial].loop_var not in reduce_vars:
        n_spatial += 1
    inner = fors[n_spatial:]
    if not inner or any(f.loop_var in spatial_vars for f in inner):
        return None
    extents = [getattr(f.extent, "value", None) for f in inner]
    if not all(isinstance(n, int) for n in extents) or math.prod(extents) < WARP:
        return None
    # Rows: symbolic extents count as 1 (a batch); the warp rule suits a few rows.
    rows = math.prod(getattr(f.extent, "value", 1) for f in fors[:n_spatial])
    return (n_spatial, combiner) if rows <= MAX_WARP_ROWS else None


def _warp_reduce_block(sch, blk, n_spatial: int) -> Var:
    """Schedule one row-reduction block; returns the variable of its lane loop."""
    loops = sch.get_loops(blk)
    spatial, reduce = loops[:n_spatial], loops[n_spatial:]
    r = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    ko, ki = sch.split(r, factors=[None, WARP])
    sch.reorder(ki, ko)
    if spatial:
        rows = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        sch.bind(rows, "blockIdx.x")
    return sch._loop(ki)[0].loop_var


def _bind_lanes(func: PrimFunc, lanes: dict) -> PrimFunc:
    """The loops of ``lanes`` (loop var -> combiner) bound to threadIdx.x and annotated."""
    def post(n):
        if isinstance(n, For) and n.loop_var in lanes:
            return For(n.loop_var, n.min, n.extent, "thread_binding", n.body, "threadIdx.x",
                       tuple(n.annotations) + ((WARP_REDUCE, lanes[n.loop_var]),))
        return None
    return func.with_body(transform(func.body, post))


def schedule_gpu(func: PrimFunc, threads: int = DEFAULT_THREADS) -> Tuple[PrimFunc, List[str]]:
    """``func`` with each top-level block scheduled by its rule; and the rules used."""
    from ...schedule import Schedule
    from ...schedule.state import ScheduleError
    from ...transform.schedule_rules import inline_intermediates
    from .gpu_matmul import bind_copies, matmul_shape, schedule_matmul
    sch = Schedule(func)
    # Elementwise intermediates computed where they are used: fewer kernels, no scratch trip.
    inline_intermediates(sch, keep=lambda info: False)
    root = sch.func.body.block.name_hint
    names = [b.name for b in sch.get_child_blocks(sch.get_block(root))]
    bound, used = {}, []
    for name in names:
        blk = sch.get_block(name)
        realize, _ = sch._realize(blk)
        fors = [sch._loop(lp)[0] for lp in sch.get_loops(blk)]
        rule = "gpu_spatial"
        tiled = matmul_shape(realize, fors)
        if tiled is not None:
            trial = Schedule(sch.func)      # the rule on a copy: a refusal leaves sch as it was
            try:
                bound.update(schedule_matmul(trial, trial.get_block(name), tiled))
                sch, rule = trial, "gpu_matmul_tiles"
            except ScheduleError:
                pass
        if rule == "gpu_spatial":
            found = row_reduction(realize, fors)
            if found is not None:
                bound[_warp_reduce_block(sch, blk, found[0])] = (WARP_REDUCE, found[1])
                rule = "gpu_warp_reduce"
            else:
                bind_block_spatial(sch, blk, threads)
        if rule not in used:
            used.append(rule)
    out = sch.func
    lanes = {v: c for v, c in bound.items() if isinstance(c, tuple)}
    copies = {v: c for v, c in bound.items() if not isinstance(c, tuple)}
    if copies:
        out = bind_copies(out, copies)
    if lanes:
        out = _bind_lanes(out, {v: c[1] for v, c in lanes.items()})
    return out, used or ["gpu_spatial"]
