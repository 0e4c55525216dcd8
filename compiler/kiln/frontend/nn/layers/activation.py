"""Activations and other parameter-free layers: ``ReLU``, ``GELU``, ``SiLU``, ``Sigmoid``,
``Tanh``, ``Softmax``, ``LogSoftmax``, ``Dropout`` (identity), ``Flatten``.

>>> Sequential(Linear(4, 8), GELU(approximate="tanh"), Dropout(0.1))   # doctest: +SKIP
"""
from __future__ import annotations

from .. import functional as F
from ..module import Module


class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    """GELU; ``approximate="tanh"`` for the tanh form."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x):
        return F.silu(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Softmax(Module):
    """Softmax over ``dim`` (default -1; PyTorch requires it, so pass it explicitly)."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = -1 if dim is None else int(dim)

    def forward(self, x):
        return F.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return F.log_softmax(x, self.dim)


class Dropout(Module):
    """Identity: Kiln compiles for inference. ``p`` is kept for repr and checked."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = float(p)

    def forward(self, x):
        return x

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Flatten(Module):
    """Dims ``start_dim..end_dim`` merged (PyTorch's defaults: 1 and -1)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
