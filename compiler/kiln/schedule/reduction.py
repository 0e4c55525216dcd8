"""``decompose_reduction``: split a reduction block's ``init`` into a block of its own, so that
the initialisation runs once per output tile before the reduction loop instead of being a
conditional inside it.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List

from ..arith import Analyzer
from ..ir import (And, Block, BlockRealize, BufferRegion, For, IfThenElse, IntImm, IterVar,
                  PrimExpr, Range, SeqStmt, Var, conjuncts, seq, substitute, transform, uses_var,
                  replace_stmts)
from .regions import load_regions, loop_ranges
from .scope import block_names, scope_of, unique_name
from .state import BlockRV, LoopRV, ScheduleError, ScheduleState, traced


class ReductionPrimitives:
    """Mixed into ``kiln.Schedule``."""

    @traced
    def decompose_reduction(self: ScheduleState, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Move the ``init`` of reduction ``block`` into a new block ``<block>_init`` placed
        right before ``loop``; returns it. The new block runs under copies (``<loop>_init``) of
        the loops from ``loop`` down to ``block`` that bind its spatial iterators; loops that
        only drive the reduction are left out. The loops around ``loop`` are shared. The
        original block keeps its name and loses its init.

        Before ``decompose_reduction(c, k)``::

            @T.prim_func
            def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
                     C: T.Buffer((4, 4), "float32")):
                for i in range(4):
                    for k in range(4):
                        for j in range(4):
                            with T.block("C"):
                                vi = T.axis.spatial(4, i)
                                vj = T.axis.spatial(4, j)
                                vk = T.axis.reduce(4, k)
                                T.reads(A[vi, vk], B[vk, vj])
                                T.writes(C[vi, vj])
                                with T.init():
                                    C[vi, vj] = 0.0
                                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        After::

            @T.prim_func
            def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
                     C: T.Buffer((4, 4), "float32")):
                for i in range(4):
                    for j_init in range(4):
                        with T.block("C_init"):
                            vi = T.axis.spatial(4, i)
                            vj = T.axis.spatial(4, j_init)
                            T.reads()
                            T.writes(C[vi, vj])
                            C[vi, vj] = 0.0
                    for k in range(4):
                        for j in range(4):
                            with T.block("C"):
                                vi = T.axis.spatial(4, i)
                                vj = T.axis.spatial(4, j)
                                vk = T.axis.reduce(4, k)
                                T.reads(A[vi, vk], B[vk, vj])
                                T.writes(C[vi, vj])
                                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        Raises ``ScheduleError`` if the block has no init, ``loop`` is not around the block,
        a loop outside ``loop`` drives the reduction (the init would run on every iteration
        of it), a loop drives both a spatial and a reduction iterator, an ``if`` lies between
        ``loop`` and the block, or a predicate mixes spatial and reduction loops.
        """
        r, parents = self._realize(block)
        f, _ = self._loop(loop)
        blk, name, lname = r.block, r.block.name_hint, f.loop_var.name
        if blk.init is None:
            raise ScheduleError(f"decompose_reduction: block '{name}' has no init (it is not a "
                                "reduction, or it was decomposed already)", r)
        scope, inner = scope_of(parents)
        at = next((k for k, p in enumerate(inner) if p is f), None)
        if at is None:
            raise ScheduleError(f"decompose_reduction: loop '{lname}' is not around block '{name}'",
                                f)
        above = [p for p in inner[:at] if isinstance(p, For)]
        chain = inner[at:]
        if any(isinstance(p, IfThenElse) for p in chain):
            raise ScheduleError(f"decompose_reduction: an if lies between loop '{lname}' and block "
                                f"'{name}'; its condition cannot be split between init and update",
                                f)
        spatial = [v for iv, v in zip(blk.iter_vars, r.iter_values) if iv.kind == "spatial"]
        reduce = [v for iv, v in zip(blk.iter_vars, r.iter_values) if iv.kind == "reduce"]
        for lp in above:
            if any(uses_var(v, lp.loop_var) for v in reduce):
                raise ScheduleError(
                    f"decompose_reduction: loop '{lp.loop_var.name}' around loop '{lname}' drives "
                    f"the reduction of block '{name}'; an init before '{lname}' would run again "
                    "on each of its iterations (decompose at that loop instead)", f)

        # Copy the loops under ``loop`` that bind spatial iterators; drop the others.
        vmap: Dict[Var, Var] = {}
        kept: List[For] = []
        for lp in (p for p in chain if isinstance(p, For)):
            in_s = any(uses_var(v, lp.loop_var) for v in spatial)
            in_r = any(uses_var(v, lp.loop_var) for v in reduce)
            if in_s and in_r:
                raise ScheduleError(f"decompose_reduction: loop '{lp.loop_var.name}' drives both "
                                    f"spatial and reduction iterators of block '{name}'", lp)
            if in_s:
                vmap[lp.loop_var] = Var(f"{lp.loop_var.name}_init", lp.loop_var.dtype)
                kept.append(lp)
        dropped = [p.loop_var for p in chain if isinstance(p, For) and p.loop_var not in vmap]
        for lp in kept:
            if any(uses_var(e, v) for e in (lp.min, lp.extent) for v in dropped):
                raise ScheduleError(f"decompose_reduction: the bounds of loop "
                                    f"'{lp.loop_var.name}' depend on a reduction loop", lp)

        # The predicate: keep the conjuncts on spatial loops, drop those only on dropped ones.
        conds: List[PrimExpr] = []
        for c in conjuncts(r.predicate):
            on_dropped = any(uses_var(c, v) for v in dropped)
            on_kept = any(uses_var(c, v) for v in vmap)
            if on_dropped and on_kept:
                raise ScheduleError(f"decompose_reduction: the predicate of block '{name}' mixes "
                                    "spatial and reduction loops; it cannot be split", r)
            if not on_dropped:
                conds.append(substitute(c, vmap))
        pred: PrimExpr = conds[0] if conds else IntImm(1, "bool")
        for c in conds[1:]:
            pred = And(pred, c)

        # The init block has fresh iterators (a variable belongs to one block): the spatial
        # ones of the reduction, with the same domains.
        ivs = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, "spatial")
               for iv in blk.iter_vars if iv.kind == "spatial"]
        ivmap = {iv.var: new.var for iv, new in
                 zip((iv for iv in blk.iter_vars if iv.kind == "spatial"), ivs)}
        init_body = substitute(blk.init, ivmap)
        ana = Analyzer({iv.var: iv.dom for iv in ivs})
        reads = load_regions(init_body, ana)
        writes = tuple(BufferRegion(w.buffer, tuple(Range(ana.simplify(substitute(x.min, ivmap)),
                                                          x.extent) for x in w.region))
                       for w in blk.writes)
        init_name = unique_name(f"{name}_init", block_names(self.func))
        ana = Analyzer(loop_ranges(above + kept))
        stmt = BlockRealize(tuple(ana.simplify(substitute(v, vmap)) for v in spatial),
                            ana.simplify(pred),
                            Block(init_name, tuple(ivs), reads, writes, init_body))
        for lp in reversed(kept):
            stmt = dataclasses.replace(lp, loop_var=vmap[lp.loop_var], min=substitute(lp.min, vmap),
                                       extent=substitute(lp.extent, vmap), body=stmt)

        update = dataclasses.replace(r, block=dataclasses.replace(blk, init=None))
        new_f = replace_stmts(f, {id(r): update})
        body = transform(scope.body, post=_flatten,
                         pre=lambda n: seq(stmt, new_f) if n is f else None)
        self._replace(scope, dataclasses.replace(scope, body=body))
        return BlockRV(init_name)


def _flatten(n):
    """A statement sequence inside a sequence (from inserting before a loop) becomes flat."""
    if isinstance(n, SeqStmt) and any(isinstance(s, SeqStmt) for s in n.seq):
        return seq(*n.seq)
    return None
