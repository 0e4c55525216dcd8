"""Input specifications for ``Module.export``: what each argument of ``forward`` will be.

``Tensor(shape, dtype)``: a tensor argument. A shape entry is an int, or a string naming a
symbolic dimension; one name is one tensor-IR ``Var`` across the whole export, so ``"n"`` in
``prefill`` and ``"n"`` in ``decode`` (or in two arguments) is the same dimension.

>>> Tensor((1, 784), "float32")
Tensor((1, 784), 'float32')
>>> Tensor(("batch", 3, 224, 224)).shape
('batch', 3, 224, 224)
"""
from __future__ import annotations

from typing import Dict, Tuple, Union

import numpy as np

from ...ir import dtype as dt
from ...ir.expr import Var
from ...ir.graph import TensorType

Dim = Union[int, str, Var]


class SpecError(TypeError):
    """An export spec that does not fit the module: a missing or unknown argument, a value that
    is not a spec, a bad shape or dtype."""


def _dtype(dtype) -> str:
    if isinstance(dtype, str):
        try:
            return dt.check(dtype)
        except ValueError as e:
            raise SpecError(str(e)) from None
    try:  # numpy dtypes and scalar types ("np.float32")
        return dt.from_numpy(dtype)
    except (TypeError, ValueError):
        raise SpecError(f"unknown dtype {dtype!r}; expected a string such as 'float32'") from None


class Tensor:
    """A tensor argument of ``shape`` (ints, or strings for symbolic dims) and ``dtype``.

    Also used for each entry of the ``param_spec`` that ``export`` returns (all dims ints).
    """
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype="float32"):
        if isinstance(shape, (int, str, Var)):
            shape = (shape,)
        try:
            shape = tuple(shape)
        except TypeError:
            raise SpecError(f"spec.Tensor: shape must be a tuple of ints and names, got {shape!r}") from None
        for d in shape:
            ok = (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0) or \
                 (isinstance(d, str) and d.isidentifier()) or isinstance(d, Var)
            if not ok:
                raise SpecError(f"spec.Tensor: shape {shape!r} has entry {d!r}; each entry must be "
                                "an int >= 0 or a name such as 'n' for a symbolic dimension")
        self.shape: Tuple[Dim, ...] = tuple(int(d) if isinstance(d, (int, np.integer)) else d for d in shape)
        self.dtype: str = _dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def to_type(self, symbols: Dict[str, Var]) -> TensorType:
        """The graph type, with each named dim looked up in (or added to) ``symbols``."""
        dims = []
        for d in self.shape:
            if isinstance(d, str):
                d = symbols.setdefault(d, Var(d))
            elif isinstance(d, Var):
                d = symbols.setdefault(d.name, d)
            dims.append(d)
        return TensorType(tuple(dims), self.dtype)

    def __eq__(self, other):
        return isinstance(other, Tensor) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return f"Tensor({self.shape!r}, {self.dtype!r})"

