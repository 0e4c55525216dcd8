"""Functional ops for traced tensors, PyTorch-style (``import kiln.nn.functional as F``).

Each function maps onto operators of ``kiln.ops`` and emits their calls into the function
being exported; arguments follow PyTorch (``dim``/``keepdim``), attributes follow the
operators (``axis``/``keepdims``). Python numbers become constants of the other operand's
dtype. This file holds the elementwise, reduction, shape and indexing ops (and the Tensor
methods built on them); layers' ops (linear, conv, pooling, norms, attention) are in
``functional_nn.py`` and re-exported here.

>>> # inside forward:  F.softmax(F.relu(x) @ w, dim=-1).sum(dim=0, keepdim=True)
"""
from __future__ import annotations

import builtins
import numbers
from typing import Sequence

import numpy as np

from ...ir import dtype as dt
from ...ir.expr import IntImm
from .tensor import Tensor, constant, emit, fail, is_static, static_int

# ---- elementwise ---------------------------------------------------------------------------


def _binary(op: str, a, b) -> Tensor:
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"{op}: at least one operand must be a Tensor, got {a!r} and {b!r}")
    return emit(op, a, b)


def add(a, b) -> Tensor:
    """``a + b`` with numpy broadcasting."""
    return _binary("add", a, b)


def subtract(a, b) -> Tensor:
    return _binary("subtract", a, b)


def multiply(a, b) -> Tensor:
    return _binary("multiply", a, b)


def divide(a, b) -> Tensor:
    return _binary("divide", a, b)


def pow(a, b) -> Tensor:  # noqa: A001 - PyTorch's name
    return _binary("power", a, b)


def maximum(a, b) -> Tensor:
    return _binary("maximum", a, b)


def minimum(a, b) -> Tensor:
    return _binary("minimum", a, b)


sub, mul, div = subtract, multiply, divide


def eq(a, b) -> Tensor:
    return _binary("equal", a, b)


def ne(a, b) -> Tensor:
    return _binary("not_equal", a, b)


def lt(a, b) -> Tensor:
    return _binary("less", a, b)


def le(a, b) -> Tensor:
    return _binary("less_equal", a, b)


def gt(a, b) -> Tensor:
    return _binary("greater", a, b)


def ge(a, b) -> Tensor:
    return _binary("greater_equal", a, b)


def logical_and(a: Tensor, b: Tensor) -> Tensor:
    return _binary("logical_and", a, b)


def logical_or(a: Tensor, b: Tensor) -> Tensor:
    return _binary("logical_or", a, b)


def logical_not(x: Tensor) -> Tensor:
    return emit("logical_not", x)


def where(condition: Tensor, x, y) -> Tensor:
    """``x`` where ``condition`` is true, else ``y`` (broadcast); numbers take the tensor's dtype."""
    like = x if isinstance(x, Tensor) else y
    if not isinstance(like, Tensor):
        raise TypeError("where: x or y must be a Tensor")
    x = x if isinstance(x, Tensor) else constant(x, like.dtype)
    y = y if isinstance(y, Tensor) else constant(y, like.dtype)
    return emit("where", condition, x, y)


def _unary(op):
    def fn(x: Tensor) -> Tensor:
        return emit(op, x)
    fn.__name__ = op
    fn.__doc__ = f"Elementwise ``{op}`` (operator ``{op}``)."
    return fn


