"""Structural equality and hashing of IR.

Two programs are structurally equal when they have the same shape of nodes and the same
constants, with variables and buffers matched one-to-one by where they first appear (names of
variables and buffers do not matter; block names do). This is what round-trip and pass tests
compare.

>>> from .expr import Var
>>> a, b = Var("i"), Var("j")
>>> structural_equal(a + 1, b + 1), structural_equal(a + a, a + b)
(True, False)
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .expr import Buffer, Node, Var
from .graph import GraphVar
from .function import IRModule
from .functor import node_fields


class _Matcher:
    def __init__(self):
        self.lmap, self.rmap = {}, {}
        self.path = []

    def eq(self, a, b) -> bool:
        if type(a) is not type(b):
            return False
        if isinstance(a, (Var, Buffer, GraphVar)):
            return self._match_def(a, b)
        if isinstance(a, IRModule):
            if sorted(a.functions) != sorted(b.functions):
                return False
            # Each function is its own scope: a symbolic dim shared by a graph function and a
            # tensor program it calls is printed (and parsed back) once per function.
            return all(self._fresh_scope(k, a.functions[k], b.functions[k])
                       for k in sorted(a.functions)) and self.eq(a.attrs, b.attrs)
        if isinstance(a, Node):
            return all(self._at(name, getattr(a, name), getattr(b, name))
                       for name in node_fields(type(a)))
        if isinstance(a, (tuple, list)):
            return len(a) == len(b) and all(self._at(str(i), x, y) for i, (x, y) in enumerate(zip(a, b)))
        if isinstance(a, dict):
            return sorted(a) == sorted(b) and all(self._at(str(k), a[k], b[k]) for k in sorted(a))
        if isinstance(a, float):
            return a == b or (math.isnan(a) and math.isnan(b))
        if isinstance(a, np.ndarray):  # constants; NaN equals NaN here
            return a.shape == b.shape and a.dtype == b.dtype and bool(
                np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        return a == b

    def _fresh_scope(self, label, a, b) -> bool:
        saved = self.lmap, self.rmap
        self.lmap, self.rmap = {}, {}
        try:
            return self._at(label, a, b)
        finally:
            self.lmap, self.rmap = saved

    def _at(self, label, a, b) -> bool:
        self.path.append(label)
        ok = self.eq(a, b)
        if ok:
            self.path.pop()
        return ok

    def _match_def(self, a, b) -> bool:
        if id(a) in self.lmap:
            return self.lmap[id(a)] is b
        if id(b) in self.rmap:
            return False
        if isinstance(a, Var):
            ok = a.dtype == b.dtype
        elif isinstance(a, GraphVar):
            ok = self._at("ty", a.ty, b.ty)
        else:
            ok = (a.dtype == b.dtype and a.scope == b.scope
                  and self._at("shape", a.shape, b.shape))
        if ok:
            self.lmap[id(a)], self.rmap[id(b)] = b, a
        return ok


def structural_equal(a, b) -> bool:
    """True if ``a`` and ``b`` are the same program up to renaming of variables and buffers."""
    return _Matcher().eq(a, b)


def assert_structural_equal(a, b) -> None:
    """Raise ``AssertionError`` showing where ``a`` and ``b`` first differ, and both as script."""
    m = _Matcher()
    if not m.eq(a, b):
        where = ".".join(m.path) or "<root>"
        raise AssertionError(f"not structurally equal; first difference at {where}\n"
                             f"--- left ---\n{_text(a)}\n--- right ---\n{_text(b)}")


def _text(x) -> str:
    try:
        return x.script() if isinstance(x, Node) else repr(x)
    except Exception:
        return object.__repr__(x)


def structural_hash(node) -> int:
    """A hash consistent with ``structural_equal``: equal programs hash equal."""
    ids = {}

    def h(x):
        if isinstance(x, (Var, Buffer, GraphVar)):
            if id(x) not in ids:
                ids[id(x)] = len(ids)
                if isinstance(x, GraphVar):
                    return hash(("def", "GraphVar", h(x.ty)))
                extra = h(x.shape) if isinstance(x, Buffer) else 0
                return hash(("def", type(x).__name__, x.dtype, extra))
            return hash(("use", ids[id(x)]))
        if isinstance(x, IRModule):
            out = []
            for k in sorted(x.functions):  # per-function scopes, as in structural_equal
                ids.clear()
                out.append((k, h(x.functions[k])))
            return hash(("mod",) + tuple(out))
        if isinstance(x, Node) and dataclasses.is_dataclass(x):
            return hash((type(x).__name__,) + tuple(h(getattr(x, f)) for f in node_fields(type(x))))
        if isinstance(x, (tuple, list)):
            return hash(tuple(h(v) for v in x))
        if isinstance(x, dict):
            return hash(tuple((k, h(x[k])) for k in sorted(x)))
        if hasattr(x, "tobytes"):
            return hash(x.tobytes())
        return hash(x)
    return h(node)
