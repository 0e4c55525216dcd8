"""``Parameter``: a named weight of a Module: a static shape and dtype, optionally its data
(numpy) and an initializer for ``Module.init_params``.

While a module is exported a Parameter behaves as a traced ``Tensor``: it stands for the
graph parameter of the same name (``fc1.weight``), so ``x @ self.weight.T`` works in
``forward``. Outside export it only holds its spec and data.

>>> w = Parameter((256, 784), init=uniform(1 / 28))
>>> w.shape, w.dtype, w.data is None
((256, 784), 'float32', True)

Initializers are ``fn(rng, shape, dtype) -> ndarray`` with a numpy ``Generator``; the layers
use PyTorch's default schemes (uniform in +-1/sqrt(fan_in) for linear and conv weights,
ones/zeros for norms, N(0, 1) for embeddings) so that seeded models are reproducible.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from ...ir import dtype as dt
from .spec import SpecError, Tensor as TensorSpec, _dtype
from .tensor import Tensor, current_trace

Init = Callable[[np.random.Generator, tuple, str], np.ndarray]


def uniform(bound: float) -> Init:
    """Uniform in [-bound, bound)."""
    return lambda rng, shape, dtype: rng.uniform(-bound, bound, shape).astype(dtype)


def normal(std: float = 1.0, mean: float = 0.0) -> Init:
    return lambda rng, shape, dtype: rng.normal(mean, std, shape).astype(dtype)


def constant_init(value: float) -> Init:
    return lambda rng, shape, dtype: np.full(shape, value, dtype=dtype)


zeros, ones = constant_init(0.0), constant_init(1.0)


def fan_in_uniform(fan_in: int) -> Init:
    """PyTorch's default for Linear/Conv weights and biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    return uniform(1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0)


class Parameter(Tensor):
    """A weight of ``shape`` (ints) and ``dtype``; ``data`` (numpy) is optional until weights
    are needed (``state_dict``, ``load_state_dict``, ``bind_params``)."""
    __slots__ = ("_shape", "_dtype", "_data", "init")

    def __init__(self, shape, dtype="float32", data=None, init: Optional[Init] = None):
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(shape)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise SpecError(f"Parameter: shape must be ints >= 0, got {shape!r}")
        self._shape = tuple(int(d) for d in shape)
        self._dtype = _dtype(dtype)
        self.init = init if init is not None else self._default_init()
        self._data = None
        if data is not None:
            self.data = data

    def _default_init(self) -> Init:
        fan_in = int(np.prod(self._shape[1:])) if len(self._shape) > 1 else (self._shape[0] if self._shape else 1)
        return fan_in_uniform(fan_in)

    @property
    def expr(self):
        """The graph parameter this Parameter stands for in the function being exported."""
        trace = current_trace("using a Parameter")
        try:
            return trace.params[id(self)]
        except KeyError:
            raise RuntimeError(f"a Parameter of shape {self._shape} is used in {trace.root} but is "
                               "not registered on the exported module; assign it as an attribute "
                               "of a Module (self.w = nn.Parameter(...))") from None

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self._shape, self._dtype)

    @property
    def data(self) -> Optional[np.ndarray]:
        return self._data

    @data.setter
    def data(self, value) -> None:
        if value is None:
            self._data = None
            return
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray)
                         else value)
        if arr.shape != self._shape:
            raise ValueError(f"Parameter data has shape {arr.shape}, expected {self._shape}")
        want = dt.to_numpy(self._dtype)
        if arr.dtype != want:
            # float64 -> float32 is fine (numpy and torch defaults); int -> float is a mistake
            if arr.dtype.kind != want.kind or not np.can_cast(arr.dtype, want, casting="same_kind"):
                raise ValueError(f"Parameter data has dtype {arr.dtype}, expected {self._dtype}")
            arr = arr.astype(want)
        self._data = np.ascontiguousarray(arr)

    def initial_value(self, rng: np.random.Generator) -> np.ndarray:
        """A fresh value from ``init`` (does not change ``data``)."""
        arr = np.asarray(self.init(rng, self._shape, dt.to_numpy(self._dtype)))
        return np.ascontiguousarray(arr.astype(dt.to_numpy(self._dtype), copy=False).reshape(self._shape))

    def __repr__(self):
        return f"Parameter({self._shape}, {self._dtype!r}{', data' if self._data is not None else ''})"
