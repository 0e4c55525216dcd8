"""Loop primitives: split, fuse, reorder, parallel, vectorize, unroll, bind.

Every primitive here rewrites one loop nest of the scheduled function and keeps what the
program computes: new loops get new variables, and the block bindings below them are
re-expressed in those variables (``i -> i_0 * 4 + i_1``), simplified by ``kiln.arith`` so that
scheduled programs still print clean indices. A loop that survives keeps its ``Var``, so the
``LoopRV`` handles the user holds for it stay valid (see ``state.py``).

A *loop region* below is the statements between a loop and the blocks under it: loops,
sequences and ifs, down to (and including) the ``BlockRealize`` nodes, but never inside a
block, because a block's body cannot see the loops outside it except through its bindings.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
import operator
from typing import Dict, List, Mapping, Optional, Sequence

from ..ir import (And, Block, BlockRealize, For, IfThenElse, IntImm, PARALLEL_MIN_EXTENT, PrimExpr,
                  Range, SeqStmt, Stmt, THREAD_TAGS, Var, const, is_const_int, substitute, uses_var)
from ..arith import simplify
from .state import LoopRV, ScheduleError, ScheduleState, traced


# ---- helpers -----------------------------------------------------------------------------
def _show(e: PrimExpr) -> str:
    """An expression for an error message: literals as plain numbers, the rest as script."""
    return str(e.value) if isinstance(e, IntImm) else repr(e)


def _is_true(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.dtype == "bool" and e.value == 1


def _and(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return b if _is_true(a) else a if _is_true(b) else And(a, b)


def _enclosing_bounds(parents: Sequence[Stmt]) -> Dict[Var, Range]:
    """Ranges of the loops around a statement, up to the nearest enclosing block: the context
    the simplifier needs to know e.g. that ``floormod(j, 4)`` is ``j`` when ``j < 4``."""
    bounds: Dict[Var, Range] = {}
    for p in reversed(parents):
        if isinstance(p, Block):
            break
        if isinstance(p, For):
            bounds[p.loop_var] = Range(p.min, p.extent)
    return bounds


def _rebind(stmt: Stmt, vmap: Mapping[Var, PrimExpr], bounds: Dict[Var, Range],
            guard: Optional[PrimExpr] = None) -> Stmt:
    """Rewrite the loop region ``stmt`` after its loop variables were replaced.

    Every expression of the region that uses a variable of ``vmap`` (block bindings and
    predicates, loop bounds, if conditions) is substituted and simplified in the ranges of
    the loops around it. ``guard``, if given, is and-ed into the predicate of every block in
    the region: this is how an imperfect split keeps the iterations past the old extent from
    running.
    """
    def expr(e: PrimExpr, bnd) -> PrimExpr:
        new = substitute(e, vmap)
        return e if new is e else simplify(new, bnd)

    def rec(s: Stmt, bnd: Dict[Var, Range]) -> Stmt:
        if isinstance(s, For):
            lo, ext = expr(s.min, bnd), expr(s.extent, bnd)
            body = rec(s.body, {**bnd, s.loop_var: Range(lo, ext)})
            if lo is s.min and ext is s.extent and body is s.body:
                return s
            return dataclasses.replace(s, min=lo, extent=ext, body=body)
        if isinstance(s, SeqStmt):
            seq = tuple(rec(x, bnd) for x in s.seq)
            return s if all(a is b for a, b in zip(seq, s.seq)) else SeqStmt(seq)
        if isinstance(s, IfThenElse):
            cond = expr(s.condition, bnd)
            then = rec(s.then_case, bnd)
            other = rec(s.else_case, bnd) if s.else_case is not None else None
            if cond is s.condition and then is s.then_case and other is s.else_case:
                return s
            return IfThenElse(cond, then, other)
        if isinstance(s, BlockRealize):
            values = tuple(expr(v, bnd) for v in s.iter_values)
            pred = expr(s.predicate, bnd)
            if guard is not None:
                pred = simplify(_and(pred, guard), bnd)
            if pred is s.predicate and all(a is b for a, b in zip(values, s.iter_values)):
                return s
            return BlockRealize(values, pred, s.block)
        return s
    return rec(stmt, bounds)


def _region(stmt: Stmt, kind: type) -> list:
    """The statements of type ``kind`` (For or BlockRealize) in the loop region ``stmt``,
    ``stmt`` included, in program order."""
    out: list = []

    def rec(s):
        if isinstance(s, kind):
            out.append(s)
        if isinstance(s, For):
            rec(s.body)
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                rec(x)
        elif isinstance(s, IfThenElse):
            rec(s.then_case)
            if s.else_case is not None:
                rec(s.else_case)
    rec(stmt)
    return out


def _factor(value, loop: For):
    """A split factor as a Python int (or None), refusing anything else with a clear message."""
    if value is None:
        return None
    if isinstance(value, IntImm) and value.dtype != "bool":
        value = value.value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # numpy ints are fine
        raise ScheduleError(f"split of loop '{loop.loop_var.name}': factors must be positive "
                            f"integers or None, got {value!r}", loop)
    value = int(value)
    if value <= 0:
        raise ScheduleError(f"split of loop '{loop.loop_var.name}': factor {value} is not "
                            "positive; factors must be positive integers (or one None)", loop)
    return value


def _product(exprs: Sequence[PrimExpr]) -> PrimExpr:
    """The product of loop extents, folded to a literal when they are all literals."""
    return simplify(functools.reduce(operator.mul, exprs))


# ---- primitives --------------------------------------------------------------------------
class LoopPrimitives:
    """Mixed into ``kiln.Schedule``; relies on the lookup/replace helpers of ``ScheduleState``."""

    @traced
    def split(self: ScheduleState, loop: LoopRV, factors: Sequence[Optional[int]]) -> List[LoopRV]:
        """Split ``loop`` into ``len(factors)`` nested loops, outermost first.

        The new loops have the factors as extents and are named ``i_0, i_1, ...`` after the
        split loop ``i``; they are serial. At most one factor may be None: it is inferred as
        the smallest extent that covers the loop. When the product of the factors exceeds the
        extent, every block under the loop gets the guard ``i_0 * f1 + i_1 < extent`` as part
        of its predicate (``T.where``), so no extra iteration runs. A loop that starts at
        ``m`` becomes ``m + i_0 * f1 + i_1`` in the bindings; the new loops start at 0.

        Before ``split(i, factors=[None, 4])``, with ``i`` of extent 10::

            @T.prim_func
            def main(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32")):
                for i in range(10):
                    with T.block("B"):
                        vi = T.axis.spatial(10, i)
                        B[vi] = A[vi] * 2.0

        After (``i_0`` has the inferred extent 3)::

            @T.prim_func
            def main(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32")):
                for i_0, i_1 in T.grid(3, 4):
                    with T.block("B"):
                        vi = T.axis.spatial(10, i_0 * 4 + i_1)
                        T.where(i_0 * 4 + i_1 < 10)
                        B[vi] = A[vi] * 2.0

        A loop of symbolic extent (``n``) splits when exactly one factor is None: that loop
        gets the extent ``(n + k - 1) // k`` (``k`` the product of the others) and blocks get
        the guard ``offset < n``, since ``n`` need not be a multiple of ``k``.

        Raises ``ScheduleError`` if a factor is not a positive integer, more than one is None,
        the factors cover fewer iterations than the loop has, or the loop's extent is symbolic
        and no factor is None.
        """
        f, parents = self._loop(loop)
        name = f.loop_var.name
        if not isinstance(factors, (list, tuple)):
            raise ScheduleError(f"split of loop '{name}': factors must be a list, e.g. "
                                f"[None, 4], got {factors!r}", f)
        factors = [_factor(x, f) for x in factors]
        if len(factors) < 2:
            raise ScheduleError(f"split of loop '{name}' needs at least two factors, got {factors}", f)
        if factors.count(None) > 1:
            raise ScheduleError(f"split of loop '{name}': at most one factor may be None "
                                f"(inferred), got {factors}", f)
        dtype = f.loop_var.dtype
        known = 1
        for x in factors:
            known *= x or 1
        if not is_const_int(f.extent):
            if None not in factors:
                raise ScheduleError(f"split of loop '{name}' of symbolic extent {_show(f.extent)}: one "
                                    f"factor must be None (inferred), got {factors}", f)
            extent = f.extent
            # ceil(n / known) outer iterations cover every one; the guard drops the extra ones.
            factors = [simplify((extent + const(known - 1, dtype)) // const(known, dtype))
                       if x is None else x for x in factors]
            covered = None
        else:
            extent = f.extent.value
            if None in factors:
                factors[factors.index(None)] = -(-extent // known)  # ceil: cover every iteration
            elif known < extent:
                raise ScheduleError(f"split of loop '{name}': factors {factors} cover {known} "
                                    f"iterations but the loop has {extent}", f)
            covered = 1
            for x in factors:
                covered *= x

        new_vars = [Var(f"{name}_{k}", dtype) for k in range(len(factors))]
        bounds = _enclosing_bounds(parents)
        factors = [const(x, dtype) if isinstance(x, int) else x for x in factors]
        bounds.update({v: Range.from_extent(x) for v, x in zip(new_vars, factors)})
        # i = (i_0 * f1 + i_1) * f2 + i_2, which the simplifier turns into i_0 * 4 + i_1 * 2 + i_2.
        # A loop of extent 1 only ever has the value 0, so its variable is left out.
        offset: PrimExpr = new_vars[0] if not is_const_int(factors[0], 1) else const(0, dtype)
        for var, factor in zip(new_vars[1:], factors[1:]):
            offset = offset * factor + (var if not is_const_int(factor, 1) else const(0, dtype))
        offset = simplify(offset, bounds)
        value = offset if is_const_int(f.min, 0) else f.min + offset
        if covered is None:   # symbolic extent: guard unless the other factors are all 1
            guard = offset < extent if known != 1 else None
        else:
            guard = offset < const(extent, dtype) if covered != extent else None
        body = _rebind(f.body, {f.loop_var: simplify(value, bounds)}, bounds, guard)
        for var, factor in reversed(list(zip(new_vars, factors))):
            body = For(var, const(0, dtype), factor, "serial", body)
        self._replace(f, body)
        return [LoopRV(v) for v in new_vars]

    @traced
    def fuse(self: ScheduleState, *loops: LoopRV) -> LoopRV:
        """Fuse perfectly nested loops into one whose extent is the product of theirs.

        The loops are given outermost first; each must be the only statement in the body of
        the one before it, and all must start at 0. The new loop is serial and named after
        the loops it replaces (``i_j_fused``); blocks recover the old indices with floordiv
        and floormod. Fusing a single loop changes nothing and returns its handle.

        Before ``fuse(i, j)``::

            @T.prim_func
            def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
                for i in range(4):
                    for j in range(8):
                        with T.block("B"):
                            vi = T.axis.spatial(4, i)
                            vj = T.axis.spatial(8, j)
                            B[vi, vj] = A[vi, vj] * 2.0

        After::

            @T.prim_func
            def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
                for i_j_fused in range(32):
                    with T.block("B"):
                        vi = T.axis.spatial(4, i_j_fused // 8)
                        vj = T.axis.spatial(8, i_j_fused % 8)
                        B[vi, vj] = A[vi, vj] * 2.0

        Raises ``ScheduleError`` if no loop is given, a loop is given twice, the loops are not
        perfectly nested in the given order, or one does not start at 0.
        """
        if not loops:
            raise ScheduleError("fuse needs at least one loop")
        _check_distinct("fuse", loops)
        fors = [self._loop(rv) for rv in loops]
        outer, parents = fors[0]
        if len(loops) == 1:
            return loops[0]
        for (a, _), (b, _) in zip(fors, fors[1:]):
            if a.body is not b:
                raise ScheduleError(
                    f"cannot fuse loops '{a.loop_var.name}' and '{b.loop_var.name}': loop "
                    f"'{b.loop_var.name}' must be the only statement in the body of "
                    f"'{a.loop_var.name}' (fuse takes perfectly nested loops, outermost first)", a)
        for f, _ in fors:
            if not is_const_int(f.min, 0):
                raise ScheduleError(f"cannot fuse loop '{f.loop_var.name}': it starts at "
                                    f"{_show(f.min)}, fuse needs loops that start at 0", f)
        nest = [f for f, _ in fors]
        dtype = nest[0].loop_var.dtype
        fused = Var("_".join(f.loop_var.name for f in nest) + "_fused", dtype)
        extent = _product([f.extent for f in nest])
        bounds = _enclosing_bounds(parents)
        bounds[fused] = Range.from_extent(extent)
        # Loop k advances once every prod(extents after k) iterations of the fused loop and
        # wraps at its own extent; the outermost never wraps and the innermost has stride 1.
        vmap: Dict[Var, PrimExpr] = {}
        for k, f in enumerate(nest):
            if is_const_int(f.extent, 1):
                vmap[f.loop_var] = const(0, f.loop_var.dtype)
                continue
            inner = [g.extent for g in nest[k + 1:] if not is_const_int(g.extent, 1)]
            value: PrimExpr = fused // _product(inner) if inner else fused
            if k > 0:
                value = value % f.extent
            vmap[f.loop_var] = simplify(value, bounds)
        body = _rebind(nest[-1].body, vmap, bounds)
        self._replace(outer, For(fused, const(0, dtype), extent, "serial", body))
        return LoopRV(fused)

    @traced
    def reorder(self: ScheduleState, *loops: LoopRV) -> None:
        """Reorder loops of one nest so that they run in the given relative order.

        The loops must lie on one chain of a loop nest, and the chain between the outermost
        and the innermost given loop must be perfectly nested (each loop's body is the next
        loop). Loops of the chain that are not given keep their place; the given ones are
        permuted among their positions. Each loop keeps its variable, kind and annotations.

        Before ``reorder(k, i)`` (``j`` stays in the middle)::

            for i in range(4):
                for j in range(8):
                    for k in range(16):
                        with T.block("C"):
                            ...

        After::

            for k in range(16):
                for j in range(8):
                    for i in range(4):
                        with T.block("C"):
                            ...

        Raises ``ScheduleError`` ("reorder of loops not in one nest") if the loops are in
        different nests, on different branches of one nest or separated by other statements
        or blocks; if a loop is given twice; or if a loop would move outside a loop whose
        bounds depend on it.
        """
        _check_distinct("reorder", loops)
        if len(loops) <= 1:
            for rv in loops:
                self._loop(rv)  # still check that the handle is valid
            return
        fors = [self._loop(rv) for rv in loops]
        names = ", ".join(f"'{f.loop_var.name}'" for f, _ in fors)
        # Outermost first: on one chain, a loop deeper in the tree has more ancestors.
        by_depth = sorted(fors, key=lambda fp: len(fp[1]))
        outer = by_depth[0][0]
        inner = by_depth[-1][0]
        for (a, _), (b, b_parents) in zip(by_depth, by_depth[1:]):
            if not any(p is a for p in b_parents):
                raise ScheduleError(f"reorder of loops not in one nest: loop '{b.loop_var.name}' "
                                    f"is not inside loop '{a.loop_var.name}' (loops {names})",
                                    self.func)
        chain = [outer]
        while chain[-1] is not inner:
            body = chain[-1].body
            if not isinstance(body, For):
                raise ScheduleError(
                    f"reorder of loops not in one nest: the body of loop '{chain[-1].loop_var.name}' "
                    f"is a {type(body).__name__}, not a single loop, so loops {names} are not "
                    "perfectly nested", outer)
            chain.append(body)

        given = {id(f) for f, _ in fors}
        order = iter(f for f, _ in fors)
        new_chain = [next(order) if id(f) in given else f for f in chain]
        # A loop's bounds may only use variables of loops outside it (a triangular nest
        # cannot be interchanged).
        for k, f in enumerate(new_chain):
            for g in new_chain[k:]:
                if g is not f and (uses_var(f.min, g.loop_var) or uses_var(f.extent, g.loop_var)):
                    raise ScheduleError(
                        f"cannot reorder: the bounds of loop '{f.loop_var.name}' depend on loop "
                        f"'{g.loop_var.name}', which would move inside it", outer)
        body = inner.body
        for f in reversed(new_chain):
            body = dataclasses.replace(f, body=body)
        self._replace(outer, body)

    @traced
    def parallel(self: ScheduleState, loop: LoopRV, min_extent: Optional[int] = None) -> None:
        """Run the iterations of ``loop`` in parallel on CPU threads; with ``min_extent``, only
        when the loop has at least that many iterations when it runs (a symbolic extent that
        is small at run time, a 16-token prompt's rows, runs on the calling thread: the work
        would not pay for the other threads). It is the loop annotation
        ``kiln.parallel_min_extent``.

        Before ``parallel(i)``::

            for i in range(128):
                with T.block("B"):
                    vi = T.axis.spatial(128, i)
                    B[vi] = A[vi] * 2.0

        After::

            for i in T.parallel(128):
                with T.block("B"):
                    vi = T.axis.spatial(128, i)
                    B[vi] = A[vi] * 2.0

        Raises ``ScheduleError`` if the loop carries a reduction (its variable appears in the
        binding of a reduction iterator of a block under it): its iterations are not
        independent; or if ``min_extent`` is not a positive int.
        """
        if min_extent is not None and (not isinstance(min_extent, int) or isinstance(min_extent, bool)
                                       or min_extent < 1):
            raise ScheduleError(f"parallel: min_extent must be a positive int, got {min_extent!r}")
        self._set_kind(loop, "parallel", "parallelize")
        if min_extent is not None:
            f, _ = self._loop(loop)
            notes = dict(f.annotations)
            notes[PARALLEL_MIN_EXTENT] = min_extent
            self._replace(f, dataclasses.replace(f, annotations=tuple(notes.items())))

    @traced
    def vectorize(self: ScheduleState, loop: LoopRV) -> None:
        """Run ``loop`` as one vector operation over its iterations.

        Before ``vectorize(i_1)``::

            for i_0 in range(32):
                for i_1 in range(4):
                    with T.block("B"):
                        vi = T.axis.spatial(128, i_0 * 4 + i_1)
                        B[vi] = A[vi] * 2.0

        After::

            for i_0 in range(32):
                for i_1 in T.vectorized(4):
                    with T.block("B"):
                        vi = T.axis.spatial(128, i_0 * 4 + i_1)
                        B[vi] = A[vi] * 2.0

        Raises ``ScheduleError`` if the loop's extent is not a constant (the vector width must
        be known at compile time) or the loop carries a reduction.
        """
        f, _ = self._loop(loop)
        if not is_const_int(f.extent):
            raise ScheduleError(f"cannot vectorize loop '{f.loop_var.name}': its extent "
                                f"{_show(f.extent)} is not a constant", f)
        self._set_kind(loop, "vectorized", "vectorize")

    @traced
    def unroll(self: ScheduleState, loop: LoopRV) -> None:
        """Unroll ``loop`` fully at code generation. Any loop may be unrolled.

        Before ``unroll(k)``::

            for k in range(4):
                with T.block("C"):
                    ...

        After::

            for k in T.unroll(4):
                with T.block("C"):
                    ...
        """
        self._set_kind(loop, "unrolled", None)

    @traced
    def bind(self: ScheduleState, loop: LoopRV, thread_axis: str) -> None:
        """Bind ``loop`` to a GPU thread axis: ``blockIdx.x/y/z``, ``threadIdx.x/y/z`` or
        ``vthread``; the loop's iterations run on the blocks or threads of that axis.

        Before ``bind(i_0, "blockIdx.x")`` and ``bind(i_1, "threadIdx.x")``::

            for i_0 in range(4):
                for i_1 in range(32):
                    with T.block("B"):
                        vi = T.axis.spatial(128, i_0 * 32 + i_1)
                        B[vi] = A[vi] * 2.0

        After::

            for i_0 in T.thread_binding(4, thread="blockIdx.x"):
                for i_1 in T.thread_binding(32, thread="threadIdx.x"):
                    with T.block("B"):
                        vi = T.axis.spatial(128, i_0 * 32 + i_1)
                        B[vi] = A[vi] * 2.0

        Raises ``ScheduleError`` if the thread axis is unknown, if a loop around or inside this
        one is already bound to the same axis, or if the loop carries a reduction (a
        cross-thread reduction is not supported).
        """
        f, parents = self._loop(loop)
        if thread_axis not in THREAD_TAGS:
            raise ScheduleError(f"cannot bind loop '{f.loop_var.name}' to unknown thread axis "
                                f"{thread_axis!r}; expected one of {', '.join(THREAD_TAGS)}", f)
        # Two nested loops on one axis would both claim the same hardware index.
        for other in [p for p in parents if isinstance(p, For)] + _region(f.body, For):
            if other.thread_binding == thread_axis and thread_axis != "vthread":
                raise ScheduleError(f"cannot bind loop '{f.loop_var.name}' to {thread_axis}: loop "
                                    f"'{other.loop_var.name}' in the same nest is already bound "
                                    "to it", f)
        self._set_kind(loop, "thread_binding", "bind", thread_axis)

    # ---- shared by the kind-setting primitives ------------------------------------------
    def _set_kind(self: ScheduleState, loop: LoopRV, kind: str, verb: Optional[str],
                  thread_axis: Optional[str] = None) -> None:
        """Set the kind of ``loop``; ``verb`` (for the message) is None when reductions are fine."""
        f, _ = self._loop(loop)
        if verb is not None:
            for r in _region(f.body, BlockRealize):
                for iv, value in zip(r.block.iter_vars, r.iter_values):
                    if iv.kind == "reduce" and uses_var(value, f.loop_var):
                        raise ScheduleError(
                            f"cannot {verb} loop '{f.loop_var.name}': it carries reduction "
                            f"iterator {iv.var.name} of block '{r.block.name_hint}' (its "
                            "iterations accumulate into the same elements)", f)
        self._replace(f, dataclasses.replace(f, kind=kind, thread_binding=thread_axis))


def _check_distinct(primitive: str, loops: Sequence[LoopRV]) -> None:
    seen = set()
    for rv in loops:
        if not isinstance(rv, LoopRV):
            raise ScheduleError(f"{primitive} takes loop handles (from get_loops or split), got {rv!r}")
        if id(rv.var) in seen:
            raise ScheduleError(f"{primitive} got loop '{rv.var.name}' more than once")
        seen.add(id(rv.var))
