"""Simplify integer index expressions, bound them, and prove facts about them.

Integer ``+ - *`` and division by positive constants are normalised into a ``Linear`` form
(``sum(coef * atom) + const``); floordiv/floormod are split using the known ranges of the
variables (``Analyzer.bind``); everything else is simplified child by child with local rules
(constant folding, ``select`` of a known condition, ``min``/``max`` of ordered operands).
Float expressions are only constant-folded, in their own precision, never reassociated:
``(a + b) + c`` and ``a + (b + c)`` round differently.

>>> from kiln.ir import Var, Range
>>> i, j = Var("i"), Var("j")
>>> ana = Analyzer({i: Range(0, 8), j: (0, 4)})
>>> ana.simplify((i * 4 + j) // 4) is i
True
>>> ana.can_prove(i * 4 + j < 32)
True
"""
from __future__ import annotations

import functools

import contextlib
import dataclasses
import math
from math import gcd
from typing import Dict, NamedTuple, Optional

import numpy as np

from ..ir import dtype as dt
from ..ir.functor import substitute
from ..ir.expr import (Add, And, BinaryOp, BufferLoad, Cast, CmpOp, Div, EQ, FloatImm,
                       FloorDiv, FloorMod, GE, GT, IntImm, LE, LT, Max, Min, Mul, NE, Not, Or,
                       PrimExpr, Range, Select, Sub, Var, convert)
from .linear import Linear, key, wrap

INF = math.inf
_LINEAR_TYPES = (IntImm, Var, Add, Sub, Mul, FloorDiv, FloorMod)


class IntBound(NamedTuple):
    """Inclusive bounds of an integer expression; ``-inf`` / ``inf`` (floats) when unknown."""
    min: float
    max: float


def _as_range(r) -> Range:
    if isinstance(r, Range):
        return r
    if isinstance(r, (tuple, list)) and len(r) == 2:
        return Range(convert(r[0]), convert(r[1]))
    return Range.from_extent(r)  # a bare extent


def _bool(v: bool) -> IntImm:
    return IntImm(int(bool(v)), "bool")


class Analyzer:
    """Known variable ranges plus the simplifier and prover that use them.

    ``bounds`` maps Var -> Range, or ``(min, extent)``, or an extent. Ranges may be symbolic
    (``Range(0, n)``); constant parts are used for bounds, symbolic ones for proofs.
    """

    def __init__(self, bounds: Optional[dict] = None):
        self.ranges: Dict[Var, Range] = {}
        for v, r in (bounds or {}).items():
            self.bind(v, r)

    def bind(self, var: Var, rng) -> None:
        """Record that ``var`` lies in ``rng`` (a Range, ``(min, extent)`` or extent)."""
        self.ranges[var] = _as_range(rng)

    @contextlib.contextmanager
    def scope(self, bindings: dict):
        """Temporarily bind ``{var: range}``; previous bindings come back on exit."""
        saved = {v: self.ranges.get(v) for v in bindings}
        for v, r in bindings.items():
            self.bind(v, r)
        try:
            yield self
        finally:
            for v, r in saved.items():
                if r is None:
                    self.ranges.pop(v, None)
                else:
                    self.ranges[v] = r

    # ---- public entry points -------------------------------------------------------------
    def simplify(self, expr) -> PrimExpr:
        """The simplified form of ``expr`` under the bound ranges."""
        return _Simplifier(self).simp(convert(expr))

    def can_prove(self, cond) -> bool:
        """True only if ``cond`` holds for every value of the bound variables."""
        s = _Simplifier(self)
        c = s.simp(convert(cond))
        return isinstance(c, IntImm) and bool(c.value)

    def const_int_bound(self, expr) -> IntBound:
        """Inclusive constant bounds of integer ``expr`` (±inf where unknown)."""
        s = _Simplifier(self)
        e = s.simp(convert(expr))
        return s.bound_linear(s.lin(e)) if dt.is_int(e.dtype) else s.bound(e)


# ---- the simplifier ------------------------------------------------------------------------

def _fold_int(op, a: int, b: int, dtype: str):
    if op in (FloorDiv, FloorMod) and b == 0:
        return None  # leave division by zero for the program to show
    f = {Add: lambda: a + b, Sub: lambda: a - b, Mul: lambda: a * b, FloorDiv: lambda: a // b,
         FloorMod: lambda: a % b, Min: lambda: min(a, b), Max: lambda: max(a, b)}.get(op)
    return None if f is None else wrap(f(), dtype)


