"""Convolution and pooling layers (NCHW / OIHW, PyTorch's parameters and defaults):
``Conv1d``, ``Conv2d``, ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d``.

>>> conv = Conv2d(3, 16, 3, stride=2, padding=1)     # weight [16, 3, 3, 3], bias [16]
>>> conv.weight.shape
(16, 3, 3, 3)
"""
from __future__ import annotations

import math

from .. import functional_nn as F
from ..module import Module
from ..parameter import Parameter, fan_in_uniform


def _ntuple(v, n: int, what: str) -> tuple:
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ValueError(f"{what} must be an int or {n} ints, got {tuple(v)}")
        return tuple(int(x) for x in v)
    return (int(v),) * n


class _ConvNd(Module):
    _n = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 dtype: str = "float32"):
        super().__init__()
        name = type(self).__name__
        if padding_mode != "zeros":
            raise ValueError(f"{name}: padding_mode {padding_mode!r} is not supported; only 'zeros'")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) "
                             f"must be divisible by groups ({groups})")
        n = self._n
        self.in_channels, self.out_channels, self.groups = int(in_channels), int(out_channels), int(groups)
        self.kernel_size = _ntuple(kernel_size, n, f"{name}: kernel_size")
        self.stride = _ntuple(stride, n, f"{name}: stride")
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n, f"{name}: padding")
        self.dilation = _ntuple(dilation, n, f"{name}: dilation")
        shape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        init = fan_in_uniform(shape[1] * math.prod(self.kernel_size))
        self.weight = Parameter(shape, dtype, init=init)
        self.bias = Parameter((self.out_channels,), dtype, init=init) if bias else None

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}, padding={self.padding}")
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    """1-D convolution of [N, C, L] (operator ``conv1d``, then the bias ``add``)."""
    _n = 1

    def forward(self, x):
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    """2-D convolution of [N, C, H, W] (operator ``conv2d``, then the bias ``add``)."""
    _n = 2

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed ``output_size`` (an int or (h, w); None keeps that size)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
