"""``cache_read`` and ``cache_write``: stage a buffer through a copy in another storage scope.

The copy is a new buffer of the same shape allocated in the scope's block (for a whole
function, its root block) and a new block that copies the region the cached block touches,
relaxed over all of its loops. ``compute_at`` / ``reverse_compute_at`` then move the copy
block next to its use and shrink it to a tile.
"""
from __future__ import annotations

import dataclasses
from typing import List

from ..arith import Analyzer
from ..ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For,
                  IntImm, IterVar, Range, Var, collect, is_const_int, replace_stmts,
                  substitute_buffers)
from .regions import Bound, hull, intersect, loop_ranges, relax_region, to_range
from .scope import (Site, block_names, buffer_names, insert, position, scope_of, site_of, sites,
                    stmts_of, unique_name)
from .state import BlockRV, ScheduleError, ScheduleState, traced


class CachePrimitives:
    """Mixed into ``kiln.Schedule``."""

    @traced
    def cache_read(self: ScheduleState, block: BlockRV, read_buffer_index: int,
                   storage_scope: str) -> BlockRV:
        """Read the ``read_buffer_index``-th buffer of ``block``'s reads through a copy in
        ``storage_scope``; returns the new copy block.

        The copy buffer and block are both named ``<buffer>_<scope>``. The copy block copies
        the region that the readers of the buffer read, over all their loops, and is placed
        right before the first reader at the scope's top level; every reader then reads the
        copy. The buffer must not be written again after that point.

        Before ``cache_read(b, 0, "local")`` with ``b = get_block("B")``::

            @T.prim_func
            def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
                for i in range(4):
                    for j in range(8):
                        with T.block("B"):
                            vi = T.axis.spatial(4, i)
                            vj = T.axis.spatial(8, j)
                            T.reads(A[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * 2.0

        After::

            @T.prim_func
            def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
                A_local = T.alloc_buffer((4, 8), "float32", scope="local")
                for ax0 in range(4):
                    for ax1 in range(8):
                        with T.block("A_local"):
                            v0 = T.axis.spatial(4, ax0)
                            v1 = T.axis.spatial(8, ax1)
                            T.reads(A[v0, v1])
                            T.writes(A_local[v0, v1])
                            A_local[v0, v1] = A[v0, v1]
                for i in range(4):
                    for j in range(8):
                        with T.block("B"):
                            vi = T.axis.spatial(4, i)
                            vj = T.axis.spatial(8, j)
                            T.reads(A_local[vi, vj])
                            T.writes(B[vi, vj])
                            B[vi, vj] = A_local[vi, vj] * 2.0

        Raises ``ScheduleError`` if the index is out of range, the scope is not a string, or
        the buffer is written at or after the first reader (the copy would go stale).
        """
        r, parents = self._realize(block)
        buf = _region_at(r.block, "reads", read_buffer_index, "cache_read").buffer
        _check_scope(storage_scope, "cache_read")
        scope, _ = scope_of(parents)
        all_sites = sites(scope)
        readers = [s for s in all_sites if id(buf) in s.reads()]
        pos = position(scope.body, readers[0])
        stmts = stmts_of(scope.body)
        for s in all_sites:
            if id(buf) in s.writes() and any(s.realize is x or s.under(x) for x in stmts[pos:]):
                raise ScheduleError(
                    f"cache_read: buffer '{buf.name}' is written by block '{s.name}' at or after "
                    f"its first reader '{readers[0].name}'; a copy made before that reader would "
                    "miss those writes", scope)

        ana = Analyzer()
        region = None
        for s in readers:
            b = _touched(s, buf, s.block.reads)
            region = b if region is None else [hull(x, y, ana) for x, y in zip(region, b)]
        cache = Buffer(unique_name(f"{buf.name}_{storage_scope}", buffer_names(self.func)),
                       buf.shape, buf.dtype, storage_scope)
        name = unique_name(f"{buf.name}_{storage_scope}", block_names(self.func))
        copy = _copy_nest(name, buf, cache, _clamp(region, buf, ana), ana)

        # Every reader reads the copy from now on.
        redirected = {id(s.realize): dataclasses.replace(
            s.realize, block=substitute_buffers(s.block, {buf: cache})) for s in readers}
        body = replace_stmts(scope.body, redirected, {id(a) for s in readers for a in s.ancestors})
        body = insert(body, pos, copy)
        self._replace(scope, dataclasses.replace(scope, body=body,
                                                 alloc_buffers=scope.alloc_buffers + (cache,)))
        return BlockRV(name)

    @traced
    def cache_write(self: ScheduleState, block: BlockRV, write_buffer_index: int,
                    storage_scope: str) -> BlockRV:
        """Make ``block`` write its ``write_buffer_index``-th output into a new buffer in
        ``storage_scope`` and add a block that copies it back; returns the copy-back block.

        The new buffer and the copy-back block are both named ``<buffer>_<scope>``; the block
        keeps its name (and ``init``, now also writing the new buffer). The copy-back block
        copies the region ``block`` writes over all its loops and runs right after ``block``'s
        loop nest at the scope's top level.

        Before ``cache_write(c, 0, "local")`` with ``c = get_block("C")``::

            @T.prim_func
            def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
                     C: T.Buffer((4, 4), "float32")):
                for i in range(4):
                    for j in range(4):
                        for k in range(4):
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
                C_local = T.alloc_buffer((4, 4), "float32", scope="local")
                for i in range(4):
                    for j in range(4):
                        for k in range(4):
                            with T.block("C"):
                                vi = T.axis.spatial(4, i)
                                vj = T.axis.spatial(4, j)
                                vk = T.axis.reduce(4, k)
                                T.reads(A[vi, vk], B[vk, vj])
                                T.writes(C_local[vi, vj])
                                with T.init():
                                    C_local[vi, vj] = 0.0
                                C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]
                for ax0 in range(4):
                    for ax1 in range(4):
                        with T.block("C_local"):
                            v0 = T.axis.spatial(4, ax0)
                            v1 = T.axis.spatial(4, ax1)
                            T.reads(C_local[v0, v1])
                            T.writes(C[v0, v1])
                            C[v0, v1] = C_local[v0, v1]

        Raises ``ScheduleError`` if the index is out of range, the scope is not a string,
        another block in the same loop nest uses the buffer (the copy back would come too
        late for it), or the block reads the buffer without an ``init`` (the new buffer would
        be read before anything was written to it).
        """
        r, parents = self._realize(block)
        written = _region_at(r.block, "writes", write_buffer_index, "cache_write")
        buf = written.buffer
        _check_scope(storage_scope, "cache_write")
        scope, _ = scope_of(parents)
        all_sites = sites(scope)
        me = site_of(all_sites, r)
        pos = position(scope.body, me)
        nest = stmts_of(scope.body)[pos]
        for s in all_sites:
            if s is not me and (s.realize is nest or s.under(nest)) \
                    and id(buf) in (s.reads() | s.writes()):
                raise ScheduleError(
                    f"cache_write: block '{s.name}' in the loop nest of block '{me.name}' also "
                    f"uses buffer '{buf.name}'; the copy back after the nest would come too late "
                    "for it", nest)
        loads = collect(r.block.body, BufferLoad)
        if r.block.init is None and any(ld.buffer is buf for ld in loads):
            raise ScheduleError(
                f"cache_write: block '{me.name}' reads buffer '{buf.name}' that it writes and has "
                "no init; the cache would be read before anything was written to it", r)

        ana = Analyzer()
        region = _clamp(_touched(me, buf, r.block.writes), buf, ana)
        cache = Buffer(unique_name(f"{buf.name}_{storage_scope}", buffer_names(self.func)),
                       buf.shape, buf.dtype, storage_scope)
        name = unique_name(f"{buf.name}_{storage_scope}", block_names(self.func))
        copy = _copy_nest(name, cache, buf, region, ana)
        new_r = dataclasses.replace(r, block=substitute_buffers(r.block, {buf: cache}))
        body = replace_stmts(scope.body, {id(r): new_r}, {id(a) for a in me.ancestors})
        body = insert(body, pos + 1, copy)
        self._replace(scope, dataclasses.replace(scope, body=body,
                                                 alloc_buffers=scope.alloc_buffers + (cache,)))
        return BlockRV(name)


