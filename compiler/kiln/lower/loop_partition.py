"""Split a loop where the guards under it start to fail: ``partition_loops``.

``split`` of a loop whose extent is symbolic (or not a multiple of the factors) guards every
block under it with ``offset < n``. In a register tile that guard sits inside the reduction
loop, around every multiply-add: branches in the hottest loop, and accumulators that cannot
stay in registers. Every iteration but the last of the tile loop passes all its guards, so the
loop splits in two, the first part without the guards::

    for i_0 in range((n + 3) // 4):               for i_0 in range(n // 4):
        for k in range(256):                          for k in range(256):
            for i_1 in T.unroll(4):                       for i_1 in T.unroll(4):
                if i_0 * 4 + i_1 < n:        =>                S
                    S                             for i_0_t in range(n // 4, (n + 3) // 4):
                                                      ... if i_0_t * 4 + i_1 < n: S ...

A guard qualifies when it is a conjunction of ``lhs < rhs`` whose difference grows by a
positive constant ``s`` per iteration of the loop: with ``r`` the rest of ``lhs - rhs`` and
``hi`` its upper bound over the inner loops, it holds for every ``v < (s - 1 - hi) // s``.

A loop fused from an outer loop and a tile loop of ``E`` iterations (a batch of products times
their column panels, one parallel loop) finds its tile as ``v % E``; a guard on the tile steps
with ``v % E``, not ``v``, and the body becomes ``if v % E < P: <guard-free> else: <guarded>``
(``_partition_modulo``). One that finds its tile as ``v // E`` (column panels outside row
blocks) branches on ``v < P * E``; when only the last panel is ragged, its code is specialised
to that panel (``v // E`` replaced by the constant), so that its inner loops split at constant
points (``_partition_blocks``).

When the extent is symbolic, the tail's guards on a scratch buffer (a register tile's
accumulators) go too (``_clamped``): with ``R = n - i_0_t * 4`` rows left, the tile computes all
its rows, those past ``R`` from row ``R - 1``'s inputs (``A[i_0_t * 4 + min(i_1, R - 1), k]``,
so every read stays in bounds), and only the stores out of the scratch keep their guards. The
tile then keeps its accumulators in registers; a guarded one does not (a 16-token prompt's
matmuls, 6-row tiles: the 4-row tail took 2.7 times a full tile with its guards, and one tile
without them). The tail is wrapped in ``if R >= 1`` (its loop's range implies it, which the
analyzer cannot show): below that, the guards would skip every store.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..arith import Analyzer
from ..ir import (GE, And, Block, BlockRealize, BufferLoad, BufferStore, Evaluate, For, IfThenElse,
                  IntImm, LT, Max, Min, PrimExpr, Range, SeqStmt, Stmt, Var, collect, substitute,
                  transform)
from ..ir.expr import FloorDiv, FloorMod, conjuncts, is_const_int
from ..schedule.regions import bound, free_of, loop_ranges


def _stepping(c: PrimExpr, v: Var, ana: Analyzer):
    """For ``c`` = ``lhs < rhs`` whose ``lhs - rhs`` grows by a positive constant ``s`` per step
    of ``v``: (s, the rest ``lhs - rhs - s * v``, free of ``v``); else None."""
    if not isinstance(c, LT):
        return None
    d = ana.simplify(c.a - c.b)
    step = ana.simplify(substitute(d, {v: v + 1}) - d)
    if not isinstance(step, IntImm) or step.value <= 0:
        return None
    rest = ana.simplify(d - step * v)
    return (step, rest) if free_of(rest, [v]) else None


def _holds_below(cond: PrimExpr, v: Var, inner: List[For], ana: Analyzer):
    """(P, rest) such that the conjuncts of ``cond`` that depend on ``v`` hold for every
    ``v < P`` and every value of the ``inner`` loops' variables, and ``rest`` (a list) is the
    conjuncts free of ``v`` (a guard of another loop: a tile's rows, when ``v`` walks its
    columns), which stay; or None if a conjunct on ``v`` is not of that form or none is."""
    parts, rest_conds = [], []
    for c in conjuncts(cond):
        if free_of(c, [v]):
            rest_conds.append(c)
            continue
        stepping = _stepping(c, v, ana)
        if stepping is None:
            return None
        step, rest = stepping
        relax = loop_ranges(inner)
        _, hi = bound(rest, relax)
        if hi is None or not free_of(hi, list(relax)) or not free_of(hi, [v]):
            return None
        s = IntImm(step.value, v.dtype)
        parts.append(ana.simplify((s - IntImm(1, v.dtype) - hi) // s))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = Min(out, p)
    return out, rest_conds


def _guards(body: Stmt, v: Var, ana: Analyzer):
    """(IfThenElse, P, the conjuncts that stay, the loops between ``body`` and it) for each
    qualifying guard under ``body``."""
    found = []

    def rec(s, inner):
        if isinstance(s, For):
            rec(s.body, inner + [s])
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                rec(x, inner)
        elif isinstance(s, BlockRealize):
            rec(s.block.body, inner)
        elif isinstance(s, IfThenElse):
            p = _holds_below(s.condition, v, inner, ana) if s.else_case is None else None
            if p is not None:
                found.append((s, p[0], p[1], inner))
            else:
                rec(s.then_case, inner)
                if s.else_case is not None:
                    rec(s.else_case, inner)
    rec(body, [])
    return found


def _analyzer(sizes: List[Var]) -> Analyzer:
    """An analyzer that knows the function's symbolic sizes are >= 0 (they are dimensions)."""
    ana = Analyzer()
    for s in sizes:
        ana.bind(s, Range(IntImm(0, s.dtype), IntImm(2 ** 31 - 1, s.dtype)))
    return ana


