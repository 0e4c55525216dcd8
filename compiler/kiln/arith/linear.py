"""Linear forms: an integer expression as ``sum(coef * atom) + const``.

An *atom* is any expression the linear form does not look into (a variable, a floordiv, a
product of two variables, a load, ...). Atoms are identified structurally, with variables by
identity, so ``x // 4`` written twice is one atom. Terms keep the order in which atoms first
appeared, which keeps the printed form close to what the user wrote and makes the
normalisation idempotent.

>>> from kiln.ir import Var
>>> i, j = Var("i"), Var("j")
>>> L = Linear.atom(i).scale(2).add(Linear.atom(j)).scale(2)
>>> [c for _, c in L.items()], L.const
([4, 2], 0)
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Dict, Iterator, Tuple

from ..ir import dtype as dt
from ..ir.expr import Add, Buffer, FloatImm, IntImm, Mul, Node, PrimExpr, Sub, Var
from ..ir.functor import node_fields


# Node -> its key, for as long as the node lives. Nodes are immutable, so a key never changes;
# without this, the simplifier recomputed the keys of shared subexpressions over and over (a
# bicubic grid sample's index expressions: 9.5 million calls, half of a 57 s compile). Weak
# keys: the cache neither keeps nodes alive nor outlives them (a key holds ``id``s of
# variables, which the node keeps alive), and nothing of it is pickled with a node.
_KEYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def key(e) -> object:
    """A hashable key equal for structurally equal expressions (variables and buffers by
    identity)."""
    if isinstance(e, (Var, Buffer)):
        return ("var", id(e))
    if isinstance(e, IntImm):
        return ("int", e.value, e.dtype)
    if isinstance(e, FloatImm):
        return ("float", e.value, e.dtype)
    if isinstance(e, Node) and dataclasses.is_dataclass(e):
        k = _KEYS.get(e)
        if k is None:
            k = (type(e).__name__,) + tuple(key(getattr(e, f)) for f in node_fields(type(e)))
            _KEYS[e] = k
        return k
    if isinstance(e, (tuple, list)):
        return tuple(key(x) for x in e)
    try:
        hash(e)
        return e
    except TypeError:
        return ("obj", id(e))


def wrap(value: int, dtype: str) -> int:
    """``value`` wrapped to the range of integer ``dtype``, as the machine would."""
    b = dt.bits(dtype)
    if dt.is_bool(dtype):
        return int(bool(value))
    value &= (1 << b) - 1
    if not dt.is_uint(dtype) and value >= 1 << (b - 1):
        value -= 1 << b
    return value


class Linear:
    """``const + sum(coef * atom)``; immutable once built (methods return new forms)."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, terms: Dict[object, Tuple[PrimExpr, int]], const: int, dtype: str):
        self.terms, self.const, self.dtype = terms, const, dtype

    @staticmethod
    def constant(value: int, dtype: str = "int32") -> "Linear":
        return Linear({}, value, dtype)

    @staticmethod
    def atom(e: PrimExpr, coef: int = 1) -> "Linear":
        if isinstance(e, IntImm):
            return Linear({}, e.value * coef, e.dtype)
        return Linear({key(e): (e, coef)} if coef else {}, 0, e.dtype)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def items(self) -> Iterator[Tuple[PrimExpr, int]]:
        return iter(self.terms.values())

    def add(self, other: "Linear", sign: int = 1) -> "Linear":
        terms = dict(self.terms)
        for k, (atom, c) in other.terms.items():
            old = terms.get(k)
            total = (old[1] if old else 0) + sign * c
            if total:
                terms[k] = (old[0] if old else atom, total)
            elif old:
                del terms[k]
        return Linear(terms, self.const + sign * other.const, self.dtype)

    def sub(self, other: "Linear") -> "Linear":
        return self.add(other, -1)

    def add_const(self, c: int) -> "Linear":
        return Linear(self.terms, self.const + c, self.dtype)

    def scale(self, c: int) -> "Linear":
        if c == 0:
            return Linear({}, 0, self.dtype)
        return Linear({k: (a, v * c) for k, (a, v) in self.terms.items()}, self.const * c, self.dtype)

    def split(self, d: int) -> Tuple["Linear", "Linear"]:
        """``(A, R)`` with ``self == d * A + R``: A takes the terms whose coefficient ``d``
        divides (divided by d) and ``const // d``; R the other terms and ``const % d`` (so the
        constant part of R lies in ``[0, d)``)."""
        a_terms, r_terms = {}, {}
        for k, (atom, c) in self.terms.items():
            if c % d == 0:
                a_terms[k] = (atom, c // d)
            else:
                r_terms[k] = (atom, c)
        return Linear(a_terms, self.const // d, self.dtype), Linear(r_terms, self.const % d, self.dtype)

    def coef_gcd(self) -> int:
        """gcd of all coefficients and the constant (0 for the zero form)."""
        from math import gcd
        g = abs(self.const)
        for _, c in self.terms.values():
            g = gcd(g, abs(c))
        return g

    def divide_exact(self, g: int) -> "Linear":
        return Linear({k: (a, c // g) for k, (a, c) in self.terms.items()}, self.const // g, self.dtype)

    def to_expr(self) -> PrimExpr:
        """Rebuild an expression: positive terms first (in order of appearance), then the
        negative ones subtracted, then the constant: ``i * 4 + j - k * 2 + 3``."""
        dtype = self.dtype
        c = wrap(self.const, dtype)
        pos = [(a, v) for a, v in self.terms.values() if v > 0]
        neg = [(a, v) for a, v in self.terms.values() if v < 0]
        expr = None
        for a, v in pos:
            t = a if v == 1 else Mul(a, IntImm(wrap(v, dtype), dtype))
            expr = t if expr is None else Add(expr, t)
        if expr is None and neg and c > 0:
            expr, c = IntImm(c, dtype), 0  # "8 - i" rather than "i * -1 + 8"
        for a, v in neg:
            if expr is None:
                expr = Mul(a, IntImm(wrap(v, dtype), dtype))
            else:
                expr = Sub(expr, a if v == -1 else Mul(a, IntImm(wrap(-v, dtype), dtype)))
        if expr is None:
            return IntImm(c, dtype)
        if c > 0:
            expr = Add(expr, IntImm(c, dtype))
        elif c < 0:
            expr = Sub(expr, IntImm(wrap(-c, dtype), dtype))
        return expr
