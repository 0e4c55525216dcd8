"""Region analysis for the block primitives: which part of a buffer a block touches while
some loops run, in terms of the loops that stay fixed.

A block's ``reads``/``writes`` regions are written in its iterators; its ``BlockRealize``
binds those to loop variables. To know what a block needs *per iteration of a loop L*, the
primitives substitute the bindings and then *relax* the loops strictly inside L over their
ranges, while L and the loops outside it stay symbolic::

    for i_0 in range(8):            # stays: the region is a function of i_0
        for i_1 in range(8):        # relaxed over [0, 8)
            block: vi = i_0 * 8 + i_1, reads A[vi]
    => A[i_0 * 8 : i_0 * 8 + 8]

Bounds are inclusive ``(lo, hi)`` pairs of expressions, computed by interval arithmetic for
index expressions that are monotone in each relaxed variable (affine forms, floordiv and
floormod by constants, min/max); anything else relaxes to the whole buffer dimension, which
is always safe. Every expression made here goes through ``kiln.arith``.
"""
from __future__ import annotations

import weakref
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..arith import Analyzer
from ..arith.linear import key
from ..ir import (Add, Buffer, BufferLoad, BufferRegion, Cast, FloorDiv, FloorMod, For, IntImm,
                  IterVar, Max, Min, Mul, PrimExpr, Range, Select, Sub, Var, collect, substitute)

Bound = Tuple[Optional[PrimExpr], Optional[PrimExpr]]  # inclusive; None: unknown (whole dim)


def loop_ranges(loops: Sequence[For]) -> Dict[Var, Range]:
    """``{loop_var: Range}`` of ``loops``: the context in which to simplify their indices."""
    return {f.loop_var: Range(f.min, f.extent) for f in loops}


def same(a: PrimExpr, b: PrimExpr) -> bool:
    """Structural equality of two index expressions (variables by identity)."""
    return a is b or key(a) == key(b)


# Node -> ids of the variables it uses. Region and bound analysis asks ``free_of`` of the same
# index expressions again and again, and each ask walked the whole expression (a bicubic
# grid sample's gathers: seconds of its compile). Nodes are immutable; held weakly (an id
# stays valid while the node, which holds its variables, lives).
_VAR_IDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _var_ids(e: PrimExpr) -> frozenset:
    if isinstance(e, Var):
        return frozenset((id(e),))
    try:
        ids = _VAR_IDS.get(e)
    except TypeError:           # not weak-referenceable: no cache
        return frozenset(id(v) for v in collect(e, Var))
    if ids is None:
        ids = frozenset(id(v) for v in collect(e, Var))
        _VAR_IDS[e] = ids
    return ids


def free_of(e: PrimExpr, variables) -> bool:
    """True if ``e`` uses none of ``variables``."""
    ids = _var_ids(e)
    return not any(id(v) in ids for v in variables)


# ---- interval arithmetic --------------------------------------------------------------------
def bound(e: PrimExpr, relax: Mapping[Var, Range]) -> Bound:
    """Inclusive symbolic bounds of ``e`` while the variables of ``relax`` take every value of
    their ranges; ``(None, None)`` where ``e`` is not monotone enough to bound this way."""
    if isinstance(e, Var):
        r = relax.get(e)
        return (e, e) if r is None else (r.min, r.min + r.extent - 1)
    if not relax or free_of(e, relax):
        return e, e
    t = type(e)
    if t is Cast:
        lo, hi = bound(e.value, relax)
        return (None, None) if lo is None else (Cast(e.dtype, lo), Cast(e.dtype, hi))
    if t is Select:
        (a, b), (c, d) = bound(e.true_value, relax), bound(e.false_value, relax)
        return (None, None) if a is None or c is None else (Min(a, c), Max(b, d))
    if t not in (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max):
        return None, None  # a load, a call, ...: no useful bound
    (a_lo, a_hi), (b_lo, b_hi) = bound(e.a, relax), bound(e.b, relax)
    if a_lo is None or b_lo is None:
        return None, None
    if t is Add:
        return a_lo + b_lo, a_hi + b_hi
    if t is Sub:
        return a_lo - b_hi, a_hi - b_lo
    if t in (Min, Max):
        return t(a_lo, b_lo), t(a_hi, b_hi)
    # Products and divisions are monotone only with a constant operand.
    if t is Mul and isinstance(e.a, IntImm):
        (a_lo, a_hi), (b_lo, b_hi), e_b = (b_lo, b_hi), (a_lo, a_hi), e.a
    else:
        e_b = e.b
    if not isinstance(e_b, IntImm):
        return None, None
    c = e_b.value
    if t is Mul:
        return (a_lo * c, a_hi * c) if c >= 0 else (a_hi * c, a_lo * c)
    if c <= 0:
        return None, None
    if t is FloorDiv:
        return a_lo // c, a_hi // c
    return IntImm(0, e.dtype), IntImm(c - 1, e.dtype)  # FloorMod: any residue may occur