def _fold_float(op, a: float, b: float, dtype: str):
    # Fold in the program's precision, so folding never changes a result.
    x, y = np.array(a, dtype=dt.element(dtype)), np.array(b, dtype=dt.element(dtype))
    with np.errstate(all="ignore"):
        if op is Add:
            r = x + y
        elif op is Sub:
            r = x - y
        elif op is Mul:
            r = x * y
        elif op is Div:
            r = x / y
        elif op is Min:
            r = np.minimum(x, y)
        elif op is Max:
            r = np.maximum(x, y)
        else:
            return None
    return float(r)


_CMP = {LT: lambda a, b: a < b, LE: lambda a, b: a <= b, GT: lambda a, b: a > b,
        GE: lambda a, b: a >= b, EQ: lambda a, b: a == b, NE: lambda a, b: a != b}


class _Simplifier:
    def __init__(self, ana: Analyzer):
        self.ana = ana
        self.memo: dict = {}
        self.lin_memo: dict = {}
        self.visiting: set = set()

    # ---- dispatch ----
    def simp(self, e: PrimExpr) -> PrimExpr:
        if not isinstance(e, PrimExpr):  # a bare Python number inside a hand-built node
            e = convert(e)
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit[1]
        if type(e) in _LINEAR_TYPES and dt.is_int(e.dtype):
            r = self.lin(e).to_expr()
            if type(r) is type(e) and key(r) == key(e):
                r = e  # already canonical: share it, so callers can test "changed" by identity
        else:
            r = self.generic(e)
        self.memo[id(e)] = (e, r)  # keep e alive so its id stays unique
        return r

    def lin(self, e: PrimExpr) -> Linear:
        hit = self.lin_memo.get(id(e))
        if hit is not None:
            return hit[1]
        r = self._lin(e)
        self.lin_memo[id(e)] = (e, r)
        return r

    def _lin(self, e: PrimExpr) -> Linear:
        t = type(e)
        if t is IntImm:
            return Linear.constant(e.value, e.dtype)
        if t is Var:
            return Linear.atom(e)
        if t in (Add, Sub) and e.a.dtype == e.b.dtype:
            return self._merge_divmod(self.lin(e.a).add(self.lin(e.b), 1 if t is Add else -1))
        if t is Mul:
            la, lb = self.lin(e.a), self.lin(e.b)
            if la.is_const:
                return lb.scale(la.const)
            if lb.is_const:
                return la.scale(lb.const)
            return Linear.atom(Mul(la.to_expr(), lb.to_expr()))
        if t in (FloorDiv, FloorMod):
            la, lb = self.lin(e.a), self.lin(e.b)
            if lb.is_const and lb.const > 0:
                return self.divmod(la, lb.const, t is FloorMod)
            if la.is_const and lb.is_const:
                v = _fold_int(t, la.const, lb.const, e.dtype)
                if v is not None:
                    return Linear.constant(v, e.dtype)
            return Linear.atom(t(la.to_expr(), lb.to_expr()))
        g = self.generic(e) if t not in _LINEAR_TYPES else e
        if type(g) in _LINEAR_TYPES and g is not e:
            return self.lin(g)
        return Linear.atom(g)

    def _merge_divmod(self, L: Linear) -> Linear:
        """``(x // c) * (k*c) + (x % c) * k  ->  x * k``: undoes split-then-fuse. Also
        ``(x % m) // c * (k*c) + (x % c) * k  ->  (x % m) * k`` when c divides m (the middle
        piece of a fuse of three or more loops)."""
        changed = True
        while changed:
            changed = False
            for mkey, (atom, k) in L.terms.items():
                if type(atom) is not FloorMod or not _pos_const(atom.b):
                    continue
                c, x = atom.b.value, key(atom.a)
                for dkey, (d, dk) in L.terms.items():
                    if type(d) is not FloorDiv or not _pos_const(d.b) or d.b.value != c or dk != k * c:
                        continue
                    y = d.a
                    if key(y) == x or (type(y) is FloorMod and key(y.a) == x and _pos_const(y.b)
                                       and y.b.value % c == 0):
                        rest = {kk: v for kk, v in L.terms.items() if kk not in (dkey, mkey)}
                        L = Linear(rest, L.const, L.dtype).add(self.lin(y).scale(k))
                        changed = True
                        break
                if changed:
                    break
        return L

    def divmod(self, L: Linear, c: int, mod: bool) -> Linear:
        """floordiv / floormod of the form ``L`` by the positive constant ``c``."""
        if L.is_const:
            return Linear.constant(L.const % c if mod else L.const // c, L.dtype)
        if c == 1:
            return Linear.constant(0, L.dtype) if mod else L
        # (x // a) // c == x // (a * c); (x % a) % c == x % c when c divides a.
        if len(L.terms) == 1 and L.const == 0:
            (atom, k), = L.items()
            if k == 1 and isinstance(getattr(atom, "b", None), IntImm) and atom.b.value > 0:
                a = atom.b.value
                if type(atom) is FloorDiv and not mod:
                    return self.divmod(self.lin(atom.a), a * c, False)
                if type(atom) is FloorMod and mod and a % c == 0:
                    return self.divmod(self.lin(atom.a), c, True)
        # d | c and L == d*A + R with 0 <= R < d:  L // c == A // (c/d),
        # L % c == d * (A % (c/d)) + R.  Take the largest such d (d == c: the plain split).
        cands = sorted({gcd(abs(v), c) for _, v in L.items()} | {c}, reverse=True)
        for d in cands:
            if d <= 1:
                break
            A, R = L.split(d)
            lo, hi = self.bound_linear(R)
            if lo >= 0 and hi < d:
                if d == c:
                    return R if mod else A
                inner = self.divmod(A, c // d, mod)
                return inner.scale(d).add(R) if mod else inner
        # Always valid: L == c*Q + R, so L // c == Q + R // c and L % c == R % c.
        Q, R = L.split(c)
        lo, hi = self.bound_linear(R)
        if lo > -INF and hi < INF and lo // c == hi // c:
            k = int(lo // c)
            return R.add_const(-k * c) if mod else Q.add_const(k)
        g = gcd(R.coef_gcd(), c)
        if g > 1:  # (g*r) // (g*c') == r // c';  (g*r) % (g*c') == g * (r % c')
            inner = self._divmod_atom(R.divide_exact(g), c // g, mod)
            return inner.scale(g) if mod else Q.add(inner)
        inner = self._divmod_atom(R, c, mod)
        return inner if mod else Q.add(inner)

    def _divmod_atom(self, R: Linear, c: int, mod: bool) -> Linear:
        if R.is_const:
            return Linear.constant(R.const % c if mod else R.const // c, R.dtype)
        if c == 1:
            return Linear.constant(0, R.dtype) if mod else R
        op = FloorMod if mod else FloorDiv
        return Linear.atom(op(R.to_expr(), IntImm(c, R.dtype)))

    # ---- bounds ----
    def bound_linear(self, L: Linear) -> IntBound:
        lo = hi = L.const
        for atom, c in L.items():
            b = self.bound(atom)
            x, y = _mul_bound(b, IntBound(c, c))
            lo, hi = lo + x, hi + y
        return IntBound(lo, hi)

    def bound(self, e: PrimExpr) -> IntBound:
        t = type(e)
        if t is IntImm:
            return IntBound(e.value, e.value)
        if dt.is_bool(e.dtype):
            return IntBound(0, 1)
        if not dt.is_int(e.dtype):
            return IntBound(-INF, INF)
        if t is Var:
            r = self.ana.ranges.get(e)
            if r is None or id(e) in self.visiting:  # a range that mentions its own var
                return IntBound(-INF, INF)
            self.visiting.add(id(e))
            try:
                lo, ext = self.bound(r.min), self.bound(r.extent)
            finally:
                self.visiting.discard(id(e))
            return IntBound(lo.min, lo.max + ext.max - 1)
        if t in (Add, Sub, Mul, FloorDiv, FloorMod):
            a, b = self.bound(e.a), self.bound(e.b)
            if t is Add:
                return IntBound(a.min + b.min, a.max + b.max)
            if t is Sub:
                return IntBound(a.min - b.max, a.max - b.min)
            if t is Mul:
                return _mul_bound(a, b)
            if b.min > 0:
                if t is FloorDiv:
                    corners = [_fdiv(x, y) for x in (a.min, a.max) for y in (b.min, b.max)]
                    return IntBound(min(corners), max(corners))
                if a.min >= 0 and a.max < b.min:
                    return a
                return IntBound(0, min(b.max - 1, a.max) if a.min >= 0 else b.max - 1)
            return IntBound(-INF, INF)
        if t in (Min, Max):
            a, b = self.bound(e.a), self.bound(e.b)
            f = min if t is Min else max
            return IntBound(f(a.min, b.min), f(a.max, b.max))
        if t is Select:
            a, b = self.bound(e.true_value), self.bound(e.false_value)
            return IntBound(min(a.min, b.min), max(a.max, b.max))
        if t is Cast and dt.is_int(e.value.dtype) and dt.bits(e.value.dtype) <= dt.bits(e.dtype) \
                and dt.is_uint(e.value.dtype) <= dt.is_uint(e.dtype):
            b, (lo, hi) = self.bound(e.value), _int_range(e.value.dtype)
            return IntBound(max(b.min, lo), min(b.max, hi))
        if t in (Cast, BufferLoad):  # anything the type can hold
            return IntBound(*_int_range(e.dtype))
        return IntBound(-INF, INF)

    # ---- proofs on linear forms ----
    def prove_negative(self, d: Linear, strict: bool) -> bool:
        """Prove ``d < 0`` (strict) or ``d <= 0``, substituting symbolic ranges
        (``i < n`` when ``i`` in ``[0, n)``) when constant bounds are not enough."""
        for _ in range(4):
            hi = self.bound_linear(d).max
            if hi < 0 or (not strict and hi <= 0):
                return True
            new, changed = Linear.constant(d.const, d.dtype), False
            for atom, c in d.items():
                r = self.ana.ranges.get(atom) if isinstance(atom, Var) else None
                if r is not None and not (isinstance(r.min, IntImm) and isinstance(r.extent, IntImm)):
                    top = self.lin(r.min).add(self.lin(r.extent)).add_const(-1)
                    new = new.add((top if c > 0 else self.lin(r.min)).scale(c))
                    changed = True
                else:
                    new = new.add(Linear.atom(atom, c))
            if not changed:
                return False
            d = new
        return False

    def decide(self, op, a: PrimExpr, b: PrimExpr) -> Optional[bool]:
        """The truth of integer comparison ``a op b`` if the ranges decide it, else None."""
        d = self.lin(a).sub(self.lin(b))
        neg = d.scale(-1)
        if op in (LT, GE):
            if self.prove_negative(d, True):
                return op is LT
            if self.prove_negative(neg, False):
                return op is GE
        elif op in (LE, GT):
            if self.prove_negative(d, False):
                return op is LE
            if self.prove_negative(neg, True):
                return op is GT
        else:
            if d.is_const:
                return (d.const == 0) == (op is EQ)
            if self.prove_negative(d, True) or self.prove_negative(neg, True):
                return op is NE
        return None

    # ---- everything that is not an integer linear form ----
    def generic(self, e: PrimExpr) -> PrimExpr:
        t = type(e)
        if t in (IntImm, FloatImm, Var):
            return e
        if isinstance(e, BinaryOp):
            return self.binary(e)
        if t is Not:
            a = self.simp(e.a)
            if isinstance(a, IntImm):
                return _bool(not a.value)
            if type(a) is Not:
                return a.a
            return e if a is e.a else Not(a)
        if t is Select:
            c = self.simp(e.condition)
            tv, fv = self.simp(e.true_value), self.simp(e.false_value)
            if isinstance(c, IntImm):
                return tv if c.value else fv
            if key(tv) == key(fv):
                return tv
            if c is e.condition and tv is e.true_value and fv is e.false_value:
                return e
            return Select(c, tv, fv)
        if t is Cast:
            v = self.simp(e.value)
            if v.dtype == e.dtype:
                return v
            if isinstance(v, (IntImm, FloatImm)):
                folded = _fold_cast(v, e.dtype)
                if folded is not None:
                    return folded
            return e if v is e.value else Cast(e.dtype, v)
        return self._rebuild(e)

    def _rebuild(self, e):
        """Simplify the expression children of any other node (loads, calls, te nodes)."""
        changes = {}
        for f in dataclasses.fields(e):
            old = getattr(e, f.name)
            if isinstance(old, PrimExpr):
                new = self.simp(old)
            elif isinstance(old, tuple) and old and all(isinstance(x, PrimExpr) for x in old):
                new = tuple(self.simp(x) for x in old)
                new = old if all(a is b for a, b in zip(new, old)) else new
            else:
                continue
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(e, **changes) if changes else e

    def binary(self, e: BinaryOp) -> PrimExpr:
        t = type(e)
        a, b = self.simp(e.a), self.simp(e.b)
        ca, cb = isinstance(a, (IntImm, FloatImm)), isinstance(b, (IntImm, FloatImm))
        is_int = dt.is_int(a.dtype) and a.dtype == b.dtype
        if isinstance(e, CmpOp):
            if ca and cb:
                return _bool(_CMP[t](a.value, b.value))
            if is_int:
                r = self.decide(t, a, b)
                if r is not None:
                    return _bool(r)
        elif t in (And, Or):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, IntImm):
                    absorbing = (x.value == 0) if t is And else (x.value != 0)
                    return x if absorbing else y
            if key(a) == key(b):
                return a
        elif ca and cb:
            if dt.is_float(e.dtype):
                v = _fold_float(t, a.value, b.value, e.dtype)
                if v is not None:
                    return FloatImm(v, e.dtype)
            else:
                v = _fold_int(t, a.value, b.value, e.dtype)
                if v is not None:
                    return IntImm(v, e.dtype)
        elif t in (Min, Max) and is_int:
            if key(a) == key(b):
                return a
            a_le_b = self.decide(LE, a, b)
            if a_le_b is not None:
                return (a if a_le_b else b) if t is Min else (b if a_le_b else a)
            b_le_a = self.decide(LE, b, a)
            if b_le_a:
                return b if t is Min else a
        if a is e.a and b is e.b:
            return e
        return t(a, b)


def _pos_const(e) -> bool:
    return isinstance(e, IntImm) and e.value > 0


def _fdiv(x, y):
    """floor(x / y) for y > 0, with infinite ends."""
    if y == INF:
        return x if x in (INF, -INF) else (0 if x >= 0 else -1)
    if x in (INF, -INF):
        return x
    return x // y


def _mul_bound(a: IntBound, b: IntBound) -> IntBound:
    def m(x, y):
        return 0 if x == 0 or y == 0 else x * y
    corners = [m(x, y) for x in (a.min, a.max) for y in (b.min, b.max)]
    return IntBound(min(corners), max(corners))


def _fold_cast(v, dtype: str):
    e = dt.element(dtype)
    if dt.is_float(e):
        return FloatImm(float(np.array(v.value).astype(e)), e)
    if dt.is_bool(e):
        return IntImm(int(bool(v.value)), e)
    if isinstance(v, FloatImm):
        if not math.isfinite(v.value):
            return None  # undefined in the machine; leave it to the target
        return IntImm(wrap(int(v.value), e), e)  # float -> int truncates toward zero
    return IntImm(wrap(v.value, e), e)


# ---- module-level conveniences -----------------------------------------------------------

def simplify(expr, bounds: Optional[dict] = None) -> PrimExpr:
    """Simplify ``expr`` knowing ``bounds`` (Var -> Range or ``(min, extent)``).

    >>> simplify((i_0 * 2 + i_1) * 2 + i_2)          # doctest: +SKIP
    i_0 * 4 + i_1 * 2 + i_2
    >>> simplify((i * 4 + j) % 4, {j: (0, 4)})       # doctest: +SKIP
    j
    """
    return Analyzer(bounds).simplify(expr)


def unit_step(e, var) -> bool:
    """True when ``e`` grows by exactly 1 as ``var`` does (a contiguous index along ``var``).

    >>> unit_step(i * 4 + j, j), unit_step(i * 4 + j, i)     # doctest: +SKIP
    (True, False)
    """
    step = simplify(Sub(substitute(e, {var: var + 1}), e))
    return getattr(step, "value", None) == 1


def can_prove(cond, bounds: Optional[dict] = None) -> bool:
    """True if ``cond`` is true for all variable values in ``bounds``; False means "not shown".

    >>> can_prove(i < 8, {i: (0, 8)})                 # doctest: +SKIP
    True
    """
    return Analyzer(bounds).can_prove(cond)


def const_int_bound(expr, bounds: Optional[dict] = None) -> IntBound:
    """Inclusive ``IntBound(min, max)`` of an integer expression (``±inf`` if unknown).

    >>> const_int_bound(i * 4 + j, {i: (0, 8), j: (0, 4)})   # doctest: +SKIP
    IntBound(min=0, max=31)
    """
    return Analyzer(bounds).const_int_bound(expr)


@functools.lru_cache(maxsize=None)
def _int_range(dtype: str):
    """(min, max) an integer dtype holds, from its width: numpy's iinfo knows no int4/int2."""
    if not dt.is_int(dtype):
        info = np.iinfo(dt.element(dtype))
        return int(info.min), int(info.max)
    bits = dt.bits(dtype)
    return (0, (1 << bits) - 1) if dt.is_uint(dtype) else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
