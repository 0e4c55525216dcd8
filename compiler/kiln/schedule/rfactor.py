"""``rfactor``: turn one reduction loop of a reduction block into a spatial axis of a partial
result, so that the partial reduction can be vectorized (or parallelized) along it, and
reduce the partials in a second, short block.

``sum_k x[k]`` with ``k`` split into ``(k_0, k_1)`` and ``rfactor(k_1, 0)``::

    s_rf[k_1] = sum_{k_0} x[k_0 * 8 + k_1]      # k_1 is spatial here: 8 independent lanes
    s = sum_{k_1} s_rf[k_1]                     # 8 terms

The combiner is read off the block's update ``B[i] = B[i] op e`` with ``op`` one of ``+``,
``*``, ``max``, ``min``; the partials start from its identity (0, 1, -inf, +inf) and the
original init stays with the final block. Floating-point sums are reassociated, which is the
point: the result differs from the serial order by rounding only.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

from ..arith import Analyzer
from ..ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For,
                  IterVar, PrimExpr, Range, SeqStmt, Var, collect, const, seq, substitute,
                  replace_stmts, transform, uses_var)
from ..ir import dtype as dt
from ..ir.expr import Add, Max, Min, Mul
from .regions import load_regions, same
from .scope import block_names, buffer_names, scope_of, unique_name
from .state import BlockRV, LoopRV, ScheduleError, ScheduleState, traced

_COMBINERS = (Add, Mul, Max, Min)


class RFactorPrimitives:
    """Mixed into ``kiln.Schedule``."""

    @traced
    def rfactor(self: ScheduleState, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factor the reduction over ``loop`` out of the one reduction block under it; returns
        the new block ``<block>_rf``.

        ``<block>_rf`` replaces the block under its loops and writes a new scratch buffer
        ``<buffer>_rf``: the block's output with one more dimension, of ``loop``'s extent, at
        ``factor_axis``; ``loop`` binds that dimension (a spatial iterator), the other reduction
        loops still reduce. The original block keeps its name and init and now reduces the
        partials over a new loop ``<loop>_rf``; it runs right after the outermost reduction
        loop, under copies of the spatial loops below that one.

        Before ``rfactor(k_1, 0)`` (``k`` split by 4)::

            for i in range(8):
                for k_0 in range(4):
                    for k_1 in range(4):
                        with T.block("B"):
                            vi = T.axis.spatial(8, i)
                            vk = T.axis.reduce(16, k_0 * 4 + k_1)
                            with T.init():
                                B[vi] = 0.0
                            B[vi] = B[vi] + A[vi, vk]

        After::

            B_rf = T.alloc_buffer((4, 8), "float32")
            for i in range(8):
                for k_0 in range(4):
                    for k_1 in range(4):
                        with T.block("B_rf"):
                            vi = T.axis.spatial(8, i)
                            vk_1 = T.axis.spatial(4, k_1)
                            vk_0 = T.axis.reduce(4, k_0)
                            with T.init():
                                B_rf[vk_1, vi] = 0.0
                            B_rf[vk_1, vi] = B_rf[vk_1, vi] + A[vi, vk_0 * 4 + vk_1]
                for k_1_rf in range(4):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        vk_1 = T.axis.reduce(4, k_1_rf)
                        with T.init():
                            B[vi] = 0.0
                        B[vi] = B[vi] + B_rf[vk_1, vi]

        Raises ``ScheduleError`` if ``loop`` has other than one block under it, the block is not
        a reduction ``B[..] = B[..] op e`` (op: +, *, max, min) with an init, ``loop`` drives a
        spatial iterator or no reduction iterator, a loop drives both kinds, ``factor_axis`` is
        out of range, or the block's predicate uses a reduction loop (the partials of a
        guarded tail would not all be initialized).
        """
        f, fparents = self._loop(loop)
        realizes = collect(f.body, BlockRealize)
        if len(realizes) != 1:
            raise ScheduleError(f"rfactor: loop '{f.loop_var.name}' must have exactly one block "
                                f"under it, it has {len(realizes)}", f)
        r = realizes[0]
        _, parents = self._realize(BlockRV(r.block.name_hint))
        blk, name = r.block, r.block.name_hint
        store, combiner, rhs = _reducer(blk)
        buf = store.buffer
        if not 0 <= factor_axis <= buf.ndim:
            raise ScheduleError(f"rfactor: factor_axis {factor_axis} is out of range for buffer "
                                f"'{buf.name}' of {buf.ndim} dimension(s)", r)
        scope, inner = scope_of(parents)
        loops = [p for p in inner if isinstance(p, For)]
        spatial = [(iv, v) for iv, v in zip(blk.iter_vars, r.iter_values) if iv.kind == "spatial"]
        reduce = [(iv, v) for iv, v in zip(blk.iter_vars, r.iter_values) if iv.kind == "reduce"]
        kinds: Dict[Var, str] = {}
        for lp in loops:
            in_s = any(uses_var(v, lp.loop_var) for _, v in spatial)
            in_r = any(uses_var(v, lp.loop_var) for _, v in reduce)
            if in_s and in_r:
                raise ScheduleError(f"rfactor: loop '{lp.loop_var.name}' drives both spatial and "
                                    f"reduction iterators of block '{name}'", lp)
            kinds[lp.loop_var] = "R" if in_r else "S" if in_s else ""
        if kinds.get(f.loop_var) != "R":
            raise ScheduleError(f"rfactor: loop '{f.loop_var.name}' does not drive a reduction "
                                f"iterator of block '{name}'", f)
        red_loops = [lp for lp in loops if kinds[lp.loop_var] == "R"]
        if any(uses_var(r.predicate, lp.loop_var) for lp in red_loops):
            raise ScheduleError(f"rfactor: the predicate of block '{name}' uses a reduction loop; "
                                "split the reduction by a divisor of its extent", r)
        top = red_loops[0]
        below = loops[loops.index(top):]
        for lp in below:
            if any(uses_var(e, x.loop_var) for e in (lp.min, lp.extent) for x in red_loops):
                raise ScheduleError(f"rfactor: the bounds of loop '{lp.loop_var.name}' depend on "
                                    "a reduction loop", lp)

        # The partial block: the spatial iterators, the factored loop as a spatial iterator,
        # one reduction iterator per other reduction loop.
        s_ivs = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, "spatial") for iv, _ in spatial]
        smap = {iv.var: new.var for (iv, _), new in zip(spatial, s_ivs)}
        f_iv = IterVar(Var(f"v{f.loop_var.name}", f.loop_var.dtype), Range(f.min, f.extent),
                       "spatial")
        r_ivs = [IterVar(Var(f"v{lp.loop_var.name}", lp.loop_var.dtype), Range(lp.min, lp.extent),
                         "reduce") for lp in red_loops if lp is not f]
        lmap = {f.loop_var: f_iv.var}
        lmap.update({lp.loop_var: iv.var for lp, iv in
                     zip([lp for lp in red_loops if lp is not f], r_ivs)})
        rmap = {iv.var: substitute(v, lmap) for iv, v in reduce}
        vmap = {**smap, **rmap}
        rf_buf = Buffer(unique_name(f"{buf.name}_rf", buffer_names(self.func)),
                        buf.shape[:factor_axis] + (f.extent,) + buf.shape[factor_axis:],
                        buf.dtype, "global")
        s_idx = [substitute(i, smap) for i in store.indices]
        rf_idx = tuple(s_idx[:factor_axis] + [f_iv.var] + s_idx[factor_axis:])
        rf_load = BufferLoad(rf_buf, rf_idx)
        rf_rhs = substitute(rhs, vmap)
        all_ivs = s_ivs + [f_iv] + r_ivs
        ana = Analyzer({iv.var: iv.dom for iv in all_ivs})
        rf_name = unique_name(f"{name}_rf", block_names(self.func))
        rf_block = Block(rf_name, tuple(all_ivs), load_regions(rf_rhs, ana),
                         (BufferRegion.point(rf_buf, rf_idx),),
                         BufferStore(rf_buf, combiner(rf_load, rf_rhs), rf_idx),
                         init=BufferStore(rf_buf, _identity(combiner, buf.dtype), rf_idx),
                         annotations=blk.annotations)
        rf_realize = BlockRealize(tuple(v for _, v in spatial) + (f.loop_var,) +
                                  tuple(lp.loop_var for lp in red_loops if lp is not f),
                                  r.predicate, rf_block)

        # The final block, under copies of the spatial loops below ``top`` and a new loop over
        # the partials where ``loop`` was.
        copies: Dict[Var, Var] = {}
        nest: List[For] = []
        for lp in below:
            if lp is f:
                nest.append(lp)
            elif kinds[lp.loop_var] == "S":
                copies[lp.loop_var] = Var(f"{lp.loop_var.name}_rf", lp.loop_var.dtype)
                nest.append(lp)
        k_var = Var(f"{f.loop_var.name}_rf", f.loop_var.dtype)
        k_iv = IterVar(Var(f"v{f.loop_var.name}", f.loop_var.dtype), Range(f.min, f.extent), "reduce")
        wb_idx = tuple(list(store.indices[:factor_axis]) + [k_iv.var] +
                       list(store.indices[factor_axis:]))
        wb_load = BufferLoad(rf_buf, wb_idx)
        out_load = BufferLoad(buf, store.indices)
        wb_block = dataclasses.replace(
            blk, iter_vars=tuple(iv for iv, _ in spatial) + (k_iv,),
            reads=(BufferRegion.point(rf_buf, wb_idx),),
            body=BufferStore(buf, combiner(out_load, wb_load), store.indices))
        pred = r.predicate if not copies else substitute(r.predicate, copies)
        stmt = BlockRealize(tuple(substitute(v, copies) for _, v in spatial) + (k_var,), pred,
                            wb_block)
        for lp in reversed(nest):
            if lp is f:
                stmt = For(k_var, lp.min, lp.extent, "serial", stmt)
            else:
                stmt = dataclasses.replace(lp, loop_var=copies[lp.loop_var], kind="serial",
                                           body=stmt, annotations=())

        new_top = replace_stmts(top, {id(r): rf_realize})
        body = transform(scope.body, post=_flatten,
                         pre=lambda n: seq(new_top, stmt) if n is top else None)
        self._replace(scope, dataclasses.replace(scope, body=body,
                                                 alloc_buffers=scope.alloc_buffers + (rf_buf,)))
        return BlockRV(rf_name)