neg = _unary("neg")
abs = _unary("abs")  # noqa: A001
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
relu = _unary("relu")
silu = _unary("silu")


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU; ``approximate="tanh"`` for the tanh approximation (as PyTorch)."""
    return emit("gelu", x, approximate=approximate)


def cast(x: Tensor, dtype) -> Tensor:
    """``x`` converted to ``dtype`` (no call when it already has it)."""
    dtype = dtype if isinstance(dtype, str) else dt.from_numpy(dtype)
    return x if x.dtype == dtype else emit("cast", x, dtype=dtype)


def clamp(x: Tensor, min=None, max=None) -> Tensor:  # noqa: A002
    """``x`` limited to ``[min, max]``; a missing bound is unbounded."""
    if min is None and max is None:
        raise TypeError("clamp: give min, max or both")
    return emit("clip", x, min=min, max=max)


clip = clamp


# ---- matmul and reductions ----------------------------------------------------------------


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """numpy ``matmul``: batched over leading dims, 1-D operands promoted."""
    return emit("matmul", a, b)


def _dims(dim):
    if dim is None:
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else int(dim)


def _reduce(op):
    def fn(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
        return emit(op, x, axis=_dims(dim), keepdims=bool(keepdim))
    fn.__name__ = op
    fn.__doc__ = (f"``{op}`` over ``dim`` (an int, a tuple, or None for all); ``keepdim`` keeps "
                  "reduced dims as size 1.")
    return fn


sum = _reduce("sum")  # noqa: A001
mean = _reduce("mean")
prod = _reduce("prod")
amax = _reduce("max")
amin = _reduce("min")


def max(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """The largest values over ``dim``. Unlike ``torch.max(x, dim)`` this returns only the
    values (as ``torch.amax``); use ``argmax`` for the indices."""
    return amax(x, dim, keepdim)


def min(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """The smallest values over ``dim`` (values only, as ``torch.amin``)."""
    return amin(x, dim, keepdim)


def argmax(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return emit("argmax", x, axis=dim, keepdims=bool(keepdim))


def argmin(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return emit("argmin", x, axis=dim, keepdims=bool(keepdim))


def var(x: Tensor, dim=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Variance with Bessel's ``correction`` (PyTorch's default 1), from mean/subtract/multiply."""
    d = x - mean(x, dim, keepdim=True)
    axes = range(x.ndim) if dim is None else ([dim] if isinstance(dim, int) else dim)
    n = 1
    for a in axes:
        n *= static_int(x.shape[a], "var: the reduced dimension")
    return sum(d * d, dim, keepdim) / float(n - correction)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return emit("softmax", x, axis=int(dim))


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return emit("log_softmax", x, axis=int(dim))


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True):
    """``(values, indices)`` of the ``k`` largest (or smallest) entries along ``dim``."""
    return emit("topk", x, k=int(k), axis=int(dim), largest=bool(largest))


# ---- shapes --------------------------------------------------------------------------------


def _shape_args(shape) -> tuple:
    # reshape(2, 3) and reshape((2, 3)) both work, as in PyTorch
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        return tuple(shape[0])
    return tuple(shape)


def reshape(x: Tensor, *shape) -> Tensor:
    """``x`` with ``shape`` (one entry may be -1, inferred by the operator, also through symbolic
    dims); ``reshape(x, 2, -1)`` or ``reshape(x, (2, -1))``. No call when the shape is unchanged."""
    shape = tuple(s.value if isinstance(s, IntImm) else (int(s) if is_static(s) else s)
                  for s in _shape_args(shape))
    if _same_shape(x.shape, shape):
        return x
    return emit("reshape", x, shape=shape)


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(x is y or (is_static(x) and is_static(y) and int(x) == int(y))
                                    for x, y in zip(a, b))


