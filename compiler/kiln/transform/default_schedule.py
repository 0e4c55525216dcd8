"""``default_schedule``: a schedule for every tensor program nobody scheduled, by kernel kind.

Each unscheduled PrimFunc (no ``kiln.schedule`` attribute and every loop still serial, so
hand-written schedules are left alone) is scheduled with ``kiln.Schedule``:

1. elementwise intermediates are inlined into their consumers (``compute_inline``); blocks
   that pack weight panels, and padding in front of a convolution, are kept;
2. the kernel's kind is read off what is left:

   - ``elementwise`` (no reduction): loops fused, an inner chunk of 16 (8, 4) vectorized, the
     rest parallel when the kernel is big enough (``schedule_rules.schedule_spatial``);
   - ``winograd input`` / ``winograd output`` (the transforms of a Winograd conv,
     ``schedule_winograd.py``; its contraction is a ``matmul`` below);
   - ``attention`` (softmax(q @ kt * scale + mask) @ v fused by ``fuse_attention``): per
     block of query rows, both products as register tiles and the softmax between them
     (``schedule_attention.py``);
   - ``pack`` (a run-time matmul B packed into panels before its product): blocks of B's
     rows outside the panels (``schedule_pack.py``);
   - ``conv nchwc`` (a conv2d computed channel-blocked, ``conv_blocked.py``): a tile of
     output pixels x a block of output channels, vectorized over the channels
     (``schedule_conv.py``);
   - ``depthwise nchwc`` / ``pool nchwc`` (a depthwise conv or pool over channel-blocked
     activations, ``layout_nchwc.py``): vectorized over the channels of a block
     (``schedule_nchwc.py``);
   - ``matmul`` / ``conv`` (one sum-of-products reduction: matmul, linear, batched matmul,
     conv2d): the register-tile recipe of ``bench/matmul.py`` (``schedule_tile.py``), with
     the elementwise epilogue (bias, batch-norm scale/shift, relu, gelu) folded into the
     tile's write-back;
   - ``pool`` (max_pool2d, avg_pool2d over NCHW): window loops outside the output columns,
     which are vectorized (``schedule_pool.py``);
   - ``reduction`` (softmax, layer_norm, sums, other pooling): other blocks computed under the
     output's row loops, rows parallel, inner loops vectorized (``schedule_reduction``);

3. the kernel gets the attribute ``kiln.schedule`` saying what it got, e.g.
   ``"matmul: tile 4x16, epilogue inlined, pack per panel, parallel"`` (``kiln inspect``,
   ``vm.profile``). A rule that fails (``ScheduleError``) falls back to a simpler one, and at
   worst the kernel stays as it was with ``kiln.schedule = "none: <why>"`` (a rule that
   fails is never fatal: the unscheduled kernel computes the same thing).

``kiln.decisions``, the named choices its rule made (``"mr=6 cols=1 parallel=2"``: the
register-tile and conv rules state theirs through ``kiln.schedule.decisions.Decisions``, so a
tuner samples the very same rules and a record replays them), and ``kiln.scheduled_for``,
the fingerprint of the target the schedule was made for
(``Machine.key()``: ISA, vector registers, FMA pipes; ``kiln.compile`` checks it against the
target it compiles for). Every tile size, vector chunk and channel block comes from the
``PassContext`` resolved for that target (``PassContext.resolved``).

With ``PassContext(tuning_db=path)``, a kernel that has a tuning record is scheduled with the
record's decisions instead of the defaults (``kiln.tune``, docs/tuning.md).

To keep a kernel's schedule, give it a ``kiln.schedule`` attribute (any value).
"""
from __future__ import annotations

from typing import Optional, Tuple

from .. import te
from ..ir import IRModule, PrimFunc
from ..schedule import Schedule
from ..schedule.decisions import Decisions
from .infra import Pass, PassContext, context
from .kernels import (ATTR_ANCHOR, ATTR_DECISIONS, ATTR_SCHEDULE, ATTR_SCHEDULED_FOR,
                      PACK_ANNOTATION)
from .schedule_rules import (block_infos, consumers, has_select, inline_intermediates,
                             schedule_reduction, schedule_spatial, serial_loops_only)
from .schedule_conv import find_blocked_conv, schedule_blocked_conv
from .schedule_nchwc import (find_blocked_pool, find_depthwise, schedule_blocked_pool,
                             schedule_depthwise)
from .schedule_cache import scheduled
from .schedule_pool import pool_block, schedule_pool
from .schedule_tile import analyze_contraction, schedule_contraction
from .schedule_attention import RULES as ATTENTION_RULES
from .schedule_pack import RULES as PACK_RULES
from .schedule_winograd import RULES as WINOGRAD_RULES

# Rules for kernels of one operator, by the kernel's anchor (``kiln.anchor``).
ANCHOR_RULES = {**WINOGRAD_RULES, **ATTENTION_RULES, **PACK_RULES}