def _reducer(blk: Block) -> Tuple[BufferStore, type, PrimExpr]:
    """(the update store, its combiner class, the value combined in) of ``blk``."""
    name = blk.name_hint
    store = blk.body
    if blk.init is None or not blk.is_reduction:
        raise ScheduleError(f"rfactor: block '{name}' is not a reduction with an init", blk)
    if not isinstance(store, BufferStore) or not isinstance(store.value, _COMBINERS):
        raise ScheduleError(f"rfactor: the update of block '{name}' is not B[..] = B[..] op e "
                            "with op one of +, *, max, min", blk)
    v = store.value

    def is_self(e):
        return isinstance(e, BufferLoad) and e.buffer is store.buffer and \
            all(same(a, b) for a, b in zip(e.indices, store.indices))
    if is_self(v.a):
        rhs = v.b
    elif is_self(v.b):
        rhs = v.a
    else:
        raise ScheduleError(f"rfactor: the update of block '{name}' does not combine "
                            f"'{store.buffer.name}' with a value", blk)
    if any(ld.buffer is store.buffer for ld in collect(rhs, BufferLoad)):
        raise ScheduleError(f"rfactor: block '{name}' reads '{store.buffer.name}' in the value it "
                            "combines", blk)
    init = blk.init
    if not isinstance(init, BufferStore) or init.buffer is not store.buffer:
        raise ScheduleError(f"rfactor: the init of block '{name}' is not one store to "
                            f"'{store.buffer.name}'", blk)
    return store, type(v), rhs


def _identity(combiner: type, dtype: str) -> PrimExpr:
    """The start value of a partial: the identity of ``combiner`` in ``dtype``."""
    is_float = dt.is_float(dtype)
    if combiner is Add:
        return const(0.0 if is_float else 0, dtype)
    if combiner is Mul:
        return const(1.0 if is_float else 1, dtype)
    if is_float:
        return const(float("-inf") if combiner is Max else float("inf"), dtype)
    bits = dt.bits(dtype)
    if dt.is_uint(dtype):
        lo, hi = 0, 2 ** bits - 1
    else:
        lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    return const(lo if combiner is Max else hi, dtype)


def _flatten(n):
    """A statement sequence inside a sequence (from inserting after a loop) becomes flat."""
    if isinstance(n, SeqStmt) and any(isinstance(s, SeqStmt) for s in n.seq):
        return seq(*n.seq)
    return None