def _split_point(guards, extent: PrimExpr, ana: Analyzer) -> PrimExpr:
    """The iteration below which every guard of ``guards`` (``_guards``) holds, in [0, extent]."""
    split = guards[0][1]
    for _, p, _, _ in guards[1:]:
        split = Min(split, p)
    return ana.simplify(Max(Min(split, extent), IntImm(0, extent.dtype)))


def _guard_free(body: Stmt, guards) -> Stmt:
    """``body`` with each of ``guards`` (``_guards``) reduced to the conjuncts that stay (those
    on other loops), or gone when none do: the code for the iterations where they hold."""
    kept = {id(g): rest for g, _, rest, _ in guards}

    def drop(n):
        if not isinstance(n, IfThenElse) or id(n) not in kept:
            return None
        rest = kept[id(n)]
        if not rest:
            return n.then_case
        cond = rest[0]
        for c in rest[1:]:
            cond = And(cond, c)
        return IfThenElse(cond, n.then_case, None)
    return transform(body, drop)


def _partition(loop: For, sizes: List[Var]) -> Optional[Tuple[Stmt, bool]]:
    """(``loop`` as a guard-free head loop and a guarded tail loop (a parallel loop: one loop
    whose body is ``if v < split: <guard-free> else: <guarded>``), whether that tail is
    specialised to constants (``_partition_blocks``)), or None."""
    if not is_const_int(loop.min, 0):
        return None
    v = loop.loop_var
    ana = _analyzer(sizes)
    guards = _guards(loop.body, v, ana)
    if not guards:
        modulo = _partition_modulo(loop, ana)
        return (modulo, False) if modulo is not None else _partition_blocks(loop, ana)
    zero = IntImm(0, v.dtype)
    split = _split_point(guards, loop.extent, ana)
    if is_const_int(split, 0):
        return None
    head_body = _guard_free(loop.body, guards)
    if loop.kind == "parallel" or loop.thread_binding is not None:
        # One parallel loop whose body picks the guard-free code for the iterations it holds
        # for, not a head loop and a tail loop: each parallel loop is a fork-join, and a tail of
        # a few tasks would run on one thread while the others wait.
        return For(v, loop.min, loop.extent, loop.kind,
                   IfThenElse(LT(v, split), head_body, _clamped(loop.body, v, guards, ana, sizes)),
                   loop.thread_binding, loop.annotations), False
    head = For(v, zero, split, loop.kind, head_body, loop.thread_binding, loop.annotations)
    rest = ana.simplify(loop.extent - split)
    if is_const_int(rest, 0):
        return head, False
    tv = Var(f"{v.name}_t", v.dtype)
    tail_body = substitute(_clamped(loop.body, v, guards, ana, sizes), {v: tv})
    tail = For(tv, split, rest, loop.kind, tail_body, loop.thread_binding, loop.annotations)
    return SeqStmt((head, tail)), False


