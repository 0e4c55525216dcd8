"""Vectorized loops: real SIMD code generated directly, not left to LLVM's judgement.

A ``vectorized`` loop is strip-mined by the target's natural lane count for the widest element
type it touches (8 float32 lanes with AVX2, 16 with AVX-512, 4 with NEON), and its body is
lowered once per chunk with the loop variable bound to ``Affine(chunk_start, 1)``. Buffer
accesses then become (see ``lower_expr``): contiguous vector loads/stores (stride 1), scalar
loads splatted (stride 0, loop-invariant) or gathers/scatters (anything else). Conditions that
vary across lanes (block predicates, if/else) become lane masks: masked loads/stores, and a
region whose mask has no active lane is skipped. A constant extent that is not a multiple of
the lane count ends in one narrower vector chunk; a symbolic extent ends in a masked chunk.

This applies to data-parallel bodies. When a body is not (a vectorized reduction iterator, a
store to a loop-invariant address, a buffer read and written at different indices, a nested
parallel/vectorized loop, or scratch allocation inside), the loop is emitted as a scalar loop
carrying ``llvm.loop.vectorize.enable`` (and ``unroll.disable``) so LLVM's loop vectorizer (which checks dependences
itself, and may reassociate reductions because vectorization was requested) takes it on; a
note is recorded on the compiled module.
"""
from __future__ import annotations

import math

from typing import Optional

from ..ir import dtype as dt
from ..ir.expr import Buffer, BufferLoad, Node, Var
from ..ir.functor import node_fields, pre_order_visit
from ..ir.stmt import BlockRealize, BufferStore, For
from . import cgutils as cg
from .lower_expr import Affine, VecState

# With a constant extent, up to this many full chunks are emitted inline (constant offsets, so
# scratch accumulators stay promotable to registers); more become a loop over chunks.
MAX_INLINE_CHUNKS = 4
# Loop hints for the fallback: ask LLVM's loop vectorizer to vectorize (which also lets it
# reassociate a reduction), and keep the loop from being fully unrolled before the vectorizer
# runs (full unrolling comes first in the pipeline and would leave it nothing to vectorize).
FALLBACK_HINTS = {"llvm.loop.vectorize.enable": True, "llvm.loop.unroll.disable": None}


