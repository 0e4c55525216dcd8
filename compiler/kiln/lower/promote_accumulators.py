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

from typing import List, Optional, Tuple

from ..arith import Analyzer
from ..ir import dtype as dt
from ..ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, IfThenElse, IntImm,
                  PrimFunc, Var, post_order_visit, transform, uses_var)
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
    scratch: List[Buffer] = []
    post_order_visit(root.block.body, lambda n: scratch.extend(n.alloc_buffers)
                     if isinstance(n, Block) else None)
    scratch.extend(root.block.alloc_buffers)
    if not scratch:
        return func

    # (a loop inside a vectorized loop is lowered lane by lane: no copy loops go there)
    in_vector = set()

    def mark(n):
        if isinstance(n, For) and n.kind == "vectorized":
            post_order_visit(n.body, lambda m: in_vector.add(id(m)) if isinstance(m, For) else None)
    post_order_visit(root.block.body, mark)

    def post(n):
        if not isinstance(n, For) or n.kind != "serial" or _is_one(n.extent) \
                or id(n) in in_vector:
            return None
        out = n
        for buf in scratch:
            promoted = _promote(out, buf)
            if promoted is not None:
                out = promoted
        return None if out is n else out
    body = transform(root.block.body, post)
    if body is root.block.body:
        return func
    block = root.block
    return func.with_body(BlockRealize(root.iter_values, root.predicate, Block(
        block.name_hint, block.iter_vars, block.reads, block.writes, body, block.init,
        block.alloc_buffers, block.annotations)))


def _is_one(e) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def _promote(loop, buf: Buffer):
    """``loop`` (or what replaced it: a block around it) with ``buf``'s region promoted, or
    None when the pattern does not hold."""
    inner = loop if isinstance(loop, For) else _the_loop(loop)
    if inner is None:
        return None
    accesses = _accesses(inner.body, buf)
    if not accesses or _guarded(inner.body, buf):
        return None
    if not _is_store(inner.body, buf):
        return None
    region = _region(inner, accesses)
    if region is None:
        return None
    lows, extents = region
    size = 1
    for e in extents:
        size *= e
    full = 1
    for d in buf.shape:
        if not isinstance(d, IntImm):
            full = None
            break
        full *= d.value
    if size > MOST_ELEMENTS or (full is not None and size >= full) or dt.bits(buf.dtype) < 8:
        return None
    acc = Buffer(f"{buf.name}_acc", tuple(IntImm(e, "int32") for e in extents), buf.dtype, "local")
    ana = Analyzer()

    def local(indices):
        return tuple(ana.simplify(i - lo) for i, lo in zip(indices, lows))

    def swap(n):
        if isinstance(n, BufferLoad) and n.buffer is buf:
            return BufferLoad(acc, local(n.indices))
        if isinstance(n, BufferStore) and n.buffer is buf:
            return BufferStore(acc, n.value, local(n.indices))
        return None
    new_loop = For(inner.loop_var, inner.min, inner.extent, inner.kind, transform(inner.body, swap),
                   inner.thread_binding, inner.annotations)
    copy_in = _copy(extents, lambda js: BufferStore(acc, BufferLoad(buf, tuple(
        lo + j for lo, j in zip(lows, js))), tuple(js)), "in")
    copy_out = _copy(extents, lambda js: BufferStore(buf, BufferLoad(acc, tuple(js)), tuple(
        lo + j for lo, j in zip(lows, js))), "out")
    body = seq(copy_in, new_loop, copy_out)
    scope = Block(f"{acc.name}_scope", (), (), (), body, None, (acc,))
    new = BlockRealize((), IntImm(1, "bool"), scope)
    return new if loop is inner else _replace_loop(loop, inner, new)


def _the_loop(stmt) -> Optional[For]:
    """The loop a previous promotion wrapped (its scope block's body: copy in, loop, copy out)."""
    if isinstance(stmt, BlockRealize):
        for s in getattr(stmt.block.body, "seq", ()):
            if isinstance(s, For) and s.kind == "serial":
                return s
    return None


def _replace_loop(stmt, old: For, new):
    return transform(stmt, lambda n: new if n is old else None)


def _is_store(body, buf: Buffer) -> bool:
    found = []
    post_order_visit(body, lambda n: found.append(n) if isinstance(n, BufferStore) and n.buffer is buf
                     else None)
    return bool(found)


def _guarded(body, buf: Buffer) -> bool:
    """Whether an access to ``buf`` sits under an ``if`` inside ``body``."""
    hit = []

    def visit(n):
        if isinstance(n, IfThenElse) and _accesses(n, buf):
            hit.append(n)
    post_order_visit(body, visit)
    return bool(hit)


def _region(loop: For, accesses) -> Optional[Tuple[List, List[int]]]:
    """(the start of each dimension, its constant extent) of what every iteration of ``loop``
    touches, or None: an index that uses the loop's variable, starts that differ between
    accesses, or an extent that is not a constant."""
    v = loop.loop_var
    lows, highs = None, None
    ana = Analyzer()
    for indices, loops in accesses:
        if any(uses_var(i, v) for i in indices):
            return None
        inner = [f for f in loops if f is not loop]
        relax = loop_ranges(inner)
        lo_hi = []
        for idx in indices:
            lo, hi = bound(ana.simplify(idx), relax)
            if lo is None or not free_of(lo, relax) or not free_of(hi, relax):
                return None
            lo_hi.append((ana.simplify(lo), ana.simplify(hi)))
        if lows is None:
            lows, highs = [lo for lo, _ in lo_hi], [hi for _, hi in lo_hi]
            continue
        for d, (lo, hi) in enumerate(lo_hi):
            if not isinstance(ana.simplify(lo - lows[d]), IntImm) or \
                    ana.simplify(lo - lows[d]).value != 0 or \
                    not isinstance(ana.simplify(hi - highs[d]), IntImm) or \
                    ana.simplify(hi - highs[d]).value != 0:
                return None
    extents = []
    for lo, hi in zip(lows, highs):
        e = ana.simplify(hi - lo + 1)
        if not isinstance(e, IntImm) or e.value < 1:
            return None
        extents.append(e.value)
    return lows, extents


def _copy(extents: List[int], store, tag: str):
    """A loop nest over ``extents`` (the last vectorized, the others unrolled) around
    ``store(indices)``."""
    js = [Var(f"acc_{tag}{d}") for d in range(len(extents))]
    body = store(js)
    for d in reversed(range(len(extents))):
        kind = "vectorized" if d == len(extents) - 1 else "unrolled"
        body = For(js[d], IntImm(0, js[d].dtype), IntImm(extents[d], js[d].dtype), kind, body)
    return body

