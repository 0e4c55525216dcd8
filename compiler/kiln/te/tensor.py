"""Tensors and operations of the tensor-expression language (``kiln.te``).

A ``Tensor`` is the output of an operation: a ``PlaceholderOp`` (an input) or a ``ComputeOp``
(a value per index, given by a lambda). Indexing a tensor gives a ``TensorLoad`` expression; a
reduction (``te.sum`` / ``te.max`` / ``te.min``) gives a ``Reduce`` expression. Both exist only
in te land: ``create_prim_func`` turns them into buffer loads and blocks.

>>> A = placeholder((8,), "float32", name="A")
>>> B = compute((8,), lambda i: A[i] + 1.0, name="B")
>>> B.shape[0].value, B.dtype, B.op.input_tensors[0] is A
(8, 'float32', True)
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import (Call, FloatImm, IntImm, Max, Min, PrimExpr, Range, Select, Var, _promote,
                       const, convert)
from ..ir.functor import collect, post_order_visit


class Tensor:
    """One output of an operation; index it (``A[i, j]``) inside a compute lambda."""

    def __init__(self, op: "Operation", shape: Tuple[PrimExpr, ...], dtype: str, name: str):
        self.op, self.shape, self.dtype, self.name = op, shape, dtype, name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> "TensorLoad":
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise IndexError(f"tensor {self.name!r} has {self.ndim} dimension(s), "
                             f"indexed with {len(indices)} index(es)")
        return TensorLoad(self, tuple(convert(i) for i in indices))

    def __call__(self, *indices) -> "TensorLoad":
        """``A(i, j)`` is ``A[i, j]`` (TVM spelling, handy with ``lambda *i: A(*i)``)."""
        return self[indices]

    def __repr__(self) -> str:
        dims = ", ".join(str(getattr(s, "value", getattr(s, "name", s))) for s in self.shape)
        return f"Tensor({self.name!r}, ({dims}), {self.dtype!r})"

    __hash__ = object.__hash__


class Operation:
    """Base of placeholder and compute operations. ``output(0)`` is the tensor it produces."""
    name: str

    def output(self, index: int = 0) -> Tensor:
        if index != 0:
            raise IndexError(f"operation {self.name!r} has one output")
        return self._output

    @property
    def input_tensors(self) -> Tuple[Tensor, ...]:
        return ()


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape, dtype: str):
        self.name = name
        self._output = Tensor(self, shape, dtype, name)


class ComputeOp(Operation):
    """``axis``: one Var per output dimension; ``reduce_axis``: the ReduceAxis vars of ``body``'s
    top-level reduction (empty if none)."""

    def __init__(self, name: str, shape, axis: Tuple[Var, ...], body: PrimExpr, attrs=()):
        self.name, self.axis, self.body = name, axis, body
        self.attrs = tuple(sorted(dict(attrs).items()))
        self.reduce_axis = body.axis if isinstance(body, Reduce) else ()
        self._output = Tensor(self, shape, body.dtype, name)

    @property
    def input_tensors(self) -> Tuple[Tensor, ...]:
        seen = {}
        for load in collect(self.body, TensorLoad):
            seen.setdefault(id(load.tensor), load.tensor)
        return tuple(seen.values())


# ---- te-only expression nodes -------------------------------------------------------------

@dataclass(frozen=True, eq=False, repr=False)
class TensorLoad(PrimExpr):
    """``tensor[indices]`` before buffers exist (TVM calls it ProducerLoad)."""
    tensor: Any
    indices: Tuple[PrimExpr, ...]
    dtype: str = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.tensor.dtype)

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(_show(i) for i in self.indices)}]"


@dataclass(frozen=True, eq=False, repr=False)
class ReduceAxis(Var):
    """A reduction variable with its domain; use it as an index (``A[i, k]``) and pass it to
    ``te.sum(..., axis=k)``. ``k.var`` is ``k`` itself and ``k.dom`` its Range (TVM spelling)."""
    dom: Range = None  # type: ignore[assignment]

    @property
    def var(self) -> Var:
        return self

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(PrimExpr):
    """``combiner`` ("sum", "max", "min") of ``source`` over ``axis``, starting at ``init``,
    counting only the points where ``condition`` holds (None: all)."""
    combiner: str
    source: PrimExpr
    axis: Tuple[ReduceAxis, ...]
    init: PrimExpr
    condition: Optional[PrimExpr] = None
    dtype: str = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.source.dtype)

    def combine(self, acc: PrimExpr, value: PrimExpr) -> PrimExpr:
        return _COMBINE[self.combiner](acc, value)

    def __repr__(self) -> str:
        return f"te.{self.combiner}({_show(self.source)}, axis=[{', '.join(a.name for a in self.axis)}])"


_COMBINE = {"sum": lambda a, b: a + b, "max": Max, "min": Min}


def _show(e) -> str:
    try:
        return repr(e)
    except Exception:  # pragma: no cover - repr of a malformed node
        return type(e).__name__


# ---- constructors --------------------------------------------------------------------------

def var(name: str = "v", dtype: str = "int32") -> Var:
    """A symbolic scalar, e.g. a dynamic dimension: ``n = te.var("n"); te.placeholder((n, 4))``."""
    return Var(name, dt.check(dtype))


size_var = var


def _shape(shape) -> Tuple[PrimExpr, ...]:
    if isinstance(shape, (int, PrimExpr)):
        shape = (shape,)
    out = []
    for s in shape:
        e = convert(s)
        if not dt.is_int(e.dtype):
            raise TypeError(f"shape entries must be integers or integer variables, got {s!r} ({e.dtype})")
        out.append(e)
    return tuple(out)


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor, e.g. ``te.placeholder((n, 4), "float16", name="A")``."""
    return PlaceholderOp(name, _shape(shape), dt.check(dtype)).output(0)


