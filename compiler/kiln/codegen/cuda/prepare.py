"""Lowering of a scheduled tensor program for the GPU, before LLVM: ``lower_for_cuda``.

It is the CPU lowering (``kiln.lower``: opaque blocks, buffer compaction, loop partitioning,
simplification) with two GPU-specific steps:

* ``compact_shared_buffers`` runs first. A ``cache_read(..., "shared")`` buffer is one buffer
  for all the threads of a block, so its region is taken over every ``threadIdx`` loop
  (relaxed, like the loops inside the allocation point) and only the loops outside the threads
  and ``blockIdx`` loops fix it. The CPU compaction would give each thread its own slice, and
  threads would then overwrite one another's data in the one shared array.
* ``insert_barriers`` runs last: a statement that writes a shared buffer that a sibling
  statement reads gets a barrier (``__syncthreads``) before it (the previous iteration's
  readers are done) and after it (its data is complete before anyone reads).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from ...arith import Analyzer, simplify_stmt
from ...ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, IfThenElse, IntImm,
                   PrimFunc, SeqStmt, Stmt, post_order_visit, transform)
from ...lower.blocks import opaque_blocks
from ...lower.compact import compact_buffers
from ...lower.loop_partition import partition_loops
from ...lower.select_partition import partition_selects
# The CPU compaction's region analysis, reused with the thread loops relaxed (see module doc).
from ...lower.compact import _accesses, _common_loops, _disjoint_iterations, _plan
from ..errors import CodegenError

SHARED = "shared"


def is_thread_loop(loop: For) -> bool:
    """A loop bound to ``threadIdx.x/y/z``."""
    return loop.kind == "thread_binding" and loop.thread_binding.startswith("threadIdx")


class Barrier(Stmt):
    """``__syncthreads()``: every thread of the block waits here. Made only by
    ``insert_barriers``, after every IR pass, and lowered by the CUDA kernel lowering."""

    __slots__ = ()

    def __repr__(self):
        return "Barrier()"


def lower_for_cuda(func: PrimFunc) -> PrimFunc:
    """The lowering passes for the GPU, in order (see the module docstring); the result may
    hold ``Barrier`` statements, which only the CUDA codegen understands."""
    func = compact_shared_buffers(opaque_blocks(func))
    func = partition_selects(partition_loops(compact_buffers(func)))
    func = func.with_body(simplify_stmt(func.body))
    return func.with_body(insert_barriers(func.body))


def _reordered(loops: Tuple[For, ...]) -> Tuple[For, ...]:
    """The loops around an access with the thread loops moved innermost, so that ``_plan``
    (which relaxes the loops inside the allocation point) relaxes them too."""
    return tuple(f for f in loops if not is_thread_loop(f)) + tuple(f for f in loops if is_thread_loop(f))


def compact_shared_buffers(func: PrimFunc) -> PrimFunc:
    """Allocate each root ``shared`` buffer inside the innermost loop outside the threads that
    encloses all its uses, shrunk to the region one block touches in one iteration of it."""
    root_realize = func.body
    if not isinstance(root_realize, BlockRealize):
        return func
    root = root_realize.block
    plans: Dict[int, Tuple[Buffer, List]] = {}
    by_loop: Dict[int, List[Buffer]] = {}
    keep = []
    for buf in root.alloc_buffers:
        if buf.scope != SHARED:
            keep.append(buf)
            continue
        acc = [(idx, _reordered(loops)) for idx, loops in _accesses(root.body, buf)]
        common = [f for f in (_common_loops(acc) if acc else ()) if not is_thread_loop(f)]
        plan = None
        for lca in reversed(common):
            plan = _plan(buf, acc, lca)
            if plan is None or _disjoint_iterations(lca, plan[0].shape, plan[1]):
                break
            plan = None
        if plan is None and common:
            lca = common[0]
            plan = (buf, [IntImm(0, "int64")] * buf.ndim)   # the whole buffer, per block
        if plan is None:
            raise CodegenError(f"shared buffer '{buf.name}' is used outside every blockIdx loop; "
                               "a shared buffer belongs to one thread block")
        plans[id(buf)] = plan
        by_loop.setdefault(id(lca.loop_var), []).append(plan[0])

    def shifted(buf, indices):
        ana = Analyzer()
        return tuple(ana.simplify(i - o) for i, o in zip(indices, plans[id(buf)][1]))

    def post(n):
        if isinstance(n, BufferLoad) and id(n.buffer) in plans:
            return BufferLoad(plans[id(n.buffer)][0], shifted(n.buffer, n.indices))
        if isinstance(n, BufferStore) and id(n.buffer) in plans:
            return BufferStore(plans[id(n.buffer)][0], n.value, shifted(n.buffer, n.indices))
        if isinstance(n, For) and id(n.loop_var) in by_loop:
            bufs = tuple(by_loop[id(n.loop_var)])
            scope = BlockRealize((), IntImm(1, "bool"), Block(
                "_".join(b.name for b in bufs) + "_scope", (), (), (), n.body, None, bufs))
            return For(n.loop_var, n.min, n.extent, n.kind, scope, n.thread_binding, n.annotations)
        return None

    if not plans:
        return func
    body = transform(root.body, post)
    new_root = Block(root.name_hint, root.iter_vars, root.reads, root.writes, body, root.init,
                     tuple(keep), root.annotations)
    return func.with_body(BlockRealize(root_realize.iter_values, root_realize.predicate, new_root))


def _shared_use(stmt: Stmt) -> Tuple[set, set]:
    """(shared buffers written, shared buffers read) anywhere in ``stmt``."""
    written, read = set(), set()

    def visit(n):
        if isinstance(n, BufferStore) and n.buffer.scope == SHARED:
            written.add(n.buffer)
        elif isinstance(n, BufferLoad) and n.buffer.scope == SHARED:
            read.add(n.buffer)
    post_order_visit(stmt, visit)
    return written, read


def insert_barriers(stmt: Stmt) -> Stmt:
    """Barriers around each statement of a sequence that writes a shared buffer another
    statement of the sequence reads (see the module docstring)."""
    def rec(s):
        if isinstance(s, SeqStmt):
            kids = [rec(x) for x in s.seq]
            uses = [_shared_use(x) for x in kids]
            out: List[Stmt] = []
            for k, (x, (w, _)) in enumerate(zip(kids, uses)):
                others_read = set().union(*(r for j, (_, r) in enumerate(uses) if j != k))
                sync = bool(w & others_read)
                if sync and not (out and isinstance(out[-1], Barrier)):
                    out.append(Barrier())
                out.append(x)
                if sync:
                    out.append(Barrier())
            return SeqStmt(tuple(out))
        if isinstance(s, For):
            return For(s.loop_var, s.min, s.extent, s.kind, rec(s.body), s.thread_binding,
                       s.annotations)
        if isinstance(s, BlockRealize):
            b = s.block
            return BlockRealize(s.iter_values, s.predicate, Block(
                b.name_hint, b.iter_vars, b.reads, b.writes, rec(b.body),
                None if b.init is None else rec(b.init), b.alloc_buffers, b.annotations))
        if isinstance(s, IfThenElse):
            return IfThenElse(s.condition, rec(s.then_case),
                              None if s.else_case is None else rec(s.else_case))
        return s
    return rec(stmt)

