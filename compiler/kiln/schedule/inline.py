"""``compute_inline`` and ``reverse_compute_inline``: remove an intermediate buffer by
computing its elements where they are used (or storing the consumer's result where they are
made).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List

from ..arith import Analyzer
from ..arith.linear import key
from ..ir import (And, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Range,
                  Stmt, Var, collect, is_const_int, replace_stmts, substitute,
                  transform)
from .regions import loop_ranges, merge_regions, var_offset
from .scope import Site, is_param, names_buffer, remove, scope_of, site_of, sites
from .state import BlockRV, ScheduleError, ScheduleState, traced


def _merged_reads(reads, buf, moved, ana) -> tuple:
    """``reads`` with ``buf``'s region replaced by the ``moved`` ones, merged per buffer, in
    order of first appearance. Only the buffers ``moved`` names are merged again; the others
    keep their regions as they are (a concat of a recurrent net's 100 steps reads 100 buffers:
    re-bounding all of them at each of its 100 inlines made compute_inline quadratic)."""
    replaced = [rg for old in reads for rg in (moved if old.buffer is buf else [old])]
    others = [old for old in reads if old.buffer is not buf]
    if len({id(old.buffer) for old in others}) != len(others):   # (not merged yet: merge all)
        return merge_regions(replaced, ana)
    touched = {id(rg.buffer) for rg in moved}
    again = {id(rg.buffer): rg for rg in merge_regions(
        [old for old in others if id(old.buffer) in touched] + list(moved), ana)}
    out, seen = [], set()
    for rg in replaced:
        if id(rg.buffer) not in seen:
            seen.add(id(rg.buffer))
            out.append(again.get(id(rg.buffer), rg))
    return tuple(out)


class InlinePrimitives:
    """Mixed into ``kiln.Schedule``."""

    @traced
    def compute_inline(self: ScheduleState, block: BlockRV) -> None:
        """Inline the producer ``block`` into its consumers: each read of the buffer it writes
        becomes the block's expression at that index; the block, and the buffer's allocation
        once unused, disappear. The consumers' ``reads`` are recomputed.

        The block must be spatial (no reduction, no init), its body one store
        ``B[v0, v1, ...] = expr`` indexed by its iterators (each once), and ``B`` an
        intermediate buffer, not a parameter.

        Before ``compute_inline(b)``::

            @T.prim_func
            def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                B = T.alloc_buffer((8,), "float32")
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        T.reads(A[vi])
                        T.writes(B[vi])
                        B[vi] = A[vi] * 2.0
                for i in range(8):
                    with T.block("C"):
                        vi = T.axis.spatial(8, i)
                        T.reads(B[vi])
                        T.writes(C[vi])
                        C[vi] = B[vi] + 1.0

        After::

            @T.prim_func
            def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("C"):
                        vi = T.axis.spatial(8, i)
                        T.reads(A[vi])
                        T.writes(C[vi])
                        C[vi] = A[vi] * 2.0 + 1.0

        Raises ``ScheduleError`` if the block is a reduction, its body is not a single store
        indexed by its iterators, it writes a parameter (an output) or a buffer that another
        block also writes, or a block between it and a consumer writes one of its inputs.
        """
        r, parents = self._realize(block)
        blk, name = r.block, r.block.name_hint
        if blk.is_reduction or blk.init is not None:
            raise ScheduleError(f"compute_inline: block '{name}' is a reduction block; only "
                                "spatial blocks can be inlined", r)
        store = _single_store(blk, "compute_inline")
        buf = store.buffer
        if is_param(self.func, buf):
            raise ScheduleError(f"compute_inline: block '{name}' writes buffer '{buf.name}', a "
                                "parameter (output) of the function; only a block that writes an "
                                "intermediate buffer can be inlined", r)
        ivs = [iv.var for iv in blk.iter_vars]
        ids = [id(i) for i in store.indices]
        if not (all(isinstance(i, Var) for i in store.indices) and len(set(ids)) == len(ids)
                and set(ids) == {id(v) for v in ivs}):
            raise ScheduleError(f"compute_inline: block '{name}' stores to "
                                f"{_show(buf, store.indices)}; the indices must be the block's "
                                "iterators, each exactly once, so that every element read can be "
                                "recomputed", r)
        if any(ld.buffer is buf for ld in collect(store.value, BufferLoad)):
            raise ScheduleError(f"compute_inline: block '{name}' reads buffer '{buf.name}' that it "
                                "writes", r)
        scope, _ = scope_of(parents)
        all_sites = sites(scope)
        me = site_of(all_sites, r)
        _only_writer(all_sites, me, buf, "compute_inline")
        consumers = [s for s in all_sites if s is not me and id(buf) in s.reads()]
        for c in consumers:
            _check_between(all_sites, me, c, me.reads(), set(), "compute_inline")
            _check_not_in_place(me, c, "compute_inline")

        def inline(n):
            if isinstance(n, BufferLoad) and n.buffer is buf:
                return substitute(store.value, dict(zip(store.indices, n.indices)))
            return None
        new = {}
        for c in consumers:
            b = transform(c.block, post=inline)
            # The consumer now reads what the producer read, at the indices it loaded B at.
            ana = Analyzer({iv.var: iv.dom for iv in b.iter_vars})
            moved = [_subst_region(rg, dict(zip(store.indices, ld.indices)))
                     for ld in collect(c.block, BufferLoad) if ld.buffer is buf for rg in blk.reads]
            reads = _merged_reads(b.reads, buf, moved, ana)
            new[id(c.realize)] = dataclasses.replace(c.realize,
                                                     block=dataclasses.replace(b, reads=reads))
        body = replace_stmts(scope.body, new, {id(a) for c in consumers for a in c.ancestors})
        self._replace(scope, _drop_alloc(scope, remove(body, r), buf))

    @traced
    def reverse_compute_inline(self: ScheduleState, block: BlockRV) -> None:
        """Inline the consumer ``block`` into its producer: the producer stores the consumer's
        result (with the producer's value in place of the loads) straight into the consumer's
        output; the consumer, and the intermediate buffer once unused, disappear.

        The consumer must be spatial with a single store, read exactly one buffer written by
        another block, always at the same index, and that index must be a one-to-one map of
        its iterators: each dimension one iterator plus an offset, every iterator used
        (``B[vi, vj + 1]``, not ``B[vi, 0]`` or ``B[vi + vj]``). The producer must be spatial
        with a single store, the buffer's only writer, and the consumer its only reader.
        Where the consumer's domain is smaller than what the producer writes, the producer's
        block gets a predicate.

        Before ``reverse_compute_inline(c)``::

            @T.prim_func
            def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                B = T.alloc_buffer((8,), "float32")
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        T.reads(A[vi])
                        T.writes(B[vi])
                        B[vi] = A[vi] * 2.0
                for i in range(8):
                    with T.block("C"):
                        vi = T.axis.spatial(8, i)
                        T.reads(B[vi])
                        T.writes(C[vi])
                        C[vi] = B[vi] + 1.0

        After::

            @T.prim_func
            def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i)
                        T.reads(A[vi])
                        T.writes(C[vi])
                        C[vi] = A[vi] * 2.0 + 1.0

        Raises ``ScheduleError`` if any of the conditions above fails, or if a block between
        the producer and the consumer writes another input of the consumer or uses its output.
        """
        r, parents = self._realize(block)
        blk, name = r.block, r.block.name_hint
        if blk.is_reduction or blk.init is not None:
            raise ScheduleError(f"reverse_compute_inline: block '{name}' is a reduction block; "
                                "only spatial blocks can be inlined", r)
        store = _single_store(blk, "reverse_compute_inline")
        scope, _ = scope_of(parents)
        all_sites = sites(scope)
        me = site_of(all_sites, r)
        loaded: Dict[int, Buffer] = {id(ld.buffer): ld.buffer for ld in collect(store, BufferLoad)}
        produced = [b for k, b in loaded.items()
                    if any(k in s.writes() for s in all_sites if s is not me)]
        if len(produced) != 1:
            names = ", ".join(f"'{b.name}'" for b in produced) or "none"
            raise ScheduleError(f"reverse_compute_inline: block '{name}' must read exactly one "
                                f"buffer written by another block; it reads {names}", r)
        buf = produced[0]
        producer = _only_writer(all_sites, me, buf, "reverse_compute_inline", exclude_self=True)
        if is_param(self.func, buf):
            raise ScheduleError(f"reverse_compute_inline: buffer '{buf.name}' is a parameter "
                                "(output) of the function, so it must still be written", r)
        others = [s.name for s in all_sites if s not in (me, producer) and id(buf) in s.reads()]
        if others:
            raise ScheduleError(f"reverse_compute_inline: buffer '{buf.name}' is also read by "
                                f"block(s) {', '.join(others)}; block '{name}' must be its only "
                                "reader", r)
        pblk = producer.block
        if pblk.is_reduction or pblk.init is not None:
            raise ScheduleError(f"reverse_compute_inline: producer '{pblk.name_hint}' is a "
                                "reduction block; its values are final only after the reduction",
                                producer.realize)
        pstore = _single_store(pblk, "reverse_compute_inline")
        loads = [ld for ld in collect(store, BufferLoad) if ld.buffer is buf]
        if len({key(ld.indices) for ld in loads}) != 1:
            raise ScheduleError(f"reverse_compute_inline: block '{name}' reads buffer '{buf.name}' "
                                "at several indices; it must read one element per iteration", r)
        index = loads[0].indices
        ana = Analyzer({iv.var: iv.dom for iv in blk.iter_vars})
        matches = [var_offset(e, blk.iter_vars, ana) for e in index]
        used = [id(m[0]) for m in matches if m is not None]
        if (None in matches or len(set(used)) != len(used)
                or set(used) != {id(iv) for iv in blk.iter_vars}):
            raise ScheduleError(f"reverse_compute_inline: block '{name}' reads "
                                f"{_show(buf, index)}, which is not a one-to-one map of its "
                                "iterators (each index must be one iterator plus an offset, and "
                                "every iterator must be used)", r)
        _check_between(all_sites, producer, me, me.reads() - {id(buf)}, me.writes(),
                       "reverse_compute_inline")
        _check_not_in_place(producer, me, "reverse_compute_inline")

        # Consumer iterator v = (producer's index u) - offset, in the producer's iterators.
        pana = Analyzer({iv.var: iv.dom for iv in pblk.iter_vars})
        vmap = {iv.var: pana.simplify(u - c) for (iv, c), u in zip(matches, pstore.indices)}

        def rewrite(n):
            if isinstance(n, BufferLoad) and n.buffer is buf:
                return pstore.value
            return vmap.get(n) if isinstance(n, Var) else None
        new_store = transform(store, post=rewrite)
        # The producer keeps its reads, adds the consumer's other reads and takes over its
        # writes, all with the consumer's iterators expressed in its own.
        moved = [_subst_region(rg, vmap) for rg in blk.reads if rg.buffer is not buf]
        new_blk = dataclasses.replace(
            pblk, body=new_store, reads=merge_regions(list(pblk.reads) + moved, pana),
            writes=merge_regions([_subst_region(rg, vmap) for rg in blk.writes], pana))
        pred = producer.realize.predicate
        # The producer may make elements the consumer never used: skip those iterations.
        bind = {iv.var: v for iv, v in zip(pblk.iter_vars, producer.realize.iter_values)}
        for iv in blk.iter_vars:
            v = vmap[iv.var]
            for cond in (v >= iv.dom.min, v < iv.dom.min + iv.dom.extent):
                if not pana.can_prove(cond):
                    c = substitute(cond, bind)
                    pred = c if is_const_int(pred, 1) else And(pred, c)
        new_p = BlockRealize(producer.realize.iter_values, Analyzer(
            loop_ranges(producer.loops)).simplify(pred), new_blk)
        body = replace_stmts(scope.body, {id(producer.realize): new_p},
                             {id(a) for a in producer.ancestors})
        self._replace(scope, _drop_alloc(scope, remove(body, r), buf))


# ---- helpers -------------------------------------------------------------------------------
def _single_store(blk: Block, primitive: str) -> BufferStore:
    if not isinstance(blk.body, BufferStore):
        n = len(collect(blk.body, BufferStore))
        raise ScheduleError(f"{primitive}: block '{blk.name_hint}' must have a single store as its "
                            f"body; it has {type(blk.body).__name__} with {n} store(s)", blk)
    return blk.body


def _only_writer(all_sites: List[Site], me: Site, buf: Buffer, primitive: str,
                 exclude_self: bool = False) -> Site:
    writers = [s for s in all_sites if id(buf) in s.writes() and not (exclude_self and s is me)]
    if len(writers) != 1:
        raise ScheduleError(f"{primitive}: buffer '{buf.name}' is written by blocks "
                            f"{', '.join(s.name for s in writers)}; it must have a single writer",
                            me.realize)
    return writers[0]


def _check_between(all_sites: List[Site], first: Site, last: Site, inputs: set, outputs: set,
                   primitive: str) -> None:
    """Inlining moves a computation from ``first``'s place to ``last``'s or back: no block in
    between may write ``inputs`` or use ``outputs``."""
    a, b = all_sites.index(first), all_sites.index(last)
    for s in all_sites[min(a, b) + 1:max(a, b)]:
        if s.writes() & inputs or (s.reads() | s.writes()) & outputs:
            raise ScheduleError(f"{primitive}: block '{s.name}', between '{first.name}' and "
                                f"'{last.name}', uses a buffer the inlined computation reads or "
                                "writes; inlining would change what it sees", s.realize)


def _check_not_in_place(producer: Site, consumer: Site, primitive: str) -> None:
    """After inlining, one block computes both; if the consumer overwrote an input of the
    producer, elements would be read after being overwritten."""
    clash = producer.reads() & consumer.writes()
    if clash:
        buf = next(st.buffer for st in collect(consumer.block, BufferStore)
                   if id(st.buffer) in clash)
        raise ScheduleError(f"{primitive}: block '{consumer.name}' writes buffer '{buf.name}', "
                            f"which block '{producer.name}' reads; merged into one block, it "
                            "could read elements already overwritten", consumer.realize)


def _drop_alloc(scope: Block, body: Stmt, buf: Buffer) -> Block:
    """``scope`` with ``body``, no longer allocating ``buf`` if nothing uses it."""
    allocs = scope.alloc_buffers
    if any(b is buf for b in allocs) and not names_buffer(body, buf):
        allocs = tuple(b for b in allocs if b is not buf)
    return dataclasses.replace(scope, body=body, alloc_buffers=allocs)


def _subst_region(rg: BufferRegion, vmap) -> BufferRegion:
    return BufferRegion(rg.buffer, tuple(Range(substitute(r.min, vmap), substitute(r.extent, vmap))
                                         for r in rg.region))


def _show(buf: Buffer, indices) -> str:
    parts = []
    for e in indices:
        try:
            parts.append(e.script())
        except Exception:  # printing is for the message only
            parts.append(getattr(e, "name", type(e).__name__))
    return f"{buf.name}[{', '.join(parts)}]"