# ---- helpers -------------------------------------------------------------------------------
def _region_at(block: Block, field: str, index, primitive: str) -> BufferRegion:
    regions = getattr(block, field)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(regions):
        names = ", ".join(f"{k}: '{br.buffer.name}'" for k, br in enumerate(regions)) or "none"
        raise ScheduleError(f"{primitive}: block '{block.name_hint}' has no {field[:-1]} buffer "
                            f"{index!r}; its {field} are {names}", block)
    return regions[index]


def _check_scope(storage_scope, primitive: str) -> None:
    if not isinstance(storage_scope, str) or not storage_scope.isidentifier():
        raise ScheduleError(f"{primitive}: storage scope must be a name such as 'local' or "
                            f"'global', got {storage_scope!r}")


def _touched(site: Site, buf: Buffer, regions) -> List[Bound]:
    """The part of ``buf`` that ``regions`` (of ``site``'s block) touch over all the loops
    around the block; the whole buffer if no region names it."""
    ranges = loop_ranges(site.loops)
    ana = Analyzer(ranges)
    bindings = {iv.var: v for iv, v in zip(site.block.iter_vars, site.realize.iter_values)}
    out: List[Bound] = []
    for br in regions:
        if br.buffer is buf:
            b = relax_region(br, bindings, ranges, ana)
            out = b if not out else [hull(x, y, ana) for x, y in zip(out, b)]
    return out or [(IntImm(0, s.dtype), s - 1) for s in buf.shape]


def _clamp(region: List[Bound], buf: Buffer, ana: Analyzer) -> List[Bound]:
    """Keep a copied region inside the buffer: a guarded read (padding) may reach past it."""
    return [intersect(b, (IntImm(0, s.dtype), ana.simplify(s - 1)), ana)
            for b, s in zip(region, buf.shape)]


def _copy_nest(name: str, src: Buffer, dst: Buffer, region: List[Bound], ana: Analyzer):
    """``for ax...: dst[v] = src[v]`` over ``region``, as a loop nest around a new block."""
    loop_vars, values, ivs = [], [], []
    for d, (b, extent) in enumerate(zip(region, src.shape)):
        rng = to_range(b, ana)
        ax = Var(f"ax{d}", extent.dtype)
        loop_vars.append((ax, rng.extent))
        values.append(ax if is_const_int(rng.min, 0) else ana.simplify(rng.min + ax))
        ivs.append(IterVar(Var(f"v{d}", extent.dtype), Range.from_extent(extent), "spatial"))
    idx = tuple(iv.var for iv in ivs)
    block = Block(name, tuple(ivs), reads=(BufferRegion.point(src, idx),),
                  writes=(BufferRegion.point(dst, idx),), body=BufferStore(dst, src[idx], idx))
    stmt = BlockRealize(tuple(values), True, block)
    for ax, extent in reversed(loop_vars):
        stmt = For(ax, IntImm(0, ax.dtype), extent, "serial", stmt)
    return stmt
