"""A first default GPU schedule for any tensor program: ``bind_spatial_loops``.

Each top-level block's leading spatial loops (those no reduction iterator depends on) are fused
into one loop, split by ``threads`` and bound to ``blockIdx.x`` x ``threadIdx.x``; its
reduction loops stay serial in each thread. So every output element is one thread: correct for
every kernel of the operator library (elementwise, reductions, matmul, conv, pooling), and the
starting point the tuned rules (shared-memory tiles, warp reductions) are to improve on.

>>> func = bind_spatial_loops(mod["fused_matmul_add_relu"])     # doctest: +SKIP

``schedule_for_gpu`` / the pass ``gpu_default_schedule`` give a kernel the default GPU rules
(``gpu_rules``: warp reductions for row reductions, this rule for the rest).
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


def bind_block_spatial(sch, blk, threads: int = DEFAULT_THREADS) -> None:
    """Bind one block's leading spatial loops, fused, to blockIdx.x x threadIdx.x (``threads``
    per block); nothing to do for a block without spatial loops."""
    realize, _ = sch._realize(blk)
    reduce_vars = _reduce_vars(realize)
    loops = sch.get_loops(blk)
    fors: List[For] = [sch._loop(lp)[0] for lp in loops]
    spatial = []
    for lp, f in zip(loops, fors):
        if f.loop_var in reduce_vars or f.kind != "serial":
            break
        spatial.append(lp)
    if not spatial:
        return
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    extent = sch._loop(fused)[0].extent
    n = getattr(extent, "value", None)
    t = min(threads, n) if isinstance(n, int) else threads
    bx, tx = sch.split(fused, factors=[None, t])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def bind_spatial_loops(func: PrimFunc, threads: int = DEFAULT_THREADS) -> PrimFunc:
    """``func`` with each top-level block's spatial loops bound to blocks x threads (see the
    module docstring). Blocks nested in another block's loops are left as they are."""
    from ...schedule import Schedule
    sch = Schedule(func)
    root = func.body.block.name_hint
    for blk in sch.get_child_blocks(sch.get_block(root)):
        bind_block_spatial(sch, blk, threads)
    return sch.func


# ---- the default GPU schedule of a whole model ------------------------------------------------

SCHEDULED_FOR_CUDA = "cuda"   # the kiln.scheduled_for fingerprint of a GPU-scheduled kernel


def schedule_for_gpu(func: PrimFunc) -> PrimFunc:
    """``func`` with the default GPU rules (``gpu_rules.schedule_gpu`` picks one per block),
    marked scheduled (``kiln.schedule`` = the rules used, ``kiln.scheduled_for`` = cuda)."""
    from ...transform.kernels import ATTR_SCHEDULE, ATTR_SCHEDULED_FOR
    from .gpu_rules import schedule_gpu
    out, used = schedule_gpu(func)
    attrs = dict(out.attrs)
    attrs[ATTR_SCHEDULE] = "+".join(used)
    attrs[ATTR_SCHEDULED_FOR] = SCHEDULED_FOR_CUDA
    return PrimFunc(out.params, out.body, tuple(attrs.items()))


def gpu_default_schedule():
    """The pass giving every unscheduled tensor program its default GPU schedule (the CUDA
    pipelines' last pass, as ``default_schedule`` is the CPU ones')."""
    from ...ir import IRModule
    from ...transform.default_schedule import needs_schedule
    from ...transform.infra import Pass

    def run(mod):
        return IRModule({n: schedule_for_gpu(f) if isinstance(f, PrimFunc) and needs_schedule(f) else f
                         for n, f in mod.functions.items()}, mod.attrs)
    return Pass("gpu_default_schedule", run)
