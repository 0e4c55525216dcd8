"""A first default GPU schedule for any tensor program: ``bind_spatial_loops``.

Each top-level block's leading spatial loops (those no reduction iterator depends on) are fused
into one loop, split by ``threads`` and bound to ``blockIdx.x`` x ``threadIdx.x``; its
reduction loops stay serial in each thread. So every output element is one thread: correct for
every kernel of the operator library (elementwise, reductions, matmul, conv, pooling), and the
starting point the tuned rules (shared-memory tiles, warp reductions) are to improve on.

>>> func = bind_spatial_loops(mod["fused_matmul_add_relu"])     # doctest: +SKIP
"""
from __future__ import annotations

from typing import List

from ...ir import PrimFunc, Var, post_order_visit
from ...ir.stmt import For

DEFAULT_THREADS = 256


def _reduce_vars(realize) -> set:
    """Loop variables a reduction iterator of the block is bound to."""
    out = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if iv.kind != "spatial":
            post_order_visit(value, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out


def bind_spatial_loops(func: PrimFunc, threads: int = DEFAULT_THREADS) -> PrimFunc:
    """``func`` with each top-level block's spatial loops bound to blocks x threads (see the
    module docstring). Blocks nested in another block's loops are left as they are."""
    from ...schedule import Schedule
    sch = Schedule(func)
    root = func.body.block.name_hint
    for blk in sch.get_child_blocks(sch.get_block(root)):
        realize, parents = sch._realize(blk)
        reduce_vars = _reduce_vars(realize)
        loops = sch.get_loops(blk)
        fors: List[For] = [sch._loop(lp)[0] for lp in loops]
        spatial = []
        for lp, f in zip(loops, fors):
            if f.loop_var in reduce_vars or f.kind != "serial":
                break
            spatial.append(lp)
        if not spatial:
            continue
        fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        extent = sch._loop(fused)[0].extent
        n = getattr(extent, "value", None)
        t = min(threads, n) if isinstance(n, int) else threads
        bx, tx = sch.split(fused, factors=[None, t])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
    return sch.func