def permute(x: Tensor, *dims) -> Tensor:
    """Axes reordered: ``permute(x, 0, 2, 1)``."""
    dims = tuple(int(d) % x.ndim for d in _shape_args(dims))
    if dims == tuple(range(x.ndim)):
        return x
    return emit("permute_dims", x, axes=dims)


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """Two axes swapped."""
    axes = list(range(x.ndim))
    a, b = int(dim0) % x.ndim, int(dim1) % x.ndim
    axes[a], axes[b] = axes[b], axes[a]
    return permute(x, *axes)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dims ``start_dim..end_dim`` (inclusive) merged into one."""
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = int(start_dim) % x.ndim, int(end_dim) % x.ndim
    if s == e:
        return x
    return emit("flatten", x, start_dim=s, end_dim=e)


def squeeze(x: Tensor, dim=None) -> Tensor:
    """Size-1 dims removed (all of them, or ``dim``)."""
    if dim is None:
        dims = tuple(i for i, d in enumerate(x.shape) if is_static(d) and d == 1)
    else:
        dims = tuple(int(d) % x.ndim for d in (dim if isinstance(dim, (list, tuple)) else (dim,)))
        dims = tuple(d for d in dims if is_static(x.shape[d]) and x.shape[d] == 1)  # as PyTorch
    if not dims:
        return x
    return emit("squeeze", x, axis=dims)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """A size-1 dim inserted at ``dim`` (negative counts from the end of the result)."""
    return emit("expand_dims", x, axis=int(dim) % (x.ndim + 1))


def broadcast_to(x: Tensor, shape) -> Tensor:
    return emit("broadcast_to", x, shape=tuple(shape))


def expand(x: Tensor, *sizes) -> Tensor:
    """``x`` broadcast to ``sizes``; -1 keeps that dim (as PyTorch)."""
    sizes = _shape_args(sizes)
    off = len(sizes) - x.ndim
    shape = tuple(x.shape[i - off] if (is_static(s) and int(s) == -1) else s for i, s in enumerate(sizes))
    if _same_shape(shape, x.shape):
        return x
    return broadcast_to(x, shape)


def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Tensors joined along ``dim``."""
    tensors = list(tensors)
    if len(tensors) == 1:
        return tensors[0]
    return emit("concat", *tensors, axis=int(dim))