def _tile_guards(loop: For, op, ana: Analyzer):
    """For a loop whose body finds its tile as ``op(v, E)`` (``FloorMod`` or ``FloorDiv``, one
    constant ``E``): (E, the body with that tile as a variable ``w``, ``w``, the guards that
    step with ``w``), or None when there is no such tile or no such guard."""
    v = loop.loop_var
    divisors = {n.b.value for n in collect(loop.body, op)
                if n.a is v and isinstance(n.b, IntImm) and n.b.value > 1}
    if len(divisors) != 1:
        return None
    e = IntImm(divisors.pop(), v.dtype)
    w = Var(f"{v.name}_tile", v.dtype)
    body = transform(loop.body, lambda n: w if isinstance(n, op) and n.a is v
                     and is_const_int(n.b, e.value) else None)
    guards = _guards(body, w, ana)
    return (e, w, body, guards) if guards else None


def _partition_modulo(loop: For, ana: Analyzer) -> Optional[Stmt]:
    """A loop fused from an outer loop and a tile loop of ``E`` iterations (a batch of products
    x their column panels, run as one parallel loop) finds its tile as ``v % E``, and a guard on
    that tile (a ragged last panel) does not step with ``v``. With ``w = v % E`` the guard does
    step: ``for v: if w < P: <guard-free> else: <guarded>``, or None. Left guarded, the one
    ragged panel kept every tile's accumulators out of registers: Swin-T's window QKV
    projection (64 x 49 x 96 by 96 x 288, panels of 64) ran at 43 GFLOP/s, 154 with the
    batch flattened."""
    v = loop.loop_var
    tile = _tile_guards(loop, FloorMod, ana)
    if tile is None:
        return None
    e, w, body, guards = tile
    split = _split_point(guards, e, ana)
    if not isinstance(split, IntImm) or split.value in (0, e.value):
        return None
    head = substitute(_guard_free(body, guards), {w: FloorMod(v, e)})
    return For(v, loop.min, loop.extent, loop.kind,
               IfThenElse(LT(FloorMod(v, e), split), head, loop.body),
               loop.thread_binding, loop.annotations)