def reduce_axis(dom, name: str = "rv") -> ReduceAxis:
    """A reduction axis over ``dom``: ``(lo, hi)`` (half-open), a Range, or an extent.

    >>> k = reduce_axis((0, 16), name="k")
    >>> k.dom.extent.value
    16
    """
    if isinstance(dom, Range):
        rng = dom
    elif isinstance(dom, (tuple, list)):
        lo, hi = (convert(x) for x in dom)
        extent = IntImm(hi.value - lo.value, lo.dtype) if all(isinstance(x, IntImm) for x in (lo, hi)) \
            else hi - lo
        rng = Range(lo, extent)
    else:
        rng = Range.from_extent(dom)
    return ReduceAxis(name, rng.min.dtype, rng)


# A stage's block annotation: the default schedule never inlines it into its consumers (a
# stage whose elements each consumer element reads several of, computed once instead).
KEEP_STAGE = ("kiln.keep_stage", True)


def compute(shape, fcompute, name: str = "compute", attrs=None) -> Tensor:
    """A tensor whose element at each index is ``fcompute(*index_vars)``.

    The index variables are named after ``fcompute``'s parameters (``i0, i1, ...`` for
    ``*args``). The body may be a reduction (``te.sum(...)``), but only at the top level.
    ``attrs`` (a dict) become the annotations of the stage's block (``KEEP_STAGE``: never
    inlined by the default schedule).

    >>> C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")  # doctest: +SKIP
    """
    shape = _shape(shape)
    names = _index_names(fcompute, len(shape))
    axis = tuple(Var(n, s.dtype if dt.is_int(s.dtype) else "int32") for n, s in zip(names, shape))
    body = fcompute(*axis)
    if isinstance(body, (list, tuple)):
        raise NotImplementedError(f"compute {name!r}: multi-output computes are not supported")
    body = convert(body)
    _check_reduce_placement(body, name)
    return ComputeOp(name, shape, axis, body, attrs or {}).output(0)


def _index_names(fcompute, ndim: int):
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    if varargs and len(positional) <= ndim:
        return positional + [f"i{d}" for d in range(len(positional), ndim)]
    if len(positional) != ndim:
        raise ValueError(f"the compute function takes {len(positional)} index argument(s) "
                         f"({', '.join(positional)}) but the shape has {ndim} dimension(s)")
    return positional


def _check_reduce_placement(body: PrimExpr, name: str) -> None:
    top = body.source if isinstance(body, Reduce) else body
    nested = []
    post_order_visit(top, lambda n: nested.append(n) if isinstance(n, Reduce) else None)
    if nested:
        raise ValueError(f"compute {name!r}: a reduction (te.{nested[0].combiner}) must be the whole "
                         "body of its compute, not part of a larger expression; compute it in its "
                         "own te.compute and use that tensor")


