"""Accumulators kept in a small buffer across a reduction loop: ``promote_accumulators``.

A matmul whose K runs in chunks (``schedule_tile``, decision ``kc``) accumulates each row
tile into a scratch buffer that spans every row of its column block, across the chunks::

    for k_0 in range(2):                                  # chunks of K
        for i0_0, k_1_0 in T.grid(32, 384):               # row tiles, the chunk's steps
            for k_1_1 in T.unroll(2):
                for i0_1 in T.unroll(6):
                    for i1_1 in T.vectorized(64):
                        C_local[i0_0 * 6 + i0_1, i1_1] = C_local[i0_0 * 6 + i0_1, i1_1] + ...

Inside the ``k_1_0`` loop the tile's 6 x 64 accumulators are the same elements on every
iteration, and LLVM was left to keep them in registers. Sometimes it did not: ViT's 197 x
1536 x 384 product stored every accumulator every step, 3x slower (bench/RESULTS.md,
"Session 24"). So this pass does it itself: the region such a loop reads and writes (the same
at every iteration) is copied into a buffer of its own size before the loop and back after
it, and the loop uses that copy; with constant indices after unrolling, it lives in registers::

    C_local_acc = T.alloc_buffer((6, 64), scope="local")
    for i0_1 in T.unroll(6):  for j in T.vectorized(64):  C_local_acc[i0_1, j] = C_local[...]
    for k_1_0 in range(384): ... C_local_acc[i0_1, i1_1] = C_local_acc[i0_1, i1_1] + ...
    for i0_1 in T.unroll(6):  for j in T.vectorized(64):  C_local[...] = C_local_acc[i0_1, j]

Only a serial loop of more than one iteration, a scratch buffer (allocated by a block, not a
parameter) that the loop both reads and writes, every access free of the loop's
variable, no access under an ``if`` (a guarded tile's rows may not exist), a region of
constant size at most ``MOST_ELEMENTS`` and smaller than the buffer (a buffer that is already
the tile is left to SROA). Runs after ``partition_loops``, so that the guard-free loop of a
partitioned tile qualifies.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ..arith import Analyzer
from ..ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, IfThenElse, IntImm,
                  PrimFunc, Var, is_const_int, post_order_visit, transform, uses_var)
from ..ir import dtype as dt
from ..ir.stmt import seq
from ..schedule.regions import bound, free_of, loop_ranges
from .compact import _accesses

# The largest region promoted: 24 AVX-512 vectors of accumulators (a 6 x 64 tile) and room.
MOST_ELEMENTS = 512


def promote_accumulators(func: PrimFunc) -> PrimFunc:
    """The pass (module docstring)."""
    root = func.body
    if not isinstance(root, BlockRealize):
        return func
    scratch: List[Buffer] = list(root.block.alloc_buffers)
    post_order_visit(root.block.body, lambda n: scratch.extend(n.alloc_buffers)
                     if isinstance(n, Block) else None)
    if not scratch:
        return func
    # (a loop inside a vectorized loop is lowered lane by lane: no copy loops go there)
    in_vector = set()
    post_order_visit(root.block.body, lambda n: post_order_visit(
        n.body, lambda m: in_vector.add(id(m)) if isinstance(m, For) else None)
        if isinstance(n, For) and n.kind == "vectorized" else None)

    def post(n):
        if not isinstance(n, For) or n.kind != "serial" or is_const_int(n.extent, 1) \
                or id(n) in in_vector:
            return None
        regions = [(buf, r) for buf in scratch if (r := _region(n, buf)) is not None]
        return _promoted(n, regions) if regions else None
    body = transform(root.block.body, post)
    if body is root.block.body:
        return func
    block = root.block
    return func.with_body(BlockRealize(root.iter_values, root.predicate, Block(
        block.name_hint, block.iter_vars, block.reads, block.writes, body, block.init,
        block.alloc_buffers, block.annotations)))


def _promoted(loop: For, regions) -> BlockRealize:
    """``loop`` working on a copy of each ``(buffer, (starts, extents))`` region: a block
    that allocates the copies, copies in, runs the loop, copies out."""
    ana = Analyzer()
    copies = {}
    for buf, (lows, extents) in regions:
        acc = Buffer(f"{buf.name}_acc", tuple(IntImm(e, "int32") for e in extents), buf.dtype,
                     "local")
        copies[buf] = (acc, lows, extents)

    def swap(n):
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer in copies:
            acc, lows, _ = copies[n.buffer]
            local = tuple(ana.simplify(i - lo) for i, lo in zip(n.indices, lows))
            if isinstance(n, BufferLoad):
                return BufferLoad(acc, local)
            return BufferStore(acc, n.value, local)
        return None
    body = For(loop.loop_var, loop.min, loop.extent, loop.kind, transform(loop.body, swap),
               loop.thread_binding, loop.annotations)
    for buf, (acc, lows, extents) in copies.items():
        def at(js, lows=lows):
            return tuple(lo + j for lo, j in zip(lows, js))
        copy_in = _copy(extents, lambda js: BufferStore(acc, BufferLoad(buf, at(js)), js), "in")
        copy_out = _copy(extents, lambda js: BufferStore(buf, BufferLoad(acc, js), at(js)), "out")
        body = seq(copy_in, body, copy_out)
    accs = tuple(acc for acc, _, _ in copies.values())
    scope = Block("_".join(a.name for a in accs) + "_scope", (), (), (), body, None, accs)
    return BlockRealize((), IntImm(1, "bool"), scope)


def _region(loop: For, buf: Buffer) -> Optional[Tuple[List, List[int]]]:
    """(the start of each dimension, its constant extent) of ``buf``'s region that ``loop``
    reads and writes, the same on every iteration; None when the loop does not both read and
    write it, an index uses the loop's variable, an access is under an ``if``, the accesses'
    regions differ, or the region is not constant, not smaller than the buffer, or more than
    ``MOST_ELEMENTS``."""
    accesses = _accesses(loop.body, buf)
    if not accesses or dt.bits(buf.dtype) < 8 or not _stores(loop.body, buf) \
            or _guarded(loop.body, buf):
        return None
    ana = Analyzer()
    bounds = None
    for indices, loops in accesses:
        if any(uses_var(i, loop.loop_var) for i in indices):
            return None
        relax = loop_ranges(loops)
        here = []
        for idx in indices:
            lo, hi = bound(ana.simplify(idx), relax)
            if lo is None or not free_of(lo, relax) or not free_of(hi, relax):
                return None
            here.append((ana.simplify(lo), ana.simplify(hi)))
        if bounds is None:
            bounds = here
        elif not all(is_const_int(ana.simplify(a - b), 0)
                     for now, first in zip(here, bounds) for a, b in zip(now, first)):
            return None
    extents = [ana.simplify(hi - lo + 1) for lo, hi in bounds]
    if not all(isinstance(e, IntImm) and e.value >= 1 for e in extents):
        return None
    size = math.prod(e.value for e in extents)
    full = math.prod(d.value for d in buf.shape) if all(isinstance(d, IntImm) for d in buf.shape) \
        else None
    if size > MOST_ELEMENTS or (full is not None and size >= full):
        return None
    return [lo for lo, _ in bounds], [e.value for e in extents]


def _stores(body, buf: Buffer) -> bool:
    found = []
    post_order_visit(body, lambda n: found.append(n)
                     if isinstance(n, BufferStore) and n.buffer is buf else None)
    return bool(found)


def _guarded(body, buf: Buffer) -> bool:
    """Whether an access to ``buf`` sits under an ``if`` inside ``body``."""
    hit = []
    post_order_visit(body, lambda n: hit.append(n)
                     if isinstance(n, IfThenElse) and _accesses(n, buf) else None)
    return bool(hit)


def _copy(extents: List[int], store, tag: str):
    """A loop nest over ``extents`` (the last vectorized, the others unrolled) around
    ``store(indices)``."""
    js = tuple(Var(f"acc_{tag}{d}") for d in range(len(extents)))
    body = store(js)
    for d in reversed(range(len(extents))):
        kind = "vectorized" if d == len(extents) - 1 else "unrolled"
        body = For(js[d], IntImm(0, js[d].dtype), IntImm(extents[d], js[d].dtype), kind, body)
    return body