def _partition_blocks(loop: For, ana: Analyzer) -> Optional[Tuple[Stmt, bool]]:
    """A loop fused from a tile loop of ``B`` iterations outside an inner loop of ``E`` (column
    panels x row blocks, one parallel loop) finds its tile as ``v // E``. With ``w = v // E``
    the guard steps: ``for v: if v < P * E: <guard-free> else: <guarded>``, or None. When the
    tail is the last tile alone (``P = B - 1``), its code has ``w`` replaced by ``P``: a ragged
    last panel's guards become constant (``128 + i < 144``), and the tail's inner loops split
    at constant points (``partition_loops`` partitions it like the head). Left guarded,
    the ragged panel made every tile's column loop of symbolic length: Conformer's FFN output
    product (100 x 576 by 576 x 144, panels of 64) ran at 30 GFLOP/s on Zen 4, its accumulators
    in memory and the last panel's lanes gathered."""
    v = loop.loop_var
    tile = _tile_guards(loop, FloorDiv, ana) if isinstance(loop.extent, IntImm) else None
    if tile is None:
        return None
    e, w, body, guards = tile
    tiles = -(-loop.extent.value // e.value)
    split = _split_point(guards, IntImm(tiles, v.dtype), ana)
    if not isinstance(split, IntImm) or split.value in (0, tiles):
        return None
    head = substitute(_guard_free(body, guards), {w: FloorDiv(v, e)})
    specialised = split.value == tiles - 1
    tail = substitute(body, {w: split}) if specialised else loop.body
    return For(v, loop.min, loop.extent, loop.kind,
               IfThenElse(LT(v, IntImm(split.value * e.value, v.dtype)), head, tail),
               loop.thread_binding, loop.annotations), specialised


def _rows_left(cond: PrimExpr, v: Var, inner: List[For], ana: Analyzer):
    """For a guard whose conjuncts on ``v`` each read ``s * v + u + off < 0``, with ``u`` the
    variable of one of the ``inner`` loops (from 0, of extent ``s``) and ``off`` free of them:
    (R, the conjuncts, each one's ``u`` or None if it is not on ``v``), where ``R = -off - s *
    v`` is the same for every conjunct (the rows left: the guard is ``u < R``); else None."""
    loops = {f.loop_var: f for f in inner}
    parts = conjuncts(cond)
    left, us = None, []
    for c in parts:
        if free_of(c, [v]):
            us.append(None)
            continue
        stepping = _stepping(c, v, ana)
        if stepping is None:
            return None
        s, rest = stepping
        used = [x for x in loops if not free_of(rest, [x])]
        if len(used) != 1:
            return None
        u = used[0]
        off = ana.simplify(rest - u)
        r = ana.simplify(IntImm(0, v.dtype) - off - s * v)
        f = loops[u]
        if not free_of(off, list(loops)) or not is_const_int(f.min, 0) or \
                not is_const_int(f.extent, s.value):
            return None
        if left is not None and not is_const_int(ana.simplify(r - left), 0):
            return None
        left = r
        us.append(u)
    return left, parts, us


def _clamped(body: Stmt, v: Var, guards, ana: Analyzer, sizes: List[Var]) -> Stmt:
    """The tail's ``body`` with its scratch rows computed unguarded (module docstring), or as it
    is when its guards do not all count the same rows left ``R``, that count does not depend on
    a symbolic size (then the guards fold), or something is stored outside the guards."""
    forms = {}
    for g, _, _, inner in guards:
        form = _rows_left(g.condition, v, inner, ana)
        if form is None:
            return body
        forms[id(g)] = form
    left = next(iter(forms.values()))[0]
    if free_of(left, sizes) or \
            any(not is_const_int(ana.simplify(f[0] - left), 0) for f in forms.values()):
        return body
    effects = (BufferStore, Evaluate)
    guarded = {id(x) for g, *_ in guards for x in collect(g.then_case, effects)}
    if any(id(x) not in guarded for x in collect(body, effects)):
        return body     # it would run for R < 1, where the guards stop everything else
    scratch = {buf for blk in collect(body, Block) for buf in blk.alloc_buffers}

    last = ana.simplify(left - IntImm(1, left.dtype))

    def pre(n):
        form = forms.get(id(n)) if isinstance(n, IfThenElse) else None
        store = n.then_case if form is not None else None
        if not isinstance(store, BufferStore) or store.buffer not in scratch:
            return None
        _, parts, us = form
        rows = {u: Min(u, last) for u in us if u is not None}

        def clamp(x):
            if isinstance(x, BufferLoad) and x.buffer not in scratch:
                return BufferLoad(x.buffer, tuple(substitute(i, rows) for i in x.indices))
            return None
        out = BufferStore(store.buffer, transform(store.value, clamp), store.indices)
        rest = [c for c, u in zip(parts, us) if u is None]
        for c in rest:
            out = IfThenElse(c, out, None)
        return out
    return IfThenElse(GE(left, IntImm(1, left.dtype)), transform(body, lambda n: None, pre=pre), None)


def partition_loops(func):
    """Partition every loop with qualifying guards (see the module docstring). Outer loops
    first: the guard ``i_0 * 4 + i_1 < n`` also steps with the unrolled ``i_1``, and splitting
    that loop instead of the tile loop ``i_0`` would leave a guard in every tile."""
    sizes = []
    for p in func.params:
        for d in getattr(p, "shape", ()):
            sizes += [x for x in collect(d, Var) if x not in sizes]

    def pre(n):
        part = _partition(n, sizes) if isinstance(n, For) else None
        if part is None:
            return None     # descend as usual
        part, specialised = part
        if isinstance(part, For) and (part.kind == "parallel" or part.thread_binding is not None):
            body = part.body   # (a parallel loop: the head's code partitioned further)
            tail = run(body.else_case) if specialised else body.else_case
            return For(part.loop_var, part.min, part.extent, part.kind,
                       IfThenElse(body.condition, run(body.then_case), tail),
                       part.thread_binding, part.annotations)
        head = part.seq[0] if isinstance(part, SeqStmt) else part
        head = For(head.loop_var, head.min, head.extent, head.kind, run(head.body), head.thread_binding,
                   head.annotations)
        return SeqStmt((head, part.seq[1])) if isinstance(part, SeqStmt) else head

    def run(stmt):
        return transform(stmt, lambda n: None, pre=pre)
    return func.with_body(run(func.body))
