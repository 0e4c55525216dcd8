"""Linear layers: ``Linear``, ``Embedding``, ``Identity``.

>>> fc = Linear(784, 256)            # weight [256, 784], bias [256]
>>> [n for n, _ in fc.named_parameters()]
['weight', 'bias']
"""
from __future__ import annotations

from .. import functional_nn as F
from ..module import Module
from ..parameter import Parameter, fan_in_uniform, normal


class Identity(Module):
    """Returns its input."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias``; ``weight`` [out_features, in_features] as in PyTorch, so a
    PyTorch ``state_dict`` loads as is. Emits ``linear`` then ``add``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype: str = "float32"):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        init = fan_in_uniform(self.in_features)
        self.weight = Parameter((self.out_features, self.in_features), dtype, init=init)
        self.bias = Parameter((self.out_features,), dtype, init=init) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """Rows of ``weight`` [num_embeddings, embedding_dim] at integer indices (operator ``take``)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: str = "float32"):
        super().__init__()
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.weight = Parameter((self.num_embeddings, self.embedding_dim), dtype, init=normal(1.0))

    def forward(self, x):
        return F.embedding(x, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
