"""Symbolic tensors: what ``forward`` sees while ``Module.export`` traces it.

A ``Tensor`` wraps a graph expression (a ``GraphVar`` bound by the trace) and knows its
``shape`` and ``dtype`` from the expression's type. Every operation on it calls
``emit(op, ...)``, which builds a typed operator call with ``kiln.ops.call`` and binds it in
the current ``Trace``; nothing is computed. Shapes are ints where they are known and tensor-IR
expressions (``n``, ``n * 2``) where they are symbolic, so ``x.shape[0]`` can size a reshape.

>>> # inside Module.forward during export:
>>> # y = (x @ w).relu() * 0.5          -> matmul, relu, multiply bindings
>>> # y.shape                           -> (n, 256)
"""
from __future__ import annotations

import numbers
from typing import Dict, List, Optional, Tuple

import numpy as np

from ... import ops
from ...ir import dtype as dt
from ...ir.expr import IntImm
from ...ir.graph import (Binding, Constant, GraphExpr, GraphVar, TensorType, TupleGetItem,
                         TupleType)
from ...ops import OpError


class Trace:
    """The bindings one traced function has emitted so far, in order.

    Values are bound to temporary ``GraphVar``s; ``export`` replays the live ones through a
    ``FunctionBuilder`` once it knows which are outputs. ``scopes`` is the stack of modules
    being called (qualified name, class name), so that an ``OpError`` can say where it came
    from: ``fc2 (Linear): linear: ...``.
    """

    def __init__(self, root: str, params: Dict[int, GraphVar], module_names: Dict[int, str] = None):
        self.root = root
        self.params = params  # id(Parameter) -> graph parameter
        self.module_names = module_names or {}  # id(Module) -> qualified name
        self.bindings: List[Binding] = []
        self.scopes: List[Tuple[str, str]] = []
        self.prim_funcs: Dict[str, object] = {}  # tensor programs the bindings call (kv_cache.py)

    def bind(self, value: GraphExpr) -> GraphVar:
        var = GraphVar(f"_t{len(self.bindings)}", value.ty)
        self.bindings.append(Binding(var, value))
        return var

    def where(self) -> str:
        """The innermost module being called, as ``fc2 (Linear)``; the root's method otherwise."""
        for name, cls in reversed(self.scopes):
            if name:
                return f"{name} ({cls})"
        return self.root


_TRACES: List[Trace] = []


def current_trace(what: str = "this operation") -> Trace:
    if not _TRACES:
        raise RuntimeError(f"{what} needs a trace: kiln nn modules run only inside "
                           "Module.export(spec=...), which traces forward into a graph function "
                           "(run the result with kiln.compile + VirtualMachine, or "
                           "kiln.ir.graph_interp.interpret)")
    return _TRACES[-1]


def _dim(d):
    return d.value if isinstance(d, IntImm) else d


class Tensor:
    """A symbolic tensor of the function being exported. Use it like a PyTorch tensor:
    ``x + 1``, ``x @ w``, ``x[:, :4]``, ``x.reshape(b, -1)``, ``x.permute(0, 2, 1)``,
    ``x.softmax(-1)``; each builds operator calls (see ``kiln.nn.functional``)."""
    __slots__ = ("_expr",)

    def __init__(self, expr: GraphExpr):
        if not isinstance(getattr(expr, "ty", None), TensorType):
            raise TypeError(f"Tensor wraps a tensor-typed graph expression, got {expr!r}")
        self._expr = expr

    @property
    def expr(self) -> GraphExpr:
        """The graph expression (a GraphVar of the trace, a parameter, or a Constant)."""
        return self._expr

    @property
    def ty(self) -> TensorType:
        return self.expr.ty

    @property
    def shape(self) -> tuple:
        """Dimensions as ints, or tensor-IR expressions where symbolic."""
        return tuple(_dim(d) for d in self.ty.shape)

    @property
    def dtype(self) -> str:
        return self.ty.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: Optional[int] = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        n = 1
        for d in self.shape:
            n = n * d
        return n

    def __len__(self):
        d = self.shape[0]
        if not isinstance(d, int):
            raise TypeError(f"len() of a tensor whose first dimension {d!r} is symbolic; use .shape[0]")
        return d

    def __iter__(self):  # a tensor is not iterable: guard against `for row in x` and `a, b = x`
        raise TypeError("iterating over a traced Tensor is not supported; index it or use split()")

    def __bool__(self):
        raise TypeError("the truth value of a traced Tensor is not known at export time; "
                        "use nn.functional.where for data-dependent choices")

    __hash__ = object.__hash__

    def __repr__(self):
        shape = ", ".join(str(getattr(d, "name", d)) for d in self.shape)
        name = getattr(self.expr, "name", type(self.expr).__name__)
        return f"Tensor({name}: ({shape}), {self.dtype})"


