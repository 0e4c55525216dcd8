"""Split a vectorized loop where the conditions under it stop varying: ``partition_selects``.

Zero padding (``pad``, the ``conv2d_pad`` block in front of a padded convolution) reads its
input through clamped indices under a condition, since codegen evaluates both sides of a
``Select``::

    for i3 in T.vectorized(58):
        P[r, i3] = T.Select(i3 - 1 >= 0 and i3 - 1 < 56, X[r, T.min(T.max(i3 - 1, 0), 55)], 0.0)

A clamped index is not affine in the loop variable, so every chunk of lanes is a gather. Only
the border lanes need the clamp: for ``1 <= i3 < 57`` the condition holds and the clamp is the
identity, so the loop splits into three::

    for i3 in T.vectorized(0, 1):  ... (as before)
    for i3 in T.vectorized(1, 57): P[r, i3] = X[r, i3 - 1]      # plain vector loads
    for i3 in T.vectorized(57, 58): ... (as before)

and the final simplification (``lower_prim_func``, which knows each loop's range) folds the
condition and the clamps in the middle loop. The same goes for the ``if`` of a padded pool
window (``x * 2 + rx - 1 >= 0`` fails only for ``x = 0``), which would otherwise mask every
chunk. The conditions looked at are those of Selects and of ``if`` s without ``else``: each
part of their conjunction that uses the loop variable must be a comparison ``a < b`` (``<=``,
``>``, ``>=``) with ``a - b`` affine in it (a constant slope) and a rest bounded over the
ranges of the other loops it uses (constant bounds); it holds in the middle for every value of
those. Parts that do not use the loop variable (a condition on the row, the same for all
lanes) stay as they are.

A serial loop over register tiles (unrolled and vectorized loops and selects under it: a conv
reading its padding in place, ``schedule_conv``'s ``pad_inline``) splits the same way, its
interior tiles reading every tap without a test; and a serial loop whose selects test its own
variable with outer ones only (a tap row's test: the same for every tap and pixel of the row)
branches on that test once per iteration instead (``_unswitch_uniform``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..arith import Analyzer
from ..ir import (Block, BlockRealize, For, GE, GT, IfThenElse, IntImm, LE, LT, Range, Select,
                  SeqStmt, Var, collect, structural_equal, substitute, transform)
from ..ir.expr import conjunction, conjuncts, is_const_int
from ..schedule.regions import bound, free_of, loop_ranges

# Below this many lanes in the middle the split is not worth two more loops.
MIN_INTERIOR = 4


def _true_range(c, v: Var, ranges: Dict[Var, Range], ana: Analyzer
                ) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """``(lo, hi)``: ``c`` holds for every ``lo <= v < hi`` (None: unbounded on that side),
    whatever values the other loop variables in it take in ``ranges``; None when ``c`` is not
    a comparison affine in ``v`` with a constant slope and a rest bounded over ``ranges``."""
    if not isinstance(c, (LT, LE, GT, GE)) or not c.a.dtype.startswith(("int", "uint")):
        return None
    d = ana.simplify(c.a - c.b)
    # Normalize to ``s * v + r < 0`` (integers: ``d <= 0`` is ``d - 1 < 0``).
    if isinstance(c, LE):
        d = ana.simplify(d - 1)
    elif isinstance(c, GT):
        d = ana.simplify(-d)
    elif isinstance(c, GE):
        d = ana.simplify(-d - 1)
    s = ana.simplify(substitute(d, {v: v + 1}) - d)
    rest = ana.simplify(d - s * v)
    if not isinstance(s, IntImm) or s.value == 0 or not free_of(rest, [v]):
        return None
    # The condition must hold for the largest rest: bound it over the other loops.
    _, r = bound(rest, ranges)
    r = ana.simplify(r) if r is not None else None
    if not isinstance(r, IntImm):
        return None
    s, r = s.value, r.value
    if s > 0:       # v < ceil(-r / s)
        return None, -(r // s)
    return r // -s + 1, None     # v > r / |s|


def _conditions(body) -> list:
    """The conditions of the Selects and of the ``if`` s (without ``else``) in ``body``."""
    out = [sel.condition for sel in collect(body, Select)]
    out += [s.condition for s in collect(body, IfThenElse) if s.else_case is None]
    return out


def _tile_loop(loop: For) -> bool:
    """Whether ``loop`` walks register tiles (or their reduction steps): unrolled and
    vectorized loops under it, and a select (zero padding read in place)."""
    loops = collect(loop.body, For)
    return any(f.kind == "vectorized" for f in loops) and \
        any(f.kind == "unrolled" for f in loops) and bool(collect(loop.body, Select))


def _unswitch_uniform(loop: For) -> For:
    """``loop`` with its body branched on the parts of its selects' conditions that use its
    variable and no variable of a loop inside it (a tap row's test, the same for every tap
    and pixel of the row): ``for ry: if c: <selects without c> else: <selects false>``. The
    select per broadcast input value, left to the hardware, cost a 7 x 7 stem read in place
    3% against a padded copy in AVX2 code."""
    v = loop.loop_var
    inner = {id(f.loop_var) for f in collect(loop.body, For)}
    uniform = []
    for sel in collect(loop.body, Select):
        for c in conjuncts(sel.condition):
            used = collect(c, Var)
            if any(x is v for x in used) and not any(id(x) in inner for x in used) and \
                    not any(_same_condition(c, u) for u in uniform):
                uniform.append(c)
    if not uniform:
        return loop

    def settle(value: bool):
        def post(n):
            if not isinstance(n, Select):
                return None
            parts = conjuncts(n.condition)
            rest = [c for c in parts if not any(_same_condition(c, u) for u in uniform)]
            if len(rest) == len(parts):
                return None
            if not value:
                return n.false_value
            return Select(conjunction(rest), n.true_value, n.false_value) if rest \
                else n.true_value
        return transform(loop.body, post)

    return For(loop.loop_var, loop.min, loop.extent, loop.kind,
               IfThenElse(conjunction(uniform), settle(True), settle(False)),
               loop.thread_binding, loop.annotations)


def _same_condition(a, b) -> bool:
    """The same comparison of the very same variables (structural equality matches variables
    up to renaming)."""
    return structural_equal(a, b) and \
        [id(x) for x in collect(a, Var)] == [id(x) for x in collect(b, Var)]


def _interior(loop: For, outer: Dict[Var, Range], ana: Analyzer,
              min_interior: int = MIN_INTERIOR) -> Optional[Tuple[int, int]]:
    """The range of ``loop``'s variable where every qualifying condition under it holds, when
    it is a proper, wide enough part of the loop (at least ``min_interior`` iterations and
    half of it)."""
    v = loop.loop_var
    if not (is_const_int(loop.min) and is_const_int(loop.extent)):
        return None
    start, end = loop.min.value, loop.min.value + loop.extent.value
    ranges = dict(outer)
    ranges.update(loop_ranges([f for f in collect(loop.body, For)]))
    lo, hi = start, end
    found = False
    for cond in _conditions(loop.body):
        for c in conjuncts(cond):
            used = collect(c, Var)
            if not any(x is v for x in used) or any(x is not v and x not in ranges for x in used):
                continue        # lane-invariant (a row condition), or in unknown variables
            rng = _true_range(c, v, ranges, ana)
            if rng is None:
                continue
            found = True
            if rng[0] is not None:
                lo = max(lo, rng[0])
            if rng[1] is not None:
                hi = min(hi, rng[1])
    # Only where the conditions hold on most of the loop (padding borders, a pool's first
    # column): a guard that fails on most lanes (a split's last chunk) is left to the masks.
    if not found or hi - lo < max(min_interior, (end - start + 1) // 2) or \
            (lo == start and hi == end):
        return None
    return lo, hi


def _split(loop: For, lo: int, hi: int) -> SeqStmt:
    start, end = loop.min.value, loop.min.value + loop.extent.value
    parts: List[For] = []
    for a, b in ((start, lo), (lo, hi), (hi, end)):
        if b > a:
            v = Var(loop.loop_var.name, loop.loop_var.dtype)
            body = substitute(loop.body, {loop.loop_var: v})
            parts.append(For(v, IntImm(a, v.dtype), IntImm(b - a, v.dtype), loop.kind, body,
                             loop.thread_binding, loop.annotations))
    return SeqStmt(tuple(parts))


def partition_selects(func):
    """Split every vectorized loop as the module docstring says, and a serial loop right around
    a vectorized one by the conditions on its own variable; other loops are kept."""
    ana = Analyzer()
    outer: Dict[Var, Range] = {}

    def visit(s):
        if isinstance(s, For):
            if s.kind == "vectorized":
                inner = _interior(s, outer, ana)
                if inner is not None:
                    return _split(s, *inner)
                return s
            if s.kind == "serial" and isinstance(s.body, For) and s.body.kind == "vectorized":
                # The pixels around a vector of channels (a channel-blocked input's padding,
                # ``conv2d_pad[n, c, y, x, 0:16]``): the conditions are on the pixel, and its
                # interior is a plain copy of whole vectors. Left whole, every vector was
                # loaded through clamped indices under a select: YOLO's 16 -> 32 stride-2 conv
                # at 160 x 160 spent 100 of its 450 us padding its input.
                inner = _interior(s, outer, ana)
                if inner is not None:
                    return _split(s, *inner)
            elif s.kind == "serial" and _tile_loop(s):
                # A register tile's loop over the pixel tiles of a row, its padding read in
                # place (``schedule_conv``'s ``pad_inline``): the tiles away from the row's
                # ends read every tap inside the input, without the selects and clamps.
                inner = _interior(s, outer, ana, min_interior=1)
                if inner is not None:
                    return SeqStmt(tuple(visit(part) for part in _split(s, *inner).seq))
                s = _unswitch_uniform(s)
            known = is_const_int(s.min) and is_const_int(s.extent)
            if known:
                outer[s.loop_var] = Range(s.min, s.extent)
            body = visit(s.body)
            outer.pop(s.loop_var, None)
            return s if body is s.body else For(s.loop_var, s.min, s.extent, s.kind, body,
                                                s.thread_binding, s.annotations)
        if isinstance(s, SeqStmt):
            seq = tuple(visit(x) for x in s.seq)
            return s if all(a is b for a, b in zip(seq, s.seq)) else SeqStmt(seq)
        if isinstance(s, BlockRealize):
            b = s.block
            body = visit(b.body)
            if body is b.body:
                return s
            return BlockRealize(s.iter_values, s.predicate,
                                Block(b.name_hint, b.iter_vars, b.reads, b.writes, body, b.init,
                                      b.alloc_buffers, b.annotations))
        if isinstance(s, IfThenElse):
            then = visit(s.then_case)
            other = visit(s.else_case) if s.else_case is not None else None
            if then is s.then_case and other is s.else_case:
                return s
            return IfThenElse(s.condition, then, other)
        return s

    return func.with_body(visit(func.body))