def _vars_in(node) -> set:
    out = set()
    pre_order_visit(node, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out


def why_not_direct(loop: For) -> Optional[str]:
    """Why the body of ``loop`` cannot be vectorized lane-parallel (None if it can)."""
    dep = {loop.loop_var}
    stores, loads = [], []
    problem = []

    def visit(n):
        if problem:
            return False
        if isinstance(n, For):
            if n.kind not in ("serial", "unrolled"):
                problem.append(f"it contains a {n.kind} loop '{n.loop_var.name}'")
            elif (_vars_in(n.min) | _vars_in(n.extent)) & dep:
                problem.append(f"the bounds of inner loop '{n.loop_var.name}' vary with it")
        elif isinstance(n, BlockRealize):
            for iv, value in zip(n.block.iter_vars, n.iter_values):
                if _vars_in(value) & dep:
                    if iv.kind == "reduce":
                        problem.append(f"reduction iterator '{iv.var.name}' of block "
                                       f"'{n.block.name_hint}' varies with it")
                    dep.add(iv.var)
            if n.block.alloc_buffers:
                problem.append(f"block '{n.block.name_hint}' allocates buffers inside it")
        elif isinstance(n, BufferStore):
            stores.append(n)
        elif isinstance(n, BufferLoad):
            loads.append(n)
        return None

    pre_order_visit(loop.body, visit)
    if problem:
        return problem[0]
    for s in stores:
        if not set().union(*[_vars_in(i) for i in s.indices]) & dep:
            return f"it stores to '{s.buffer.name}' at an index that does not vary with it"
    for s in stores:
        for other in stores + loads:
            if other.buffer is s.buffer and not _same(other.indices, s.indices):
                return (f"it accesses '{s.buffer.name}' at different indices, which may carry a "
                        "dependence between iterations")
    return None


def _same(a, b) -> bool:
    """Identical expressions: same structure and the very same variables and buffers (unlike
    structural equality, which matches variables up to renaming)."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (Var, Buffer)):
        return a is b
    if isinstance(a, Node):
        return type(a) is type(b) and all(_same(getattr(a, f), getattr(b, f)) for f in node_fields(type(a)))
    return type(a) is type(b) and a == b


def natural_lanes(fl, loop: For) -> int:
    """Lanes per vector for the widest element type the loop body loads or stores."""
    widest = 8
    for n in _accesses(loop.body):
        widest = max(widest, dt.bits(n.buffer.dtype))
    return fl.m.target.lanes(widest)


def _accesses(body):
    out = []
    pre_order_visit(body, lambda n: out.append(n) if isinstance(n, (BufferLoad, BufferStore)) else None)
    return out


def lower_vectorized(fl, loop: For) -> None:
    """Lower a ``vectorized`` loop (see the module docstring)."""
    reason = fl.m.memo("why_not_direct", loop, why_not_direct)
    if reason is not None:
        fl.m.notes.append(f"{fl.label}: loop '{loop.loop_var.name}' left to LLVM's loop vectorizer "
                          f"because {reason}")
        return fl.serial_loop(loop, hints=FALLBACK_HINTS)
    b = fl.b
    lanes = fl.m.memo("natural_lanes", loop, lambda n: natural_lanes(fl, n))
    lo = fl.scalar_index(loop.min)
    ext = fl.scalar_index(loop.extent)
    n = cg.constant_int(ext)

    lo_const = cg.constant_int(lo)

    def chunk(start, width, mask=None, align=1):
        saved = fl.vec
        fl.vec = VecState(width, mask) if width > 1 else None
        fl.vars[loop.loop_var] = Affine(start, 1, align) if width > 1 else start
        fl.stmt(loop.body)
        fl.vec = saved
        fl.vars.pop(loop.loop_var, None)

    def at(offset):
        return fl._iarith("add", lo, offset if not isinstance(offset, int) else cg.I64(offset), "int32")

    if n is not None:
        if n <= 0:
            return
        width = min(lanes, n)
        full, rem = divmod(n, width)
        if full <= MAX_INLINE_CHUNKS:
            for c in range(full):
                chunk(at(c * width), width)
        else:
            with cg.for_range(b, cg.I64(0), cg.I64(full), name=loop.loop_var.name + ".vec") as c:
                chunk(at(b.mul(c, cg.I64(width), flags=("nsw",))), width,
                      align=_start_align(lo_const, width))
        if rem:
            chunk(at(full * width), rem)
        return
    full = b.sdiv(ext, cg.I64(lanes))
    with cg.for_range(b, cg.I64(0), full, name=loop.loop_var.name + ".vec") as c:
        chunk(at(b.mul(c, cg.I64(lanes), flags=("nsw",))), lanes,
              align=_start_align(lo_const, lanes))
    done = b.mul(full, cg.I64(lanes), flags=("nsw",))
    rem = b.sub(ext, done)
    with b.if_then(b.icmp_signed(">", rem, cg.I64(0))):
        mask = b.icmp_signed("<", cg.iota(cg.I64, lanes), cg.broadcast(b, rem, lanes))
        chunk(at(done), lanes, mask, align=_start_align(lo_const, lanes))


def _start_align(lo: Optional[int], width: int) -> int:
    """What a chunk's first index (the loop's start ``lo`` plus a multiple of ``width``) is
    known to be a multiple of: ``gcd(lo, width)`` (``width`` from 0), 1 for a symbolic start."""
    return 1 if lo is None else math.gcd(lo, width)


def masked_region(fl, cond, body) -> None:
    """Run ``body()`` with the lane mask narrowed by the i1 vector ``cond``; skip it when no lane
    is active (which also makes loop-invariant loads inside it safe: some active lane would
    have performed them). At the outermost level, a chunk whose lanes are all active runs an
    unmasked copy of the body: masked loads/stores cost more than plain ones, and a split loop's
    tail predicate is true everywhere but in its last chunk."""
    b = fl.b
    saved = fl.vec
    mask = cond if saved.mask is None else b.and_(saved.mask, cond)

    def masked():
        with b.if_then(cg.call_intrinsic(b, "llvm.vector.reduce.or", mask, ret=cg.I1)):
            fl.vec = VecState(saved.lanes, mask)
            body()
            fl.vec = saved

    if saved.mask is not None:
        return masked()
    with b.if_else(cg.call_intrinsic(b, "llvm.vector.reduce.and", mask, ret=cg.I1)) as (full, partial):
        with full:
            body()
        with partial:
            masked()
