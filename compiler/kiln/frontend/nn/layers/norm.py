"""Normalisation layers (inference): ``BatchNorm1d``, ``BatchNorm2d``, ``LayerNorm``,
``RMSNorm``, ``GroupNorm``, with PyTorch's parameter names so its state_dicts load.

BatchNorm's running statistics are Parameters too (graph inputs after ``export``), so
``bind_params`` and constant folding treat them like any weight.

>>> bn = BatchNorm2d(16)
>>> [n for n, _ in bn.named_parameters()]
['weight', 'bias', 'running_mean', 'running_var']
"""
from __future__ import annotations

from .. import functional_nn as F
from ..module import Module
from ..parameter import Parameter, ones, zeros


def _shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(d) for d in normalized_shape)


class _BatchNorm(Module):
    _ignored_state_keys = ("num_batches_tracked",)  # a training counter PyTorch saves

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, dtype: str = "float32"):
        super().__init__()
        if not track_running_stats:
            raise ValueError(f"{type(self).__name__}: track_running_stats=False normalises with batch "
                             "statistics, which inference graphs do not support")
        self.num_features, self.eps = int(num_features), float(eps)
        c = (self.num_features,)
        self.weight = Parameter(c, dtype, init=ones) if affine else None
        self.bias = Parameter(c, dtype, init=zeros) if affine else None
        self.running_mean = Parameter(c, dtype, init=zeros)
        self.running_var = Parameter(c, dtype, init=ones)

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


class BatchNorm1d(_BatchNorm):
    """Batch norm of [N, C] or [N, C, L] over channel axis 1."""


class BatchNorm2d(_BatchNorm):
    """Batch norm of [N, C, H, W] over channel axis 1 (operator ``batch_norm``)."""


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dims, then ``* weight + bias``."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype: str = "float32"):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), float(eps)
        affine = bool(elementwise_affine)
        self.weight = Parameter(self.normalized_shape, dtype, init=ones) if affine else None
        self.bias = Parameter(self.normalized_shape, dtype, init=zeros) if affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims; ``eps=None`` is the
    dtype's machine epsilon (as PyTorch)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, dtype: str = "float32"):
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.weight = Parameter(self.normalized_shape, dtype, init=ones) if elementwise_affine else None

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class GroupNorm(Module):
    """Normalise [N, C, ...] in ``num_groups`` groups of channels, then per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 dtype: str = "float32"):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps = int(num_groups), int(num_channels), float(eps)
        self.weight = Parameter((self.num_channels,), dtype, init=ones) if affine else None
        self.bias = Parameter((self.num_channels,), dtype, init=zeros) if affine else None

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}"
