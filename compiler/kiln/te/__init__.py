"""Tensor expressions: describe a computation per output element, get a tensor program.

>>> from kiln import te
>>> A = te.placeholder((8,), "float32", name="A")
>>> B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
>>> func = te.create_prim_func([A, B])
>>> [p.name for p in func.params]
['A', 'B']

Reductions: ``k = te.reduce_axis((0, K), name="k")`` and, as the whole body of a compute,
``te.sum(A[i, k] * B[k, j], axis=k)`` (also ``te.max`` / ``te.min``). Symbolic sizes:
``n = te.var("n")``.
"""
from .create_prim_func import create_prim_func
from .tensor import (KEEP_STAGE, ComputeOp, Operation, PlaceholderOp, Reduce, ReduceAxis, Tensor, TensorLoad,
                     compute, erf, exp, if_then_else, log, max_value, min_value, placeholder,
                     reduce_axis, rsqrt, sigmoid, size_var, sqrt, tanh, var)
from .tensor import abs_ as abs  # noqa: A001 - te.abs, as in TVM
from .tensor import pow_ as pow  # noqa: A001
from .tensor import reduce_max as max  # noqa: A001
from .tensor import reduce_min as min  # noqa: A001
from .tensor import reduce_sum as sum  # noqa: A001

__all__ = ["KEEP_STAGE", "ComputeOp", "Operation", "PlaceholderOp", "Reduce", "ReduceAxis", "Tensor",
           "TensorLoad", "abs", "compute", "create_prim_func", "erf", "exp", "if_then_else", "log",
           "max", "max_value", "min", "min_value", "placeholder", "pow", "reduce_axis", "rsqrt",
           "sigmoid", "size_var", "sqrt", "sum", "tanh", "var"]