def constant(value, dtype: Optional[str] = None) -> Tensor:
    """A constant tensor (a Python number or numpy array) of ``dtype`` (default: its own)."""
    arr = np.asarray(value)
    if dtype is not None:
        target = dt.to_numpy(dtype)
        if arr.dtype != target:
            if not dt.is_float(dtype) and arr.dtype.kind == "f" and np.any(arr != np.round(arr)):
                raise TypeError(f"cannot use the non-integer value {value!r} with a {dtype} tensor; "
                                "cast the tensor to a float type first")
            arr = arr.astype(target)
    elif arr.dtype == np.float64:
        arr = arr.astype(np.float32)  # Python floats are float32, as in PyTorch
    return Tensor(Constant(arr))


def to_expr(x, like: Optional[Tensor] = None) -> GraphExpr:
    """The graph expression of ``x``: a Tensor or Parameter, or a number / numpy array made a
    Constant (of ``like``'s dtype, so that ``x * 0.5`` stays float16 for a float16 ``x``)."""
    if isinstance(x, Tensor):
        return x.expr
    if isinstance(x, (numbers.Number, np.ndarray, np.generic)):
        return constant(x, like.dtype if like is not None else None).expr
    raise TypeError(f"expected a Tensor or a number, got {type(x).__name__} {x!r}")


def emit(op: str, *args, **attrs):
    """Bind ``op(*args, **attrs)`` in the current trace; returns a Tensor (a tuple of Tensors
    for tuple-valued operators such as ``split``). An ``OpError`` gets the module's name:
    ``fc2 (Linear): linear: x (1, 255) has 255 input features but weight (10, 256) expects 256``."""
    tr = current_trace(f"operator {op!r}")
    like = next((a for a in args if isinstance(a, Tensor)), None)
    exprs = [to_expr(a, like) for a in args]
    try:
        call = ops.call(op, *exprs, **attrs)
    except OpError as e:
        raise OpError(f"{tr.where()}: {e}") from None
    var = tr.bind(call)
    if isinstance(call.ty, TupleType):
        return tuple(Tensor(tr.bind(TupleGetItem(var, i))) for i in range(len(call.ty.fields)))
    return Tensor(var)


def fail(message: str) -> OpError:
    """An OpError raised by the frontend itself (a bad reshape, an unsupported index), named
    like the operator errors: ``attn (Attention): reshape: ...``."""
    where = _TRACES[-1].where() if _TRACES else "nn"
    return OpError(f"{where}: {message}")


def static_int(d, what: str) -> int:
    """``d`` as an int, or an OpError saying the dimension must be static."""
    if isinstance(d, (int, np.integer)):
        return int(d)
    if isinstance(d, IntImm):
        return d.value
    raise fail(f"{what} must be a static size here, got the symbolic dimension {d!r}")


def is_static(d) -> bool:
    """True for a known size (a Python or numpy int; ``Tensor.shape`` gives ints for those)."""
    return isinstance(d, (int, np.integer))


# Tensor methods are defined in functional.py next to the functions they call.
from . import functional as _functional  # noqa: E402,F401  (registers the methods)
