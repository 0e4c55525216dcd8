"""Small analyses over tensor IR shared by the script parser, ``te`` and ``schedule``.

- ``expr_equal(a, b)``: deep equality of expressions where variables and buffers compare by
  identity (``structural_equal`` instead *maps* variables, so it calls ``i + 1`` and ``j + 1``
  equal; that is right for whole programs, wrong for "is this the same index?").
- ``infer_access_regions(block)``: the buffer regions a block reads and writes, computed from
  its body, for blocks whose author did not state them.

>>> from .expr import Buffer, Var
>>> i = Var("i")
>>> expr_equal(i * 4 + 1, i * 4 + 1), expr_equal(i + 1, Var("i") + 1)
(True, False)
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from .expr import (Add, Buffer, BufferLoad, FloorDiv, FloorMod, IntImm, Max, Min, Mul,
                   Node, PrimExpr, Range, Sub, Var)
from .functor import node_fields, pre_order_visit
from .stmt import Block, BlockRealize, BufferRegion, BufferStore, For, Stmt


def expr_equal(a, b) -> bool:
    """True if ``a`` and ``b`` are the same expression tree with the very same variables and
    buffers (identity), e.g. to decide whether two indices are one point."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (Var, Buffer)):
        return False
    if isinstance(a, Node):
        return all(expr_equal(getattr(a, f), getattr(b, f)) for f in node_fields(type(a)))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(expr_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


# ---- linear forms ----------------------------------------------------------------------------
# A bound is a linear form sum(coeff * atom) + const over "atoms": sub-expressions that do not
# depend on loops inside the block (block iterators, symbolic sizes, ...). Two bounds can be
# compared only when they differ by a constant; otherwise the region falls back to the whole
# dimension, which is always correct (an over-approximation).
class _Lin:
    __slots__ = ("terms", "const")

    def __init__(self, terms=(), const: int = 0):
        self.terms: List[list] = [list(t) for t in terms if t[1] != 0]
        self.const = const

    @staticmethod
    def atom(e: PrimExpr) -> "_Lin":
        return _Lin([(e, 1)])

    def scaled(self, c: int) -> "_Lin":
        return _Lin([(a, k * c) for a, k in self.terms], self.const * c)

    def __add__(self, o: "_Lin") -> "_Lin":
        terms = [list(t) for t in self.terms]
        for atom, k in o.terms:
            for t in terms:
                if expr_equal(t[0], atom):
                    t[1] += k
                    break
            else:
                terms.append([atom, k])
        return _Lin(terms, self.const + o.const)

    def __sub__(self, o: "_Lin") -> "_Lin":
        return self + o.scaled(-1)

    def plus(self, c: int) -> "_Lin":
        return _Lin(self.terms, self.const + c)

    def constant_diff(self, o: "_Lin") -> Optional[int]:
        """``self - o`` if that is a constant, else None."""
        d = self - o
        return None if d.terms else d.const

    def to_expr(self, dtype: str) -> PrimExpr:
        expr = None
        for atom, k in self.terms:
            term = atom if abs(k) == 1 else Mul(atom, IntImm(abs(k), atom.dtype))
            if expr is None:
                expr = term if k > 0 else Mul(atom, IntImm(k, atom.dtype))
            else:
                expr = Add(expr, term) if k > 0 else Sub(expr, term)
        if expr is None:
            return IntImm(self.const, dtype)
        if self.const > 0:
            return Add(expr, IntImm(self.const, expr.dtype))
        if self.const < 0:
            return Sub(expr, IntImm(-self.const, expr.dtype))
        return expr


Bounds = Optional[Tuple[_Lin, _Lin]]


def _uses_any(e: PrimExpr, inner: Dict[int, Bounds]) -> bool:
    found = []

    def visit(n):
        if found:
            return False
        if isinstance(n, Var) and id(n) in inner:
            found.append(n)
        return None
    pre_order_visit(e, visit)
    return bool(found)


def _bounds(e: PrimExpr, inner: Dict[int, Bounds]) -> Bounds:
    """Inclusive lower and upper bound of ``e`` over the loops in ``inner`` (None: unknown)."""
    if isinstance(e, IntImm):
        return _Lin((), e.value), _Lin((), e.value)
    if isinstance(e, Var):
        return inner[id(e)] if id(e) in inner else (_Lin.atom(e), _Lin.atom(e))
    # Affine parts are taken apart even without inner loops, so vk + 1 - 1 meets vk; anything
    # else free of inner loops is one opaque atom.
    if not isinstance(e, (Add, Sub, Mul)) and not _uses_any(e, inner):
        return _Lin.atom(e), _Lin.atom(e)
    if isinstance(e, (Add, Sub)):
        a, b = _bounds(e.a, inner), _bounds(e.b, inner)
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1]) if isinstance(e, Add) else (a[0] - b[1], a[1] - b[0])
    if isinstance(e, Mul):
        c, x = (e.a, e.b) if isinstance(e.a, IntImm) else (e.b, e.a)
        if not isinstance(c, IntImm):
            return (_Lin.atom(e), _Lin.atom(e)) if not _uses_any(e, inner) else None
        xb = _bounds(x, inner)
        if xb is None:
            return None
        lo, hi = xb[0].scaled(c.value), xb[1].scaled(c.value)
        return (lo, hi) if c.value >= 0 else (hi, lo)
    if isinstance(e, (FloorDiv, FloorMod)) and isinstance(e.b, IntImm) and e.b.value > 0:
        c, xb = e.b.value, _bounds(e.a, inner)
        constant = xb is not None and not xb[0].terms and not xb[1].terms
        if isinstance(e, FloorDiv):
            return (_Lin((), xb[0].const // c), _Lin((), xb[1].const // c)) if constant else None
        if constant and xb[0].const // c == xb[1].const // c:
            return _Lin((), xb[0].const % c), _Lin((), xb[1].const % c)
        return _Lin((), 0), _Lin((), c - 1)
    if isinstance(e, (Min, Max)):
        a, b = _bounds(e.a, inner), _bounds(e.b, inner)
        if a is None or b is None:
            return None
        pick = min if isinstance(e, Min) else max
        out = []
        for x, y in ((a[0], b[0]), (a[1], b[1])):
            d = x.constant_diff(y)
            if d is None:
                return None
            out.append(x if pick(d, 0) == d else y)
        return out[0], out[1]
    return None


# ---- access collection -----------------------------------------------------------------------
class _Accesses:
    """Per buffer, in first-access order: a list of accesses, each a tuple of Ranges in terms of
    the block's variables and the loops inside the block (``inner``), with bounds per dim."""

    def __init__(self):
        self.order: List[Buffer] = []
        self.items: Dict[int, list] = {}

    def add(self, buffer: Buffer, ranges, inner) -> None:
        if id(buffer) not in self.items:
            self.order.append(buffer)
            self.items[id(buffer)] = []
        self.items[id(buffer)].append([(r, _range_bounds(r, inner), _uses_any(r.min, inner)
                                        or _uses_any(r.extent, inner)) for r in ranges])


def _range_bounds(r: Range, inner) -> Bounds:
    lo, ext = _bounds(r.min, inner), _bounds(r.extent, inner)
    if lo is None or ext is None:
        return None
    return lo[0], (lo[1] + ext[1]).plus(-1)


def _point(i: PrimExpr) -> Range:
    return Range(i, IntImm(1, i.dtype))


class _Collector:
    def __init__(self, skip):
        self.reads, self.writes = _Accesses(), _Accesses()
        self.skip = skip            # ids of buffers the block allocates itself
        self.inner: Dict[int, Bounds] = {}

    def loads(self, node) -> None:
        def visit(n):
            if isinstance(n, BufferLoad) and id(n.buffer) not in self.skip:
                self.reads.add(n.buffer, [_point(i) for i in n.indices], self.inner)
        pre_order_visit(node, visit)

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, For):
            self.loads(s.min)
            self.loads(s.extent)
            lo, ext = _bounds(s.min, self.inner), _bounds(s.extent, self.inner)
            self.inner[id(s.loop_var)] = None if lo is None or ext is None else \
                (lo[0], (lo[1] + ext[1]).plus(-1))
            self.stmt(s.body)
        elif isinstance(s, BufferStore):
            self.loads(s.value)
            for i in s.indices:
                self.loads(i)
            if id(s.buffer) not in self.skip:
                self.writes.add(s.buffer, [_point(i) for i in s.indices], self.inner)
        elif isinstance(s, BlockRealize):
            for v in s.iter_values:
                self.loads(v)
            self.loads(s.predicate)
            # A nested block is summarised by its own regions, with its iterators replaced by
            # their bindings (which may use loops inside this block).
            from .functor import substitute
            vmap = {iv.var: v for iv, v in zip(s.block.iter_vars, s.iter_values)}
            for regions, acc in ((s.block.reads, self.reads), (s.block.writes, self.writes)):
                for br in regions:
                    if id(br.buffer) not in self.skip:
                        acc.add(br.buffer, [substitute(r, vmap) for r in br.region], self.inner)
        elif isinstance(s, Block):
            for part in (s.init, s.body):
                if part is not None:
                    self.stmt(part)
        else:
            # SeqStmt, IfThenElse, Evaluate: visit expressions for loads, statements recursively.
            for f in node_fields(type(s)):
                v = getattr(s, f)
                for child in (v if isinstance(v, tuple) else (v,)):
                    if isinstance(child, Stmt):
                        self.stmt(child)
                    elif isinstance(child, PrimExpr):
                        self.loads(child)


def _union(buffer: Buffer, accesses: list) -> BufferRegion:
    region = []
    for d in range(buffer.ndim):
        dims = [acc[d] for acc in accesses]
        first, _, first_inner = dims[0]
        # All the same range, independent of inner loops: keep it exactly as written.
        if not first_inner and all(not inn and expr_equal(r.min, first.min)
                                   and expr_equal(r.extent, first.extent) for r, _, inn in dims):
            region.append(first)
            continue
        region.append(_hull(dims) or Range(IntImm(0, buffer.shape[d].dtype), buffer.shape[d]))
    return BufferRegion(buffer, tuple(region))


def _hull(dims) -> Optional[Range]:
    if any(b is None for _, b, _ in dims):
        return None
    lo, hi = dims[0][1]
    for _, (l2, h2), _ in dims[1:]:
        dl, dh = l2.constant_diff(lo), h2.constant_diff(hi)
        if dl is None or dh is None:
            return None
        lo, hi = (l2 if dl < 0 else lo), (h2 if dh > 0 else hi)
    extent = (hi - lo).plus(1)
    dtype = dims[0][0].min.dtype
    return Range(lo.to_expr(dtype), extent.to_expr(dtype))


def infer_access_regions(block, iter_vars=None, init=None, alloc_buffers=()
                         ) -> Tuple[Tuple[BufferRegion, ...], Tuple[BufferRegion, ...]]:
    """The ``(reads, writes)`` regions of a block, from the loads and stores in its body and
    init (nested blocks contribute their declared regions). Buffers the block allocates are
    left out. Per buffer and dimension: the index itself when every access uses the same index
    that does not depend on loops inside the block (``A[vi]``); else the hull over those loops
    when it is affine with comparable bounds (``A[vi * 16 : vi * 16 + 16]``); else the whole
    dimension. Buffers appear in order of first access. A reduction ``C[i] = C[i] + ...``
    reads ``C`` too (as TVM's script parser infers it).

    Call it with a ``Block``, or with the parts of a block being built:
    ``infer_access_regions(body, iter_vars, init, alloc_buffers)`` (``iter_vars`` is accepted
    for symmetry; block iterators stay symbolic in the regions).
    """
    del iter_vars
    if isinstance(block, Block):
        body, init, alloc_buffers = block.body, block.init, block.alloc_buffers
    else:
        body = block
    col = _Collector({id(b) for b in alloc_buffers})
    for part in (init, body):
        if part is not None:
            col.stmt(part)
    return tuple(tuple(_union(b, acc.items[id(b)]) for b in acc.order)
                 for acc in (col.reads, col.writes))

