"""Scalar expressions of tensor programs.

Nodes are immutable (frozen dataclasses). Identity matters for ``Var`` and ``Buffer``: two
variables with the same name are different variables. Compare whole programs with
``kiln.ir.structural_equal``, never with ``==``: on expressions, ``a == b`` *builds* an ``EQ``
node (as in TVM), whose truth value is identity, so dicts and ``in`` still behave.

>>> i = Var("i")
>>> e = i * 4 + 1
>>> type(e).__name__, e.dtype
('Add', 'int32')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple

from . import dtype as dt


class Node:
    """Base of every IR node. Fields are dataclass fields; children are the Node-valued ones."""

    __slots__ = ()

    def __repr__(self) -> str:
        try:
            from .printer import to_text  # late import: the printer depends on every node kind
            return to_text(self)
        except Exception:  # repr must never fail, even on a malformed node
            return object.__repr__(self)

    __str__ = __repr__

    def script(self) -> str:
        from .printer import to_text
        return to_text(self)


def const(value, dtype: str | None = None) -> "PrimExpr":
    """A literal. ``dtype`` defaults to int32 for ints, float32 for floats, bool for bools."""
    if isinstance(value, PrimExpr):
        return value if dtype is None or value.dtype == dtype else Cast(dtype, value)
    if isinstance(value, bool) or (hasattr(value, "dtype") and str(getattr(value, "dtype")) == "bool"):
        return IntImm(int(bool(value)), dtype or "bool")
    if dtype is None:
        if isinstance(value, int) or (hasattr(value, "dtype") and dt.is_int(str(value.dtype))):
            dtype = "int32" if -2**31 <= int(value) < 2**31 else "int64"
        else:
            dtype = "float32"
    if dt.is_float(dtype):
        return FloatImm(float(value), dtype)
    if int(value) != value:
        raise TypeError(f"cannot make a {dtype} constant from {value!r}")
    return IntImm(int(value), dtype)


def convert(value) -> "PrimExpr":
    """Turn a Python number (or an expression) into a PrimExpr."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, (bool, int, float)) or hasattr(value, "dtype"):
        return const(value)
    raise TypeError(f"cannot use {type(value).__name__} {value!r} as an expression")


def _promote(a, b):
    """Bring two operands to one dtype: a literal takes the other side's type; ints widen; an
    int meeting a float becomes that float."""
    a_lit = not isinstance(a, PrimExpr)
    b_lit = not isinstance(b, PrimExpr)
    if a_lit and b_lit:
        a, b = convert(a), convert(b)
    elif a_lit:
        a = _literal_like(a, b.dtype)
    elif b_lit:
        b = _literal_like(b, a.dtype)
    if a.dtype == b.dtype:
        return a, b
    ta, tb = a.dtype, b.dtype
    if dt.is_float(ta) != dt.is_float(tb):
        target = ta if dt.is_float(ta) else tb
    elif dt.is_bool(ta) or dt.is_bool(tb):
        target = tb if dt.is_bool(ta) else ta
    else:
        target = ta if dt.bits(ta) >= dt.bits(tb) else tb
    return (a if a.dtype == target else Cast(target, a)), (b if b.dtype == target else Cast(target, b))


def _literal_like(value, dtype: str) -> "PrimExpr":
    if dt.is_float(dtype):
        return FloatImm(float(value), dt.element(dtype))
    if isinstance(value, float) and not float(value).is_integer():
        return FloatImm(value, "float32")
    if dt.is_bool(dtype) and not isinstance(value, bool):
        return const(value)
    return const(value, dt.element(dtype))


