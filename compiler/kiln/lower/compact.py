"""Shrink scratch buffers to what one iteration of their innermost enclosing loop touches:
``compact_buffers``.

A scratch buffer of the root block (from ``cache_write``, ``cache_read`` or ``te``) that every
access reaches only through loop L is re-allocated inside L's body with the extents of the
region one iteration of L touches, and its indices are shifted by that region's start::

    C_local = T.alloc_buffer((1024, 1024))        for i_0 ...:
    for i_0 ...:                            =>        with T.block("C_local"):
        ... C_local[i_0 * 4 + i_1, j] ...                 C_local = T.alloc_buffer((4, 16))
                                                          ... C_local[i_1, j - j_0 * 16] ...

It runs on opaque blocks (indices in loop variables). A buffer whose region is not of constant
size, or is used at the root level, is left as it is.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..arith import Analyzer
from ..ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, For, IfThenElse,
                  IntImm, PrimFunc, Range, collect, SeqStmt, Stmt, Var, is_const_int, transform, uses_var)
from ..ir.expr import Add, FloorDiv, FloorMod, Mul, Sub
from ..schedule.regions import bound, free_of, loop_ranges


def _accesses(stmt: Stmt, buf: Buffer) -> List[Tuple[Tuple, Tuple[For, ...]]]:
    """Every load/store of ``buf`` under ``stmt``: (indices, loops around it, outermost first)."""
    out = []

    def expr_loads(e, loops):
        def visit(n):
            if isinstance(n, BufferLoad) and n.buffer is buf:
                out.append((n.indices, loops))
        from ..ir import post_order_visit
        post_order_visit(e, visit)

    def rec(s, loops):
        if isinstance(s, For):
            expr_loads(s.min, loops), expr_loads(s.extent, loops)
            rec(s.body, loops + (s,))
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                rec(x, loops)
        elif isinstance(s, IfThenElse):
            expr_loads(s.condition, loops)
            rec(s.then_case, loops)
            if s.else_case is not None:
                rec(s.else_case, loops)
        elif isinstance(s, BlockRealize):
            rec(s.block.body, loops)
        elif isinstance(s, BufferStore):
            if s.buffer is buf:
                out.append((s.indices, loops))
            expr_loads(s.value, loops)
            for i in s.indices:
                expr_loads(i, loops)
        else:
            from ..ir import Evaluate
            if isinstance(s, Evaluate):
                expr_loads(s.value, loops)
    rec(stmt, ())
    return out


def _common_loops(accesses) -> Sequence[For]:
    """The loops enclosing every access, outermost first."""
    prefix: Sequence[For] = accesses[0][1]
    for _, loops in accesses[1:]:
        n = 0
        while n < min(len(prefix), len(loops)) and prefix[n] is loops[n]:
            n += 1
        prefix = prefix[:n]
    return prefix


def _disjoint_iterations(loop: For, extents, offsets) -> bool:
    """True if different iterations of ``loop`` touch disjoint regions, so that no value flows
    from one iteration to the next and a fresh buffer per iteration is correct."""
    if isinstance(loop.extent, IntImm) and loop.extent.value == 1:
        return True
    ana = Analyzer()
    v = loop.loop_var
    from ..ir import substitute
    for ext, off in zip(extents, offsets):
        step = ana.simplify(substitute(off, {v: v + 1}) - off)
        if isinstance(step, IntImm) and abs(step.value) >= ext.value:
            return True
    return _distinct_points(loop, extents, offsets)


def _written_first(loop: For, buf: Buffer, extents, offsets) -> bool:
    """True if each iteration of ``loop`` writes the whole region it touches before reading
    any of it, so that no value flows between iterations even where their regions overlap:
    the first statement of the body that touches ``buf`` only stores, and its stores cover
    the region. A producer computed at the loop (``compute_at``) whose consumers' windows
    overlap (a fused Winograd conv's padded input rows: 6 rows a tile row, 4 apart)."""
    first, stores = next(((st, acc) for st in _body_statements(loop.body)
                          for acc in [_accesses(st, buf)] if acc), (None, None))
    # (a guarded store may leave part of the region unwritten)
    if first is None or any(ld.buffer is buf for ld in collect(first, BufferLoad)) \
            or collect(first, IfThenElse) or any(
                not (isinstance(r.predicate, IntImm) and r.predicate.value)
                for r in collect(first, BlockRealize)):
        return False
    ana = Analyzer()
    for indices, loops in stores:
        relax = loop_ranges(loops)
        for idx, ext, off in zip(indices, extents, offsets):
            lo, hi = bound(ana.simplify(idx), relax)
            if lo is None or hi is None:
                return False
            below = ana.simplify(lo - off)
            above = ana.simplify(hi - (off + ext - 1))
            if not (isinstance(below, IntImm) and below.value <= 0
                    and isinstance(above, IntImm) and above.value >= 0):
                return False
    return True


def _body_statements(stmt: Stmt) -> List[Stmt]:
    """The statements of a loop body in order, through the blocks that wrap them."""
    while isinstance(stmt, BlockRealize):
        stmt = stmt.block.body
    return list(stmt.seq) if isinstance(stmt, SeqStmt) else [stmt]


# The most iterations ``_distinct_points`` enumerates.
ENUMERATE_MOST = 1 << 16


def _distinct_points(loop: For, extents, offsets) -> bool:
    """True if, over every iteration of ``loop`` (enumerated), the regions start at multiples
    of their extents in the dimensions that move with it and no two iterations share those
    starts: a fused loop (``n_y_ob_fused``) indexes a tile by ``fused % 16`` and ``fused //
    16``, neither of which steps past the tile alone."""
    v = loop.loop_var
    moving = [d for d, off in enumerate(offsets) if uses_var(off, v)]
    n = getattr(loop.extent, "value", None)
    if not moving or n is None or n > ENUMERATE_MOST or not is_const_int(loop.min, 0):
        return False
    ks = np.arange(n, dtype=np.int64)
    keys = []
    for d in moving:
        starts = _values(offsets[d], v, ks)
        if starts is None or np.any(starts % extents[d].value):
            return False
        keys.append(starts // extents[d].value)
    return len(set(zip(*(k.tolist() for k in keys)))) == n


_NUMPY_OPS = {Add: np.add, Sub: np.subtract, Mul: np.multiply, FloorDiv: np.floor_divide,
              FloorMod: np.mod}


def _values(e, v: Var, ks: np.ndarray):
    """``e`` at ``v`` = each of ``ks`` (numpy, floor division as the IR's), or None when ``e``
    holds anything but integer constants, ``v`` and ``+ - * // %``."""
    if e is v:
        return ks
    if isinstance(e, IntImm):
        return np.full_like(ks, e.value)
    op = _NUMPY_OPS.get(type(e))
    if op is None:
        return None
    a, b = _values(e.a, v, ks), _values(e.b, v, ks)
    if a is None or b is None or (type(e) in (FloorDiv, FloorMod) and np.any(b == 0)):
        return None
    return op(a, b)


def _plan(buf: Buffer, accesses, lca: For) -> Optional[Tuple[Buffer, List]]:
    """The compacted buffer and per-dimension offsets, or None if not worth/possible."""
    lo_hi: List[Optional[Tuple]] = [None] * buf.ndim
    for indices, loops in accesses:
        k = next(n for n, f in enumerate(loops) if f is lca)
        outer, inner = loops[:k + 1], loops[k + 1:]
        ana = Analyzer()
        for f in outer:
            ana.bind(f.loop_var, Range(f.min, f.extent))
        relax = loop_ranges(inner)
        for d, idx in enumerate(indices):
            lo, hi = bound(ana.simplify(idx), relax)
            if lo is None or not free_of(lo, relax) or not free_of(hi, relax):
                return None
            lo, hi = ana.simplify(lo), ana.simplify(hi)
            if lo_hi[d] is None:
                lo_hi[d] = (lo, hi, ana)
                continue
            # Different accesses must share the start, up to a constant (then take the min).
            lo0, hi0, _ = lo_hi[d]
            shift = ana.simplify(lo - lo0)
            top = ana.simplify(hi - hi0)
            if not isinstance(shift, IntImm) or not isinstance(top, IntImm):
                return None
            lo_hi[d] = (lo if shift.value < 0 else lo0, hi if top.value > 0 else hi0, ana)
    extents, offsets = [], []
    for (lo, hi, ana), full in zip(lo_hi, buf.shape):
        ext = ana.simplify(hi - lo + 1)
        if not isinstance(ext, IntImm):
            return None
        if isinstance(full, IntImm) and ext.value >= full.value:
            ext, lo = full, IntImm(0, full.dtype)
        extents.append(ext)
        offsets.append(lo)
    if all(isinstance(e, IntImm) and isinstance(f, IntImm) and e.value == f.value
           for e, f in zip(extents, buf.shape)):
        return None
    return Buffer(buf.name, tuple(extents), buf.dtype, buf.scope), offsets


def compact_buffers(func: PrimFunc) -> PrimFunc:
    """Allocate each root scratch buffer inside its innermost enclosing loop, shrunk to the
    region one iteration touches. Expects opaque blocks (see ``opaque_blocks``)."""
    root_realize = func.body
    if not isinstance(root_realize, BlockRealize):
        return func
    root = root_realize.block
    keep: List[Buffer] = []
    plans: Dict[int, Tuple[Buffer, Buffer, List, For]] = {}
    for buf in root.alloc_buffers:
        acc = _accesses(root.body, buf)
        plan = None
        # From the innermost common loop outwards, the first where iterations are independent.
        for lca in reversed(_common_loops(acc) if acc else ()):
            plan = _plan(buf, acc, lca)
            if plan is None:
                break
            if _disjoint_iterations(lca, plan[0].shape, plan[1]) or \
                    _written_first(lca, buf, plan[0].shape, plan[1]):
                break
            plan = None
        if plan is None:
            keep.append(buf)
        else:
            plans[id(buf)] = (buf, plan[0], plan[1], lca)
    if not plans:
        return func

    by_loop: Dict[int, List[Buffer]] = {}
    for old, new, _, lca in plans.values():
        by_loop.setdefault(id(lca.loop_var), []).append(new)

    def shifted(buf_id, indices):
        _, _, offsets, _ = plans[buf_id]
        ana = Analyzer()
        return tuple(ana.simplify(i - o) for i, o in zip(indices, offsets))

    def post(n):
        if isinstance(n, BufferLoad) and id(n.buffer) in plans:
            return BufferLoad(plans[id(n.buffer)][1], shifted(id(n.buffer), n.indices))
        if isinstance(n, BufferStore) and id(n.buffer) in plans:
            return BufferStore(plans[id(n.buffer)][1], n.value, shifted(id(n.buffer), n.indices))
        if isinstance(n, BufferRegion) and id(n.buffer) in plans:
            # (The reads and writes of a block that stays, e.g. one without iterators.)
            mins = shifted(id(n.buffer), [r.min for r in n.region])
            return BufferRegion(plans[id(n.buffer)][1],
                                tuple(Range(m, r.extent) for m, r in zip(mins, n.region)))
        if isinstance(n, For) and id(n.loop_var) in by_loop:
            bufs = tuple(by_loop[id(n.loop_var)])
            scope = BlockRealize((), IntImm(1, "bool"), Block(
                "_".join(b.name for b in bufs) + "_scope", (), (), (), n.body, None, bufs))
            return For(n.loop_var, n.min, n.extent, n.kind, scope, n.thread_binding, n.annotations)
        return None

    body = transform(root.body, post)
    new_root = Block(root.name_hint, root.iter_vars, root.reads, root.writes, body, root.init,
                     tuple(keep), root.annotations)
    return func.with_body(BlockRealize(root_realize.iter_values, root_realize.predicate, new_root))


_ = Var  # (kept for readers: offsets are expressions of loop Vars)