# ---- reductions ---------------------------------------------------------------------------

def _reducer(combiner: str, identity):
    def reduce(expr, axis=None, where=None, init=None):
        # Called with two expressions (te.max(a, b)) it is the elementwise combiner, as in TVM.
        if axis is not None and not isinstance(axis, (ReduceAxis, list, tuple)):
            a, b = _promote(expr, axis)
            return _COMBINE[combiner](a, b)
        if axis is None:
            raise TypeError(f"te.{combiner} needs axis= (a te.reduce_axis or a list of them)")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        if not axes:
            raise ValueError(f"te.{combiner}: axis= is empty")
        for a in axes:
            if not isinstance(a, ReduceAxis):
                raise TypeError(f"te.{combiner}: axis entries must come from te.reduce_axis, got {a!r}")
        src = convert(expr)
        start = identity(src.dtype) if init is None else _literal(init, src.dtype)
        cond = None if where is None else convert(where)
        return Reduce(combiner, src, axes, start, cond)
    reduce.__name__ = combiner
    reduce.__doc__ = (f"``te.{combiner}(expr, axis=k, where=None, init=None)``: the {combiner} of "
                      f"``expr`` over reduction axes ``k`` (one or a list). With two expressions, "
                      f"``te.{combiner}(a, b)`` is elementwise.")
    return reduce


def _literal(value, dtype: str) -> PrimExpr:
    return value if isinstance(value, PrimExpr) else const(value, dt.element(dtype))


def max_value(dtype: str) -> PrimExpr:
    """The largest finite value of ``dtype`` (``te.max_value("int8").value == 127``)."""
    e = dt.element(dtype)
    if dt.is_bool(e):
        return IntImm(1, "bool")
    if dt.is_float(e):
        return FloatImm(float(np.finfo(e).max), e)
    return IntImm(int(np.iinfo(e).max), e)


def min_value(dtype: str) -> PrimExpr:
    """The smallest finite value of ``dtype`` (most negative float, not -inf)."""
    e = dt.element(dtype)
    if dt.is_bool(e):
        return IntImm(0, "bool")
    if dt.is_float(e):
        return FloatImm(float(np.finfo(e).min), e)
    return IntImm(int(np.iinfo(e).min), e)


def _zero(dtype: str) -> PrimExpr:
    return const(0, dt.element(dtype))


# Reductions start at their identity: a max over floats starts at -inf so that an all -inf or
# all-largest input still reduces correctly; integers have no inf and use the type's limits.
def _max_identity(dtype: str) -> PrimExpr:
    return FloatImm(-math.inf, dt.element(dtype)) if dt.is_float(dtype) else min_value(dtype)


def _min_identity(dtype: str) -> PrimExpr:
    return FloatImm(math.inf, dt.element(dtype)) if dt.is_float(dtype) else max_value(dtype)


# Exported as te.sum / te.max / te.min (kiln/te/__init__.py); named apart here so this module
# keeps Python's builtins.
reduce_sum = _reducer("sum", _zero)
reduce_max = _reducer("max", _max_identity)
reduce_min = _reducer("min", _min_identity)


# ---- math helpers ---------------------------------------------------------------------------

def _float_call(op: str):
    def f(x):
        x = convert(x)
        return Call(op, (x,), x.dtype)
    f.__name__ = op
    f.__doc__ = f"Elementwise ``{op}(x)``: ``te.{op}(A[i])``."
    return f


exp, log, sqrt, rsqrt, tanh, sigmoid, erf = (_float_call(n) for n in
                                            ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf"))
abs_ = _float_call("abs")


def pow_(x, y) -> PrimExpr:
    """``x ** y`` elementwise (floats): ``te.pow(A[i], 2.0)``."""
    a, b = _promote(x, y)
    return Call("pow", (a, b), a.dtype)


def if_then_else(cond, then_value, else_value) -> PrimExpr:
    """``then_value if cond else else_value`` (a Select), e.g. for padding:
    ``te.if_then_else(i >= 1, A[i - 1], 0.0)``."""
    cond = convert(cond)
    if not dt.is_bool(cond.dtype):
        raise TypeError(f"te.if_then_else: condition must be bool, got {cond.dtype}")
    a, b = _promote(then_value, else_value)
    return Select(cond, a, b)
