"""Derived dimensions: tensor dimensions that are expressions of symbolic ones.

A shape such as ``(past + n, 64)`` or ``(b * s, d)`` cannot be bound from an argument the way a
plain symbolic dimension ``n`` is; the runtime has to *compute* it from the bound dimensions and
check (or allocate) tensors against the result. Kernel signatures (``kiln_kernel_abi.h``,
``kiln_derived_dim_t``) and VM function signatures (``docs/executable-format.md``, format
version 3) carry such dimensions in one encoding, built here:

- the plain symbolic dimensions of a signature are numbered ``0 .. num_sym - 1`` (each must
  appear as a plain entry of some parameter shape: that is where its value comes from);
- every other expression becomes a list of *derived* dimensions in three-address form
  (``DerivedDim(op, a, b)``): derived ``j`` has the number ``num_sym + j`` and the value
  ``a op b``, where an operand is a constant (its ``*_const`` flag set) or the number of a
  plain dimension or of an earlier derived one; common subexpressions share one entry;
- a shape entry is then ``>= 0`` (fixed) or ``-1 - k`` (dimension number ``k``).

Operators: ``+ - * // %`` (floor division and modulo), ``min``, ``max``; integer casts are
transparent. The runtime evaluates with overflow checks; division by zero is an error there.

>>> from kiln.ir import Var
>>> past, n = Var("past", "int64"), Var("n", "int64")
>>> t = DimTable(["past", "n"])
>>> t.code(past + n), t.code((past + n) * 2), t.code(past)
(-3, -4, -1)
>>> t.names()
['past', 'n', 'past + n', '(past + n) * 2']
>>> t.evaluate({"past": 5, "n": 3})
[5, 3, 8, 16]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import dtype as dt
from . import expr as E

ADD, SUB, MUL, FLOORDIV, FLOORMOD, MIN, MAX = range(1, 8)
A_CONST, B_CONST = 1, 2
_SYMBOL = {ADD: "+", SUB: "-", MUL: "*", FLOORDIV: "//", FLOORMOD: "%", MIN: "min", MAX: "max"}
_NODE_OPS = {E.Add: ADD, E.Sub: SUB, E.Mul: MUL, E.FloorDiv: FLOORDIV, E.FloorMod: FLOORMOD,
             E.Min: MIN, E.Max: MAX}
# The bytes of one entry, on disk and in the kernel ABI struct: u32 op, u32 flags, i64 a, i64 b.
ENTRY_SIZE = 24


class DimError(ValueError):
    """An expression that cannot be a derived dimension (an unbound variable, an operator the
    runtime does not evaluate); the message names it."""


@dataclass(frozen=True)
class DerivedDim:
    """``a op b``; an operand is a constant when its flag is set, else a dimension number."""
    op: int
    flags: int
    a: int
    b: int


def apply(op: int, a: int, b: int) -> int:
    """``a op b`` as the runtime computes it (floor division and modulo); ``ZeroDivisionError``
    on division by zero."""
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == MUL:
        return a * b
    if op == FLOORDIV:
        return a // b
    if op == FLOORMOD:
        return a % b
    if op == MIN:
        return min(a, b)
    if op == MAX:
        return max(a, b)
    raise DimError(f"unknown derived-dimension op {op}")


def check_table(sym_names: Sequence[str], derived: Sequence[DerivedDim], where: str) -> None:
    """The loader's rules for a table: known ops and flags, operands referring only to plain or
    earlier derived dimensions. Raises ``DimError``."""
    for j, d in enumerate(derived):
        self_k = len(sym_names) + j
        if d.op not in _SYMBOL or d.flags & ~(A_CONST | B_CONST):
            raise DimError(f"{where}: derived dimension {j} has unknown op {d.op} or flags {d.flags:#x}")
        for flag, v in ((A_CONST, d.a), (B_CONST, d.b)):
            if not d.flags & flag and not 0 <= v < self_k:
                raise DimError(f"{where}: derived dimension {j} refers to dimension {v}; it may refer "
                               f"only to dimensions 0..{self_k - 1}")


def format_dims(sym_names: Sequence[str], derived: Sequence[DerivedDim]) -> List[str]:
    """Display names of every dimension number: the plain names, then each derived dimension as
    its expression (``past + n``; nested ones parenthesised), as the runtime prints them."""
    names = list(sym_names)
    inner: List[str] = list(sym_names)  # as an operand: parenthesised unless a name or a call
    for d in derived:
        a = str(d.a) if d.flags & A_CONST else inner[d.a]
        b = str(d.b) if d.flags & B_CONST else inner[d.b]
        if d.op in (MIN, MAX):
            s = f"{_SYMBOL[d.op]}({a}, {b})"
            names.append(s)
            inner.append(s)
        else:
            s = f"{a} {_SYMBOL[d.op]} {b}"
            names.append(s)
            inner.append(f"({s})")
    return names


class DimTable:
    """The dimensions of one signature: plain symbolic ones by name (fixed up front, since the
    derived ones are numbered after them), derived ones added as expressions are coded."""

    def __init__(self, sym_names: Sequence[str] = ()):
        self.sym_names: List[str] = list(sym_names)
        self.derived: List[DerivedDim] = []
        self._memo: Dict[DerivedDim, int] = {}

    def code(self, e, where: str = "dimension") -> int:
        """The shape entry for ``e`` (an int, or an int PrimExpr): ``>= 0`` fixed, else
        ``-1 - k``. Raises ``DimError`` for a negative constant or an unbound variable."""
        is_const, v = self._operand(e, where)
        if is_const:
            if v < 0:
                raise DimError(f"{where}: negative dimension {v}")
            return v
        return -1 - v

    def _operand(self, e, where: str) -> Tuple[bool, int]:
        if isinstance(e, int):
            return True, e
        if isinstance(e, E.IntImm):
            return True, int(e.value)
        if isinstance(e, E.Var):
            if e.name not in self.sym_names:
                raise DimError(f"{where}: dimension '{e.name}' is bound by no parameter shape "
                               f"(bound: {self.sym_names})")
            return False, self.sym_names.index(e.name)
        if isinstance(e, E.Cast) and dt.is_int(e.dtype):
            return self._operand(e.value, where)
        op = _NODE_OPS.get(type(e))
        if op is None:
            raise DimError(f"{where}: dimension {e!r} uses {type(e).__name__}, which a derived "
                           "dimension cannot (it may use + - * // % min max)")
        ac, a = self._operand(e.a, where)
        bc, b = self._operand(e.b, where)
        if ac and bc:
            return True, apply(op, a, b)
        d = DerivedDim(op, (A_CONST if ac else 0) | (B_CONST if bc else 0), a, b)
        if d not in self._memo:
            self._memo[d] = len(self.sym_names) + len(self.derived)
            self.derived.append(d)
        return False, self._memo[d]

    def names(self) -> List[str]:
        """Display names of every dimension number (``format_dims``)."""
        return format_dims(self.sym_names, self.derived)

    def evaluate(self, values: Mapping[str, int]) -> List[int]:
        """Every dimension's value given the plain ones by name."""
        return evaluate(self.sym_names, self.derived, values)