def default_schedule(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (see the module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        funcs = {}
        for name, f in mod.functions.items():
            todo = isinstance(f, PrimFunc) and needs_schedule(f)
            funcs[name] = scheduled(f, ctx, lambda g: schedule_kernel(g, ctx)) if todo else f
        return IRModule(funcs, mod.attrs)
    return Pass("default_schedule", run)


def needs_schedule(func: PrimFunc) -> bool:
    """True for a PrimFunc without a ``kiln.schedule`` attribute whose loops are all serial."""
    return ATTR_SCHEDULE not in dict(func.attrs) and serial_loops_only(func)


def schedule_kernel(func: PrimFunc, ctx: Optional[PassContext] = None,
                    decisions: Optional[Decisions] = None) -> PrimFunc:
    """``func`` scheduled by its kind, with the ``kiln.schedule``, ``kiln.scheduled_for`` and
    (when a rule made any) ``kiln.decisions`` attributes set. ``decisions`` answers the
    rules' choices (``kiln.schedule.decisions``): the defaults when None, or a record's values,
    or a tuner's samples. With ``ctx.tuning_db`` and no ``decisions``, the database's best
    record for this kernel gives them (``kiln.tune.apply``; no record: the defaults)."""
    ctx = context(ctx)
    if decisions is None and ctx.tuning_db:
        from ..tune.apply import schedule_from_db
        tuned = schedule_from_db(func, ctx)
        if tuned is not None:
            return tuned
    why = ""
    for rule in (_by_kind, _generic, _inline_only):
        decide = Decisions(decisions.fixed, decisions.sampler) if decisions else Decisions()
        try:
            scheduled, desc = rule(func, ctx, decide)
        except Exception as e:   # noqa: BLE001 - an unscheduled kernel still computes right
            # A rule that does not fit (ScheduleError) or breaks falls back to a simpler one;
            # the reason stays visible in the attribute (`kiln inspect`, tests).
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            continue
        if decisions is not None:
            decisions.made, decisions.options, decisions.stale = \
                decide.made, decide.options, decide.stale
        return _mark(scheduled, desc, ctx, decide)
    return _mark(func, f"none: {why}", ctx, Decisions())


def _mark(func: PrimFunc, desc: str, ctx: PassContext, decide: Decisions) -> PrimFunc:
    attrs = dict(func.attrs)
    attrs[ATTR_SCHEDULE] = desc
    attrs[ATTR_SCHEDULED_FOR] = ctx.machine.key()
    if decide.made:
        attrs[ATTR_DECISIONS] = decide.text()
    return PrimFunc(func.params, func.body, tuple(attrs.items()))


def _keep(sch: Schedule):
    def keep(info) -> bool:
        if PACK_ANNOTATION in info.block.annotations or te.KEEP_STAGE in info.block.annotations:
            return True
        # Padding in front of a convolution stays a separate (cheap, parallel) pass over the
        # input, so the conv's inner loop reads plain contiguous rows without conditions.
        if has_select(info):
            for buf in info.written():
                if any(c.is_reduction and sum(iv.kind == "reduce" for iv in c.block.iter_vars) > 1
                       for c in consumers(sch.func, buf)):
                    return True
        return False
    return keep


def _start(func: PrimFunc) -> Schedule:
    return Schedule(IRModule({"main": func}), "main")


def _by_kind(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    rule = ANCHOR_RULES.get(dict(func.attrs).get(ATTR_ANCHOR))
    if rule is not None:        # a Winograd transform, attention or pack kernel
        return rule(func, ctx, decide)
    if find_blocked_conv(func) is not None:
        return schedule_blocked_conv(func, ctx, decide)
    if find_depthwise(func) is not None:
        return schedule_depthwise(func, ctx, decide)
    if find_blocked_pool(func) is not None:
        return schedule_blocked_pool(func, ctx, decide)
    sch = _start(func)
    inline_intermediates(sch, _keep(sch))
    infos = block_infos(sch.func)
    reductions = [b for b in infos if b.is_reduction]
    if not reductions:
        descs = [schedule_spatial(sch, b.name, ctx, decide) for b in block_infos(sch.func)
                 if serial_loops_only_block(b)]
        desc = "elementwise: " + "; ".join(descs)
        return sch.func, desc
    if len(reductions) == 1:
        c = analyze_contraction(sch.func, reductions[0])
        if c is not None:
            kind = "conv" if len(c.reduce) > 1 else "matmul"
            desc = schedule_contraction(sch, c, ctx, kind, decide)
            return sch.func, desc
        if pool_block(sch.func) is not None:
            return schedule_pool(sch.func, ctx, decide)
    desc = schedule_reduction(sch, ctx, decide)
    return sch.func, desc


def _generic(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    sch = _start(func)
    inline_intermediates(sch, _keep(sch))
    desc = schedule_reduction(sch, ctx, decide)
    return sch.func, desc


def _inline_only(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    sch = _start(func)
    done = inline_intermediates(sch, _keep(sch))
    return sch.func, f"inline only ({len(done)} block(s))"


def serial_loops_only_block(info) -> bool:
    return all(f.kind == "serial" for f in info.loops)
