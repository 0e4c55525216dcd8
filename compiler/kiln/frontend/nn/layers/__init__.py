"""The layers of ``kiln.nn``, one file per family (linear, conv and pooling, norms,
activations, attention). Each is a ``Module`` with PyTorch's constructor arguments and
parameter names, so a PyTorch ``state_dict`` loads into the matching Kiln model."""
from .activation import Dropout, Flatten, GELU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .attention import Attention, MultiheadAttention
from .conv import AdaptiveAvgPool2d, AvgPool2d, Conv1d, Conv2d, MaxPool2d
from .gpt import GPT
from .linear import Embedding, Identity, Linear
from .norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from ..module import ModuleDict, ModuleList, Sequential

__all__ = ["AdaptiveAvgPool2d", "Attention", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv1d",
           "Conv2d", "Dropout", "Embedding", "Flatten", "GELU", "GPT", "GroupNorm", "Identity", "LayerNorm",
           "Linear", "LogSoftmax", "MaxPool2d", "ModuleDict", "ModuleList", "MultiheadAttention",
           "RMSNorm", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh"]