class PrimExpr(Node):
    """A scalar expression with a ``dtype``. Arithmetic operators build new nodes."""

    __slots__ = ()
    dtype: str

    def __add__(self, o): return Add(*_promote(self, o))
    def __radd__(self, o): return Add(*_promote(o, self))
    def __sub__(self, o): return Sub(*_promote(self, o))
    def __rsub__(self, o): return Sub(*_promote(o, self))
    def __mul__(self, o): return Mul(*_promote(self, o))
    def __rmul__(self, o): return Mul(*_promote(o, self))
    def __truediv__(self, o): return _div(self, o)
    def __rtruediv__(self, o): return _div(o, self)
    def __floordiv__(self, o): return FloorDiv(*_promote(self, o))
    def __rfloordiv__(self, o): return FloorDiv(*_promote(o, self))
    def __mod__(self, o): return FloorMod(*_promote(self, o))
    def __rmod__(self, o): return FloorMod(*_promote(o, self))
    def __neg__(self): return Sub(_literal_like(0, self.dtype), self)
    def __lt__(self, o): return LT(*_promote(self, o))
    def __le__(self, o): return LE(*_promote(self, o))
    def __gt__(self, o): return GT(*_promote(self, o))
    def __ge__(self, o): return GE(*_promote(self, o))
    def __eq__(self, o): return EQ(*_promote(self, o))  # type: ignore[override]
    def __ne__(self, o): return NE(*_promote(self, o))  # type: ignore[override]
    def __and__(self, o): return And(*_promote(self, o))
    def __or__(self, o): return Or(*_promote(self, o))
    def __invert__(self): return Not(self)
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError(f"the truth value of expression {self!r} is not known at compile time; "
                        "use T.Select / T.if_then_else, or '&' / '|' instead of 'and' / 'or'")

    def astype(self, dtype: str) -> "PrimExpr":
        return self if self.dtype == dtype else Cast(dtype, self)


def _div(a, b):
    a, b = _promote(a, b)
    if not dt.is_float(a.dtype):
        raise TypeError(f"'/' on integer expressions ({a!r} / {b!r}) is ambiguous; use '//' "
                        "(floor division) or cast to float")
    return Div(a, b)


@dataclass(frozen=True, eq=False, repr=False)
class Var(PrimExpr):
    """A scalar variable: a loop or block iterator, or a symbolic dimension such as ``n``."""
    name: str
    dtype: str = dt.INDEX_DTYPE

    def __post_init__(self):
        dt.check(self.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class IntImm(PrimExpr):
    value: int
    dtype: str = "int32"

    def __post_init__(self):  # one spelling per value (numpy ints, bools), for structural equality
        object.__setattr__(self, "value", int(self.value))


@dataclass(frozen=True, eq=False, repr=False)
class FloatImm(PrimExpr):
    value: float
    dtype: str = "float32"

    def __post_init__(self):  # FloatImm(1) is FloatImm(1.0): one spelling per value
        object.__setattr__(self, "value", float(self.value))


@dataclass(frozen=True, eq=False, repr=False)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


@dataclass(frozen=True, eq=False, repr=False)
class BinaryOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    dtype: str = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.dtype is None:
            object.__setattr__(self, "dtype", self._result_dtype())

    def _result_dtype(self) -> str:
        return self.a.dtype


class Add(BinaryOp): pass
class Sub(BinaryOp): pass
class Mul(BinaryOp): pass
class Div(BinaryOp): """Float division."""
class FloorDiv(BinaryOp): """Integer division rounding towards negative infinity."""
class FloorMod(BinaryOp): """Remainder of FloorDiv; has the sign of the divisor."""
class Min(BinaryOp): pass
class Max(BinaryOp): pass


class CmpOp(BinaryOp):
    def _result_dtype(self) -> str:
        return dt.with_lanes("bool", dt.lanes(self.a.dtype))


class EQ(CmpOp):
    def __bool__(self):  # lets Python containers use '==' on expressions: identity
        return self.a is self.b


class NE(CmpOp):
    def __bool__(self):
        return self.a is not self.b


class LT(CmpOp): pass
class LE(CmpOp): pass
class GT(CmpOp): pass
class GE(CmpOp): pass
class And(BinaryOp): """Logical and of two bools."""
class Or(BinaryOp): """Logical or of two bools."""


@dataclass(frozen=True, eq=False, repr=False)
class Not(PrimExpr):
    a: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Select(PrimExpr):
    """``true_value if condition else false_value``; both sides may be evaluated."""
    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.true_value.dtype)


# Math intrinsics a Call may name, with their arity. All are elementwise on floats, except abs,
# which also takes ints, and the bitwise ones, which take integers (and bool, for and/or/xor/not)
# only. A shift by a negative amount or by the width or more shifts every bit out: 0, or the
# sign for an arithmetic right shift (ONNX BitShift's result, where LLVM's would be undefined).
BITWISE_INTRINSICS = {"bitwise_and": 2, "bitwise_or": 2, "bitwise_xor": 2, "bitwise_not": 1,
                      "shift_left": 2, "shift_right": 2}