cat = concat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Tensors of one shape joined along a new dim."""
    tensors = list(tensors)
    d = int(dim) % (tensors[0].ndim + 1)
    return concat([unsqueeze(t, d) for t in tensors], d)


def split(x: Tensor, split_size_or_sections, dim: int = 0):
    """PyTorch's split: an int is the size of each piece (the last may be smaller); a list is
    the sizes of the pieces. Returns a tuple of Tensors."""
    dim = int(dim) % x.ndim
    n = x.shape[dim]
    if isinstance(split_size_or_sections, numbers.Integral):
        size = int(split_size_or_sections)
        total = static_int(n, f"split: dimension {dim}")
        sizes = [size] * (total // size) + ([total % size] if total % size else [])
    else:
        sizes = [int(s) for s in split_size_or_sections]
    if len(sizes) == 1:
        return (x,)
    if is_static(n) and len(set(sizes)) == 1:
        return emit("split", x, indices_or_sections=len(sizes), axis=dim)
    indices, acc = [], 0
    for s in sizes[:-1]:
        acc += s
        indices.append(acc)
    return emit("split", x, indices_or_sections=tuple(indices), axis=dim)


def chunk(x: Tensor, chunks: int, dim: int = 0):
    """``chunks`` pieces along ``dim`` (the last smaller when it does not divide, as PyTorch)."""
    n = static_int(x.shape[int(dim)], "chunk: the split dimension")
    size = -(-n // int(chunks))
    return split(x, size, dim)


def take(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """Entries of ``x`` along ``axis`` at integer ``indices`` (numpy ``take``)."""
    return emit("take", x, indices, axis=int(axis))


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    return take(x, index, dim)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """PyTorch's ``gather``: ``out[i][j] = x[i][index[i][j]]`` for ``dim=1`` (index of x's rank,
    no larger than x outside ``dim``). There is no gather operator: this is one ``take`` from
    the flattened ``x`` at ``index * stride + offsets``, the offsets a constant, so the shapes
    must be static."""
    d = int(dim) % x.ndim
    xs = [static_int(n, "gather: each dimension of x") for n in x.shape]
    ish = [static_int(n, "gather: each dimension of index") for n in index.shape]
    if len(ish) != len(xs) or any(ish[k] > xs[k] for k in range(len(xs)) if k != d):
        raise fail(f"gather: index of shape {tuple(ish)} does not fit x of shape {tuple(xs)} "
                   f"along dim {d} (same rank, no larger outside dim)")
    strides = [int(np.prod(xs[k + 1:])) for k in range(len(xs))]
    grid = np.indices(ish)
    offsets = np.zeros(ish, dtype=dt.to_numpy(index.dtype))
    for k in range(len(xs)):
        if k != d:
            offsets += (grid[k] * strides[k]).astype(offsets.dtype)
    flat = index if strides[d] == 1 else index * strides[d]
    return take(reshape(x, -1), flat + constant(offsets, index.dtype), 0)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """PyTorch's ``F.pad``: ``pad`` lists (before, after) pairs from the last dim backwards."""
    if mode != "constant":
        raise fail(f"pad: mode {mode!r} is not supported; only 'constant'")
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise fail(f"pad: pad must hold (before, after) pairs for at most {x.ndim} dims, got {tuple(pad)}")
    width = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        width[x.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    return emit("pad", x, pad_width=tuple(width), pad_value=float(value))


def dropout(x: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Identity: Kiln compiles inference graphs."""
    if training:
        raise fail("dropout: training mode is not supported; Kiln compiles inference graphs")
    return x


# ---- indexing ------------------------------------------------------------------------------


def _slice_bounds(s: slice, n, axis: int):
    """(begin, end, step) of slice ``s`` on a dim of size ``n`` (int or symbolic)."""
    step = 1 if s.step is None else int(s.step)
    if step <= 0:
        raise fail(f"indexing: axis {axis}: only positive slice steps are supported, got {step}")
    if is_static(n):
        b, e, _ = s.indices(int(n))
        return b, builtins.max(e, b), step  # max/min/sum/abs/pow here are the ops
    # A symbolic dim: pass the ints on; strided_slice takes [0:] of it and says why not more.
    return (0 if s.start is None else int(s.start)), (_END if s.stop is None else int(s.stop)), step


_END = 2 ** 31 - 1  # strided_slice's "to the end" 


def getitem(x: Tensor, key) -> Tensor:
    """``x[key]`` with ints, slices (positive steps), ``None``, ``...`` and one integer Tensor
    index (numpy ``take`` semantics). Slices become one ``strided_slice``; ints then
    ``squeeze`` their axes; ``None`` adds axes with ``expand_dims``."""
    key = key if isinstance(key, tuple) else (key,)
    used = len([k for k in key if k is not None and k is not Ellipsis])
    if used > x.ndim:
        raise fail(f"indexing: too many indices ({used}) for a tensor of {x.ndim} dims")
    dots = [i for i, k in enumerate(key) if k is Ellipsis]  # not key.index: Tensor == builds a call
    if len(dots) > 1:
        raise fail("indexing: an index can only have a single ellipsis ('...')")
    if dots:
        i = dots[0]
        key = key[:i] + (slice(None),) * (x.ndim - used) + key[i + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - used)
    begin, end, strides, axes = [], [], [], []
    squeeze_axes, tensor_at, axis = [], None, 0
    for k in key:
        if k is None:
            continue
        n = x.shape[axis]
        if isinstance(k, Tensor):
            if tensor_at is not None:
                raise fail("indexing: only one Tensor index is supported")
            if dt.is_bool(k.dtype):
                raise fail("indexing with a boolean mask gives a data-dependent shape; use where()")
            tensor_at = (axis, k)
        elif isinstance(k, slice):
            b, e, s = _slice_bounds(k, n, axis)
            full = b == 0 and s == 1 and (e == _END or (is_static(n) and e == n))
            if not full:
                begin.append(b), end.append(e), strides.append(s), axes.append(axis)
        elif isinstance(k, (numbers.Integral, np.integer)):
            i = int(k)
            if is_static(n) and not -int(n) <= i < int(n):
                raise fail(f"indexing: index {i} is out of range for axis {axis} of size {n}")
            b = i + int(n) if i < 0 and is_static(n) else i
            begin.append(b), end.append(b + 1), strides.append(1), axes.append(axis)
            squeeze_axes.append(axis)
        else:
            raise fail(f"indexing: unsupported index {k!r}; use ints, slices, None, ... or one Tensor")
        axis += 1
    y = x
    if axes:
        y = emit("strided_slice", y, begin=tuple(begin), end=tuple(end), strides=tuple(strides),
                 axes=tuple(axes))
    if squeeze_axes:
        y = emit("squeeze", y, axis=tuple(squeeze_axes))
    if tensor_at is not None:
        a, idx = tensor_at
        y = take(y, idx, a - len([s for s in squeeze_axes if s < a]))
    # new axes: position of each None in the result
    pos, out_axes = 0, []
    for k in key:
        if k is None:
            out_axes.append(pos)
            pos += 1
        elif isinstance(k, Tensor):
            pos += k.ndim
        elif isinstance(k, slice):
            pos += 1
    for a in out_axes:
        y = unsqueeze(y, a)
    return y


# ---- Tensor methods ------------------------------------------------------------------------

def _r(fn):
    return lambda self, other: fn(other, self)


_METHODS = {
    "__add__": add, "__radd__": _r(add), "__sub__": subtract, "__rsub__": _r(subtract),
    "__mul__": multiply, "__rmul__": _r(multiply), "__truediv__": divide,
    "__rtruediv__": _r(divide), "__pow__": pow, "__rpow__": _r(pow), "__matmul__": matmul,
    "__rmatmul__": _r(matmul), "__neg__": neg, "__abs__": abs, "__getitem__": getitem,
    "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge, "__eq__": eq, "__ne__": ne,
    "__and__": logical_and, "__or__": logical_or, "__invert__": logical_not,
    "add": add, "sub": subtract, "mul": multiply, "div": divide, "pow": pow, "matmul": matmul,
    "neg": neg, "abs": abs, "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt, "tanh": tanh,
    "sigmoid": sigmoid, "erf": erf, "relu": relu, "silu": silu, "gelu": gelu,
    "clamp": clamp, "clip": clamp, "maximum": maximum, "minimum": minimum,
    "sum": sum, "mean": mean, "prod": prod, "max": max, "min": min, "amax": amax, "amin": amin,
    "argmax": argmax, "argmin": argmin, "var": var, "softmax": softmax, "log_softmax": log_softmax,
    "topk": topk, "reshape": reshape, "view": reshape, "permute": permute, "transpose": transpose,
    "flatten": flatten, "squeeze": squeeze, "unsqueeze": unsqueeze, "expand": expand,
    "broadcast_to": broadcast_to, "split": split, "chunk": chunk,
    "index_select": index_select, "gather": gather,
}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.__hash__ = object.__hash__  # __eq__ builds a comparison; identity still hashes
Tensor.astype = Tensor.to = cast
Tensor.float = lambda self: cast(self, "float32")
Tensor.half = lambda self: cast(self, "float16")
Tensor.long = lambda self: cast(self, "int64")
Tensor.int = lambda self: cast(self, "int32")
Tensor.contiguous = lambda self: self
Tensor.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
Tensor.mT = property(lambda self: transpose(self, -2, -1))

from .functional_nn import *  # noqa: E402,F401,F403  (layers' ops live there)
from .functional_nn import __all__ as _nn_all  # noqa: E402

__all__ = [
    "add", "subtract", "multiply", "divide", "sub", "mul", "div", "pow", "maximum", "minimum",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "where",
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "relu", "silu", "gelu",
    "cast", "clamp", "clip", "matmul", "sum", "mean", "prod", "amax", "amin", "max", "min",
    "argmax", "argmin", "var", "softmax", "log_softmax", "topk", "reshape", "permute",
    "transpose", "flatten", "squeeze", "unsqueeze", "broadcast_to", "expand", "concat", "cat",
    "stack", "split", "chunk", "take", "index_select", "gather", "pad", "dropout", "getitem",
] + list(_nn_all)
