"""``kiln.nn`` (``from kiln import nn``): build models PyTorch-style and export them to graph
functions.

>>> from kiln import nn
>>> class MLP(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc1, self.relu1, self.fc2 = nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)
...     def forward(self, x):
...         return self.fc2(self.relu1(self.fc1(x)))
>>> mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
>>> [(name, p.shape) for name, p in param_spec][:2]
[('fc1.weight', (256, 784)), ('fc1.bias', (256,))]

- ``Module``, ``Parameter``, containers (``Sequential``, ``ModuleList``, ``ModuleDict``);
- ``spec.Tensor(shape, dtype)``: export input specs (strings in ``shape`` are symbolic dims);
- layers (``nn.layers``, also here): Linear, Conv1d/2d, pools, norms, activations, attention;
- ``nn.functional``: the ops (also the PyTorch top-level ones here: ``nn.matmul``, ``nn.cat``...);
- ``Tensor``: the symbolic tensor ``forward`` receives during export.
"""
from . import functional, init, layers, spec
from .export import export
from .functional import (abs, add, argmax, argmin, cat, chunk, clamp, concat, div, divide, eq, erf,
                         exp, flatten, gather, ge, gt, index_select, le, log, lt, matmul, max, maximum,
                         mean, min, minimum, mul, multiply, ne, neg, permute, pow, prod, relu,
                         reshape, rsqrt, sigmoid, softmax, split, sqrt, squeeze, stack, sub,
                         subtract, sum, tanh, take, topk, transpose, unsqueeze, where)
from .layers import *  # noqa: F401,F403
from .module import Module, ModuleDict, ModuleList, Sequential
from .parameter import Parameter
from .spec import SpecError
from .tensor import Tensor