INTRINSICS = {"exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "sigmoid": 1, "erf": 1,
              "pow": 2, "abs": 1, "floor": 1, "ceil": 1, "round": 1, "sin": 1, "cos": 1,
              **BITWISE_INTRINSICS,
              # the bits of its argument as the Call's dtype, of the same width (bool: one byte)
              "reinterpret": 1,
              # a cache hint with no value (0): fetch into L2 the line holding the element its
              # argument, a BufferLoad, names by its flat row-major offset (which may run past
              # a dimension's extent, not past the buffer): ``Evaluate(Call("prefetch",
              # (W[b, 0, 0, 0, e],), "int32"))`` (``transform/prefetch.py``)
              "prefetch": 1}


@dataclass(frozen=True, eq=False, repr=False)
class Call(PrimExpr):
    """A call of a math intrinsic (see ``INTRINSICS``), e.g. ``Call("exp", (x,), "float32")``."""
    op: str
    args: Tuple[PrimExpr, ...]
    dtype: str = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.op not in INTRINSICS:
            raise ValueError(f"unknown intrinsic {self.op!r}; known: {', '.join(sorted(INTRINSICS))}")
        if len(self.args) != INTRINSICS[self.op]:
            raise ValueError(f"{self.op} takes {INTRINSICS[self.op]} argument(s), got {len(self.args)}")
        object.__setattr__(self, "args", tuple(convert(a) for a in self.args))
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.args[0].dtype)

    @property
    def own_dtype(self) -> bool:
        """True when the dtype is not derived from the arguments (``reinterpret``): rebuilding
        the node (``functor.transform``) keeps it."""
        return self.op in ("reinterpret", "prefetch")


@dataclass(frozen=True, eq=False, repr=False)
class Buffer(Node):
    """A multi-dimensional array: a function parameter, or allocated by a block.

    ``scope`` is ``"global"`` (memory the caller owns) or ``"local"`` (a scratch buffer that
    codegen may keep in registers). ``shape`` entries are expressions: ``IntImm`` or symbolic.

    >>> A = Buffer("A", (IntImm(8),), "float32")
    >>> load = A[Var("i")]
    """
    name: str
    shape: Tuple[PrimExpr, ...]
    dtype: str = "float32"
    scope: str = "global"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(convert(s) for s in self.shape))
        dt.check(self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> "BufferLoad":
        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(convert(i) for i in indices))

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class BufferLoad(PrimExpr):
    buffer: Buffer
    indices: Tuple[PrimExpr, ...]
    dtype: str = None  # type: ignore[assignment]

    def __post_init__(self):
        object.__setattr__(self, "indices", tuple(convert(i) for i in self.indices))
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.buffer.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Range(Node):
    """The half-open interval ``[min, min + extent)``."""
    min: PrimExpr
    extent: PrimExpr

    def __post_init__(self):
        object.__setattr__(self, "min", convert(self.min))
        object.__setattr__(self, "extent", convert(self.extent))

    @staticmethod
    def from_extent(extent) -> "Range":
        e = convert(extent)
        return Range(IntImm(0, e.dtype), e)


def is_const_int(e, value=None) -> bool:
    """True if ``e`` is an integer literal (equal to ``value`` when given)."""
    return isinstance(e, IntImm) and (value is None or e.value == value)


def conjuncts(e) -> list:
    """The terms of ``e`` read as ``a and b and ...`` (a literal true has none).

    >>> i, n = Var("i"), Var("n")
    >>> [c.script() for c in conjuncts((i < n) & (i >= 0))]   # doctest: +SKIP
    ['i < n', 'i >= 0']
    """
    if isinstance(e, And):
        return conjuncts(e.a) + conjuncts(e.b)
    return [] if is_const_int(e, 1) else [e]


def conjunction(terms):
    """``terms[0] and terms[1] and ...`` (the inverse of ``conjuncts``); at least one term."""
    out = terms[0]
    for c in terms[1:]:
        out = And(out, c)
    return out


_ = field  # re-exported for node modules that need default factories
