"""``compute_at`` and ``reverse_compute_at``: move a block under a loop of the block it feeds
(or is fed by), computing per iteration of that loop only the tile that is needed there.

Both work the same way:

1. find the other side: the consumers of the moved block's outputs (``compute_at``) or the
   producers of its inputs (``reverse_compute_at``); all of them must be under the loop;
2. compute their region of the shared buffers per iteration of the loop (the loop and the
   loops around it stay symbolic, the loops inside it are relaxed, see ``regions.py``);
3. solve the moved block's iterators from it: a write (read) index ``v + c`` of an iterator
   ``v`` gives ``v``'s range; iterators not pinned this way keep their whole domain;
4. rebuild the block under fresh loops ``ax0, ax1, ...`` covering those ranges (unit loops
   dropped unless ``preserve_unit_loops``), with a predicate where the ranges may leave the
   iterators' domains, and insert it into the loop's body: as late as possible, i.e. right
   before the first statement that uses the block's outputs (or at the end).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

from ..arith import Analyzer
from ..ir import (And, BlockRealize, BufferLoad, For, IntImm, PrimExpr, Range, Var, collect,
                  is_const_int, replace_stmts)
from .regions import Bound, free_of, hull, loop_ranges, relax_region, same, var_offset
from .scope import Site, insert, position, remove, scope_of, site_of, sites, stmts_of
from .state import BlockRV, LoopRV, ScheduleError, ScheduleState, traced


class ComputeAtPrimitives:
    """Mixed into ``kiln.Schedule``."""

    @traced
    def compute_at(self: ScheduleState, block: BlockRV, loop: LoopRV,
                   preserve_unit_loops: bool = False) -> None:
        """Move the producer ``block`` under ``loop``, a loop around all of its consumers, so
        that each iteration of ``loop`` computes the part of the block's outputs that the
        consumers read in that iteration.

        Before ``compute_at(b, i_0)`` (``B`` produces what ``C`` reads)::

            @T.prim_func
            def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
                B = T.alloc_buffer((16,), "float32")
                for i in range(16):
                    with T.block("B"):
                        vi = T.axis.spatial(16, i)
                        T.reads(A[vi])
                        T.writes(B[vi])
                        B[vi] = A[vi] * 2.0
                for i_0 in range(4):
                    for i_1 in range(4):
                        with T.block("C"):
                            vi = T.axis.spatial(16, i_0 * 4 + i_1)
                            T.reads(B[vi])
                            T.writes(C[vi])
                            C[vi] = B[vi] + 1.0

        After::

            @T.prim_func
            def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
                B = T.alloc_buffer((16,), "float32")
                for i_0 in range(4):
                    for ax0 in range(4):
                        with T.block("B"):
                            vi = T.axis.spatial(16, i_0 * 4 + ax0)
                            T.reads(A[vi])
                            T.writes(B[vi])
                            B[vi] = A[vi] * 2.0
                    for i_1 in range(4):
                        with T.block("C"):
                            vi = T.axis.spatial(16, i_0 * 4 + i_1)
                            T.reads(B[vi])
                            T.writes(C[vi])
                            C[vi] = B[vi] + 1.0

        Raises ``ScheduleError`` if the block and loop are in different scopes, the block is
        already under the loop or comes after it, the block has no consumer, a consumer is
        not under the loop (the loop does not dominate it), another block writes the same
        buffers, the block updates its output in place without an ``init``, or moving it
        would reorder it with a block that writes one of its inputs.
        """
        _move(self, block, loop, preserve_unit_loops, reverse=False)

    @traced
    def reverse_compute_at(self: ScheduleState, block: BlockRV, loop: LoopRV,
                           preserve_unit_loops: bool = False) -> None:
        """Move the consumer ``block`` under ``loop``, a loop around all of its producers, so
        that each iteration of ``loop`` consumes the part of its inputs produced in that
        iteration. The block goes after its producers in the loop's body.

        Before ``reverse_compute_at(c, i_0)`` (``C`` reads what ``B`` produces)::

            @T.prim_func
            def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
                B = T.alloc_buffer((16,), "float32")
                for i_0 in range(4):
                    for i_1 in range(4):
                        with T.block("B"):
                            vi = T.axis.spatial(16, i_0 * 4 + i_1)
                            T.reads(A[vi])
                            T.writes(B[vi])
                            B[vi] = A[vi] * 2.0
                for i in range(16):
                    with T.block("C"):
                        vi = T.axis.spatial(16, i)
                        T.reads(B[vi])
                        T.writes(C[vi])
                        C[vi] = B[vi] + 1.0

        After::

            @T.prim_func
            def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
                B = T.alloc_buffer((16,), "float32")
                for i_0 in range(4):
                    for i_1 in range(4):
                        with T.block("B"):
                            vi = T.axis.spatial(16, i_0 * 4 + i_1)
                            T.reads(A[vi])
                            T.writes(B[vi])
                            B[vi] = A[vi] * 2.0
                    for ax0 in range(4):
                        with T.block("C"):
                            vi = T.axis.spatial(16, i_0 * 4 + ax0)
                            T.reads(B[vi])
                            T.writes(C[vi])
                            C[vi] = B[vi] + 1.0

        Raises ``ScheduleError`` if the block and loop are in different scopes, the block is
        already under the loop or comes before it, the block has no producer, a producer is
        not under the loop, a producer still accumulates across iterations of the loop (it is
        a reduction loop of the producer), the block reads a produced buffer in a way whose
        elements cannot be matched to its iterators (``B[vi + vk]``, ``B[vi]`` and
        ``B[vi + 1]``), or moving it would reorder it with a block using its buffers.
        """
        _move(self, block, loop, preserve_unit_loops, reverse=True)


# ---- the shared implementation --------------------------------------------------------------
def _move(sch: ScheduleState, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool,
          reverse: bool) -> None:
    verb = "reverse_compute_at" if reverse else "compute_at"
    r, parents = sch._realize(block)
    f, loop_parents = sch._loop(loop)
    scope, _ = scope_of(parents)
    loop_scope, outer = scope_of(loop_parents)
    name, lname = r.block.name_hint, f.loop_var.name
    if loop_scope is not scope:
        raise ScheduleError(f"{verb}: block '{name}' and loop '{lname}' are not in the same "
                            f"scope (block '{scope.name_hint}' vs '{loop_scope.name_hint}')",
                            sch.func)
    if any(p is f for p in parents):
        raise ScheduleError(f"{verb}: block '{name}' is already under loop '{lname}'", f)

    all_sites = sites(scope)
    order = {id(s): k for k, s in enumerate(all_sites)}
    me = site_of(all_sites, r)
    inside = [s for s in all_sites if s.under(f)]
    my_reads, my_writes = me.reads(), me.writes()
    before_loop = order[id(me)] < order[id(inside[0])]
    if before_loop == reverse:
        hint = ("reverse_compute_at moves a consumer into the loop of its producers, which come "
                "before it (use compute_at)" if reverse else "compute_at moves a producer into "
                "the loop of its consumers, which come after it (use reverse_compute_at)")
        raise ScheduleError(f"{verb}: block '{name}' comes {'before' if reverse else 'after'} "
                            f"loop '{lname}'; {hint}", sch.func)

    if reverse:
        # The other side: blocks writing what this block reads.
        others = [s for s in all_sites if s is not me and s.writes() & my_reads]
        role, what = "producer", "reads"
    else:
        others = [s for s in all_sites if s is not me and s.reads() & my_writes]
        role, what = "consumer", "writes"
    if not others:
        raise ScheduleError(f"{verb}: block '{name}' has no {role} in its scope (no block "
                            f"{'writes' if reverse else 'reads'} the buffers it {what})", sch.func)
    for s in others:
        if not s.under(f):
            raise ScheduleError(
                f"{verb}: loop '{lname}' does not dominate {role} '{s.name}' of block '{name}': "
                f"every {role} must be under the loop", sch.func)
    if not reverse:
        for s in all_sites:
            if s is not me and s.writes() & my_writes:
                raise ScheduleError(f"compute_at: block '{s.name}' also writes a buffer that "
                                    f"block '{name}' produces; compute_at needs a single producer",
                                    sch.func)
        if r.block.init is None and any(id(ld.buffer) in my_writes
                                        for ld in collect(r.block, BufferLoad)):
            raise ScheduleError(f"compute_at: block '{name}' updates its output in place without "
                                "an init; computing it per tile would apply the update again", r)
    else:
        outer_vars = [lp.loop_var for lp in outer if isinstance(lp, For)] + [f.loop_var]
        for s in others:
            for iv, v in zip(s.block.iter_vars, s.realize.iter_values):
                if iv.kind == "reduce" and not free_of(v, outer_vars):
                    raise ScheduleError(
                        f"reverse_compute_at: loop '{lname}' or a loop around it is a reduction "
                        f"loop of producer '{s.name}'; block '{name}' would read partial results",
                        sch.func)

    # Where in the loop's body: as late as possible, before the first statement that reads
    # what the block writes; after every statement that writes what it reads.
    stmts = stmts_of(f.body)
    users = [position(f.body, s) for s in inside if s.reads() & my_writes]
    index = min(users) if users else len(stmts)
    feeders = [position(f.body, s) for s in inside if s.writes() & my_reads]
    if feeders and max(feeders) >= index:
        raise ScheduleError(
            f"{verb}: under loop '{lname}', a block that writes an input of block '{name}' runs "
            f"after a block that reads its output; there is no place for '{name}' between them", f)
    _check_reordering(all_sites, order, me, f, outer, index, verb)

    region = _other_side_region(others, f, outer, my_writes if not reverse else my_reads, reverse)
    ranges = loop_ranges([lp for lp in outer if isinstance(lp, For)] + [f])
    ana = Analyzer(ranges)
    dom = _solve(me, region, ana, reverse)
    nest = _rebuild(me, dom, ana, preserve_unit_loops)

    # Removing the block leaves the loop untouched (it is not under it), so the loop can be
    # found again by identity.
    body = remove(scope.body, r)
    new_f = dataclasses.replace(f, body=insert(f.body, index, nest))
    body = replace_stmts(body, {id(f): new_f})
    sch._replace(scope, dataclasses.replace(scope, body=body))


def _check_reordering(all_sites: List[Site], order, me: Site, f: For, outer, index: int,
                      verb: str) -> None:
    """The block moves in program order: no block it moves past may write its inputs or use
    its outputs, and no block feeding it or fed by it may stay behind in a loop it leaves."""
    before = [s for s in all_sites if s.under(f) and position(f.body, s) < index]
    # The block will run right before the block now at ``new_at`` in program order.
    new_at = order[id(before[-1])] + 1 if before else order[id(next(s for s in all_sites
                                                                    if s.under(f)))]
    k = order[id(me)]
    passed = all_sites[k + 1:new_at] if k < new_at else all_sites[new_at:k]
    mr, mw = me.reads(), me.writes()
    for s in passed:
        if s.writes() & mr or s.writes() & mw or s.reads() & mw:
            raise ScheduleError(
                f"{verb}: moving block '{me.name}' past block '{s.name}' would change what one of "
                "them reads (they share a buffer that one of them writes)", f)
    leaving = [lp for lp in me.loops if not any(lp is a for a in outer)]
    for s in all_sites:
        shared = [lp for lp in leaving if s.under(lp)]
        if s is not me and shared and (s.writes() & mr or s.reads() & mw):
            raise ScheduleError(
                f"{verb}: block '{s.name}' shares loop '{shared[0].loop_var.name}' with block "
                f"'{me.name}' and one feeds the other; move '{s.name}' first", f)


def _other_side_region(others: List[Site], f: For, outer, buffers: set,
                       reverse: bool) -> Dict[int, List[Bound]]:
    """Per buffer id, what ``others`` read (their writes if ``reverse``) of ``buffers`` in
    one iteration of ``f``: their loops inside ``f`` relaxed, ``f`` and outer loops symbolic."""
    outer_ranges = loop_ranges([lp for lp in outer if isinstance(lp, For)] + [f])
    region: Dict[int, List[Bound]] = {}
    for s in others:
        loops = s.loops
        inner = loop_ranges(loops[next(k for k, lp in enumerate(loops) if lp is f) + 1:])
        ana = Analyzer({**outer_ranges, **inner})
        bindings = {iv.var: v for iv, v in zip(s.block.iter_vars, s.realize.iter_values)}
        for br in (s.block.writes if reverse else s.block.reads):
            if id(br.buffer) not in buffers:
                continue
            b = relax_region(br, bindings, inner, ana)
            old = region.get(id(br.buffer))
            region[id(br.buffer)] = b if old is None else [hull(x, y, ana) for x, y in zip(old, b)]
    return region


def _solve(me: Site, region: Dict[int, List[Bound]], ana: Analyzer,
           reverse: bool) -> List[Bound]:
    """The range of each iterator of the moved block (inclusive bounds)."""
    ivs = me.block.iter_vars
    pinned: Dict[int, Bound] = {}
    for br in (me.block.reads if reverse else me.block.writes):
        need = region.get(id(br.buffer))
        if need is None:
            continue
        for d, (rng, (lo, hi)) in enumerate(zip(br.region, need)):
            match = var_offset(rng.min, ivs, ana) if is_const_int(rng.extent, 1) else None
            if match is None or match[0].kind != "spatial":
                if reverse and not _fixed_or_full(rng, lo, hi, ivs, br.buffer.shape[d], ana, match):
                    raise ScheduleError(
                        f"reverse_compute_at: block '{me.name}' reads dimension {d} of buffer "
                        f"'{br.buffer.name}' at an index that is not one spatial iterator plus an "
                        "offset, and its producers write only part of that dimension per "
                        "iteration", me.realize)
                continue
            iv, c = match
            b = (ana.simplify(lo - c), ana.simplify(hi - c))
            old = pinned.get(id(iv))
            if old is None:
                pinned[id(iv)] = b
            elif reverse and not (same(old[0], b[0]) and same(old[1], b[1])):
                raise ScheduleError(
                    f"reverse_compute_at: block '{me.name}' reads buffer '{br.buffer.name}' at "
                    f"several offsets of iterator {iv.var.name}; its tile cannot be matched to "
                    "what its producers write per iteration", me.realize)
            else:
                pinned[id(iv)] = hull(old, b, ana)
    out = []
    for iv in ivs:
        full = (iv.dom.min, ana.simplify(iv.dom.min + iv.dom.extent - 1))
        out.append(pinned.get(id(iv), full))
    return out


def _fixed_or_full(rng: Range, lo, hi, ivs, extent, ana: Analyzer, match) -> bool:
    """For reverse_compute_at, a read dimension not matched to an iterator is fine if it is a
    fixed index that is produced, or if the producers write the whole dimension. A match to a
    reduction iterator is fine only in the latter case."""
    whole = ana.can_prove(lo <= 0) and ana.can_prove(hi >= extent - 1)
    if whole:
        return True
    if match is None and free_of(rng.min, [iv.var for iv in ivs]):
        end = rng.min + rng.extent - 1
        return ana.can_prove(lo <= rng.min) and ana.can_prove(end <= hi)
    return False


def _rebuild(me: Site, dom: List[Bound], ana: Analyzer, preserve_unit_loops: bool):
    """The block under new loops covering ``dom``, guarded to its iterators' domains."""
    loops: List[Tuple[Var, PrimExpr]] = []
    values: List[PrimExpr] = []
    conds: List[PrimExpr] = []
    for iv, (lo, hi) in zip(me.block.iter_vars, dom):
        extent = ana.simplify(hi - lo + 1)
        if is_const_int(extent, 1) and not preserve_unit_loops:
            value = lo
        else:
            ax = Var(f"ax{len(loops)}", iv.var.dtype)
            loops.append((ax, extent))
            ana.bind(ax, Range(IntImm(0, ax.dtype), extent))
            value = ana.simplify(lo + ax)
        values.append(value)
        # A tile at the edge may stick out of the iterator's domain (e.g. a consumer that
        # reads a padded window): guard it unless it provably stays inside.
        d_lo, d_end = iv.dom.min, iv.dom.min + iv.dom.extent
        if not ana.can_prove(lo >= d_lo):
            conds.append(value >= d_lo)
        if not ana.can_prove(hi < d_end):
            conds.append(value < d_end)
    pred: PrimExpr = IntImm(1, "bool")
    for c in conds:
        pred = c if is_const_int(pred, 1) else And(pred, c)
    stmt = BlockRealize(tuple(values), ana.simplify(pred), me.block)
    for ax, extent in reversed(loops):
        stmt = For(ax, IntImm(0, ax.dtype), extent, "serial", stmt)
    return stmt
