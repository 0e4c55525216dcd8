"""Simplify every expression of a statement or function, using the ranges of the loops and
block iterators that enclose it.

>>> simplify_stmt(func.body)          # doctest: +SKIP
"""
from __future__ import annotations

from typing import Optional

from ..ir.expr import GE, GT, LE, LT, And, IntImm, PrimExpr, Range, Var
from ..ir.function import IRModule, PrimFunc
from ..ir.stmt import (Block, BlockRealize, BufferRegion, BufferStore, Evaluate, For, IfThenElse,
                       IterVar, SeqStmt, Stmt)
from .analyzer import Analyzer


def simplify_stmt(stmt, bounds: Optional[dict] = None, analyzer: Optional[Analyzer] = None):
    """Simplify all expressions in ``stmt`` (a Stmt, PrimFunc or IRModule).

    Loop variables are known to lie in ``[min, min + extent)`` inside their loop, block
    iterators in their domain inside their block. A block predicate (``T.where``) that is
    provably true becomes ``True``; an ``if`` whose condition is provably true becomes its
    then-branch, one provably false (with no else) nothing, and a loop of nothing goes.
    Unchanged parts are shared with the input.
    """
    ana = analyzer or Analyzer(bounds)
    if isinstance(stmt, IRModule):
        funcs = {n: simplify_stmt(f, analyzer=ana) if isinstance(f, PrimFunc) else f
                 for n, f in stmt.items()}
        return IRModule(funcs, stmt.attrs)
    if isinstance(stmt, PrimFunc):
        body = _Walker(ana).stmt(stmt.body)
        return stmt if body is stmt.body else stmt.with_body(body)
    return _Walker(ana).stmt(stmt)


class _Walker:
    def __init__(self, ana: Analyzer):
        self.ana = ana

    def expr(self, e: PrimExpr) -> PrimExpr:
        return self.ana.simplify(e)

    def exprs(self, es):
        new = tuple(self.expr(e) for e in es)
        return es if all(a is b for a, b in zip(new, es)) else new

    def range(self, r: Range) -> Range:
        lo, ext = self.expr(r.min), self.expr(r.extent)
        return r if lo is r.min and ext is r.extent else Range(lo, ext)

    def region(self, br: BufferRegion) -> BufferRegion:
        new = tuple(self.range(r) for r in br.region)
        return br if all(a is b for a, b in zip(new, br.region)) else BufferRegion(br.buffer, new)

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, SeqStmt):
            new = tuple(self.stmt(x) for x in s.seq)
            if all(a is b for a, b in zip(new, s.seq)):
                return s
            return SeqStmt(tuple(x for x in new if not _is_nothing(x)))
        if isinstance(s, For):
            lo, ext = self.expr(s.min), self.expr(s.extent)
            with self.ana.scope({s.loop_var: Range(lo, ext)}):
                body = self.stmt(s.body)
            if _is_nothing(body):
                return body
            if lo is s.min and ext is s.extent and body is s.body:
                return s
            return For(s.loop_var, lo, ext, s.kind, body, s.thread_binding, s.annotations)
        if isinstance(s, BufferStore):
            value, idx = self.expr(s.value), self.exprs(s.indices)
            return s if value is s.value and idx is s.indices else BufferStore(s.buffer, value, idx)
        if isinstance(s, IfThenElse):
            cond = self.expr(s.condition)
            if isinstance(cond, IntImm) and cond.value:
                return self.stmt(s.then_case)
            if isinstance(cond, IntImm):
                return NOTHING if s.else_case is None else self.stmt(s.else_case)
            on_true, on_false = _narrowed(cond, self.ana)
            with self.ana.scope(on_true):
                then = self.stmt(s.then_case)
            with self.ana.scope(on_false):
                other = None if s.else_case is None else self.stmt(s.else_case)
            if cond is s.condition and then is s.then_case and other is s.else_case:
                return s
            return IfThenElse(cond, then, other)
        if isinstance(s, BlockRealize):
            values = self.exprs(s.iter_values)
            pred = self.expr(s.predicate)
            if isinstance(pred, IntImm) and pred.value and pred.dtype == "bool":
                pred = s.predicate if _is_true(s.predicate) else IntImm(1, "bool")
            block = self.block(s.block)
            if values is s.iter_values and pred is s.predicate and block is s.block:
                return s
            return BlockRealize(values, pred, block)
        if isinstance(s, Block):
            return self.block(s)
        if isinstance(s, Evaluate):
            v = self.expr(s.value)
            return s if v is s.value else Evaluate(v)
        return s

    def block(self, b: Block) -> Block:
        iters = tuple(IterVar(iv.var, r, iv.kind) if (r := self.range(iv.dom)) is not iv.dom else iv
                      for iv in b.iter_vars)
        iters = b.iter_vars if all(a is c for a, c in zip(iters, b.iter_vars)) else iters
        with self.ana.scope({iv.var: iv.dom for iv in iters}):
            reads = tuple(self.region(r) for r in b.reads)
            writes = tuple(self.region(r) for r in b.writes)
            body = self.stmt(b.body)
            init = None if b.init is None else self.stmt(b.init)
        same = (iters is b.iter_vars and body is b.body and init is b.init
                and all(x is y for x, y in zip(reads, b.reads))
                and all(x is y for x, y in zip(writes, b.writes)))
        if same:
            return b
        return Block(b.name_hint, iters, reads, writes, body, init, b.alloc_buffers, b.annotations)