def relax_region(region: BufferRegion, bindings: Mapping[Var, PrimExpr],
                 relax: Mapping[Var, Range], ana: Analyzer) -> List[Bound]:
    """Per dimension, the inclusive bounds of ``region`` once block iterators are replaced by
    ``bindings`` and the variables of ``relax`` range over their loops. Unknown bounds are
    clamped to the buffer's extent."""
    out: List[Bound] = []
    for r, extent in zip(region.region, region.buffer.shape):
        lo_e = substitute(r.min, bindings)
        hi_e = substitute(r.min + r.extent - 1, bindings)
        lo, _ = bound(ana.simplify(lo_e), relax)
        _, hi = bound(ana.simplify(hi_e), relax)
        # A loop whose bounds depend on another relaxed loop leaves that one in the result.
        if lo is None or hi is None or not free_of(lo, relax) or not free_of(hi, relax):
            lo, hi = IntImm(0, extent.dtype), extent - 1
        out.append((ana.simplify(lo), ana.simplify(hi)))
    return out


def hull(a: Bound, b: Bound, ana: Analyzer) -> Bound:
    """The smallest interval holding both ``a`` and ``b`` (``Min``/``Max`` where the order of
    the ends is not known)."""
    return _pick(a[0], b[0], Min, ana), _pick(a[1], b[1], Max, ana)


def intersect(a: Bound, b: Bound, ana: Analyzer) -> Bound:
    return _pick(a[0], b[0], Max, ana), _pick(a[1], b[1], Min, ana)


def _pick(x: PrimExpr, y: PrimExpr, op, ana: Analyzer) -> PrimExpr:
    if same(x, y):
        return x
    if ana.can_prove(x <= y):
        return x if op is Min else y
    if ana.can_prove(y <= x):
        return y if op is Min else x
    return ana.simplify(op(x, y))


def to_range(b: Bound, ana: Analyzer) -> Range:
    lo, hi = b
    return Range(lo, ana.simplify(hi - lo + 1))


def var_offset(e: PrimExpr, iter_vars: Sequence[IterVar], ana: Analyzer):
    """``(iter_var, offset)`` if ``e`` is ``v + offset`` for one iterator ``v`` of
    ``iter_vars`` and an offset that uses no iterator; None otherwise."""
    variables = [iv.var for iv in iter_vars]
    used = [iv for iv in iter_vars if not free_of(e, (iv.var,))]
    if len(used) != 1:
        return None
    iv = used[0]
    offset = ana.simplify(e - iv.var)
    return (iv, offset) if free_of(offset, variables) else None


def _data_dependent(r: Range) -> bool:
    """Whether the range's ends read memory (a gather's index loaded from a tensor)."""
    return bool(collect(r.min, BufferLoad) or collect(r.extent, BufferLoad))


def _dim_bound(buf: Buffer, d: int, r: Range, ana: Analyzer) -> Bound:
    # A data-dependent index may be anywhere in the dimension: its bound is the whole
    # dimension, as for any index that bound() cannot bound. Simplifying the loaded index
    # expressions instead (a bicubic grid sample's 64 gathers) took most of such a compile.
    if _data_dependent(r):
        return IntImm(0, r.min.dtype), ana.simplify(buf.shape[d] - 1)
    return ana.simplify(r.min), ana.simplify(r.min + r.extent - 1)


def merge_regions(regions: Sequence[BufferRegion], ana: Analyzer) -> Tuple[BufferRegion, ...]:
    """One region per buffer (the hull of its regions), in order of first appearance. A
    dimension indexed by a value read from memory spans the whole dimension."""
    order: List[Buffer] = []
    dims: Dict[int, List[Bound]] = {}
    for br in regions:
        b = [_dim_bound(br.buffer, d, r, ana) for d, r in enumerate(br.region)]
        if id(br.buffer) not in dims:
            order.append(br.buffer)
            dims[id(br.buffer)] = b
        else:
            dims[id(br.buffer)] = [hull(x, y, ana) for x, y in zip(dims[id(br.buffer)], b)]
    return tuple(BufferRegion(buf, tuple(to_range(b, ana) for b in dims[id(buf)]))
                 for buf in order)


def load_regions(node, ana: Analyzer) -> Tuple[BufferRegion, ...]:
    """The regions that the loads in ``node`` (loop-free) read, merged per buffer."""
    return merge_regions([BufferRegion.point(ld.buffer, ld.indices)
                          for ld in collect(node, BufferLoad)], ana)