def evaluate(sym_names: Sequence[str], derived: Sequence[DerivedDim],
             values: Mapping[str, int]) -> List[int]:
    """Values of every dimension number, given the plain ones (by name)."""
    out = [int(values[s]) for s in sym_names]
    for d in derived:
        a = d.a if d.flags & A_CONST else out[d.a]
        b = d.b if d.flags & B_CONST else out[d.b]
        out.append(apply(d.op, a, b))
    return out


def upper_bound(e, bounds: Mapping[str, int]) -> Optional[int]:
    """The largest value ``e`` takes when every symbolic dimension ``v`` ranges over
    ``0 .. bounds[v]`` (interval arithmetic: may over-estimate, never under-estimate); None if
    some dimension of ``e`` has no bound or an operator is not handled."""
    r = _interval(e, bounds)
    return None if r is None else max(r[1], 0)


def _interval(e, bounds) -> Optional[Tuple[int, int]]:
    if isinstance(e, int):
        return e, e
    if isinstance(e, E.IntImm):
        return int(e.value), int(e.value)
    if isinstance(e, E.Var):
        return (0, int(bounds[e.name])) if e.name in bounds else None
    if isinstance(e, E.Cast):
        return _interval(e.value, bounds)
    op = _NODE_OPS.get(type(e))
    if op is None:
        return None
    a, b = _interval(e.a, bounds), _interval(e.b, bounds)
    if a is None or b is None:
        return None
    if op in (ADD, SUB, MUL, MIN, MAX):
        vals = [apply(op, x, y) for x in a for y in b]
        if op in (MIN, MAX):
            return apply(op, a[0], b[0]), apply(op, a[1], b[1])
        return min(vals), max(vals)
    if op == FLOORDIV and b[0] > 0:
        vals = [x // y for x in a for y in b]
        return min(vals), max(vals)
    if op == FLOORMOD and b[0] > 0:
        return 0, b[1] - 1
    return None


def with_bounds(mod, bounds: Mapping[str, int]):
    """``mod`` with upper bounds on symbolic dimensions (``{"n": 64}``) attached to every graph
    function whose parameters have them (attribute ``"kiln.bounds"``): compiling then plans
    symbolic-size intermediates in the arena at their largest size, and the VM refuses a call
    that exceeds a bound. A name no graph function has is an error (a typo would otherwise be
    silently ignored)."""
    from .expr import Var as _Var
    from .function import IRModule
    from .graph import Function, TensorType

    if not bounds:
        return mod
    for k, v in bounds.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"bound {k}={v!r}: bounds are non-negative integers")
    seen = set()
    out = {}
    for name, f in mod.items():
        if isinstance(f, Function):
            dims = {d.name for p in f.params if isinstance(p.ty, TensorType) and p.ty.shape
                    for d in p.ty.shape if isinstance(d, _Var)}
            mine = tuple(sorted((k, int(v)) for k, v in bounds.items() if k in dims))
            seen.update(k for k, _ in mine)
            if mine:
                attrs = tuple((k, v) for k, v in f.attrs if k != "kiln.bounds") + (("kiln.bounds", mine),)
                f = Function(f.params, f.blocks, f.body, attrs)
        out[name] = f
    unknown = sorted(set(bounds) - seen)
    if unknown:
        raise ValueError(f"bound(s) for {', '.join(map(repr, unknown))}: no graph function has a symbolic "
                         "dimension of that name")
    return IRModule(out, mod.attrs)