# What an ``if`` that never runs, and a loop around nothing but that, simplify to.
NOTHING = SeqStmt(())


def _is_nothing(s) -> bool:
    return isinstance(s, SeqStmt) and not s.seq


def _is_true(e) -> bool:
    return isinstance(e, IntImm) and e.dtype == "bool" and e.value == 1


def _narrowed(cond, ana: Analyzer):
    """Loop-variable ranges that ``cond`` narrows: (bindings where it holds, where it fails).
    A loop partitioned into ``if i < 15: ... else: ...`` simplifies each side knowing which
    iterations it runs (a guard ``i * 64 + j < 1000`` folds away in the first)."""
    on_true, on_false = {}, {}
    terms = [cond]
    while terms:
        c = terms.pop()
        if isinstance(c, And):
            terms += [c.a, c.b]
            continue
        var, limit = _var_below(c)
        r = ana.ranges.get(var) if var is not None else None
        if r is None or not (isinstance(r.min, IntImm) and isinstance(r.extent, IntImm)):
            continue
        lo, hi = r.min.value, r.min.value + r.extent.value      # [lo, hi)
        t_hi = min(hi, limit)
        if t_hi > lo:
            on_true[var] = Range(IntImm(lo, r.min.dtype), IntImm(t_hi - lo, r.extent.dtype))
        if cond is c and max(lo, limit) < hi:   # a single comparison: the else side too
            f_lo = max(lo, limit)
            on_false[var] = Range(IntImm(f_lo, r.min.dtype), IntImm(hi - f_lo, r.extent.dtype))
    return on_true, on_false


def _var_below(c):
    """(v, n) when ``c`` says ``v < n`` for a variable v and a constant n, else (None, None)."""
    if isinstance(c, LT) and isinstance(c.a, Var) and isinstance(c.b, IntImm):
        return c.a, c.b.value
    if isinstance(c, LE) and isinstance(c.a, Var) and isinstance(c.b, IntImm):
        return c.a, c.b.value + 1
    if isinstance(c, GT) and isinstance(c.b, Var) and isinstance(c.a, IntImm):
        return c.b, c.a.value
    if isinstance(c, GE) and isinstance(c.b, Var) and isinstance(c.a, IntImm):
        return c.b, c.a.value + 1
    return None, None
