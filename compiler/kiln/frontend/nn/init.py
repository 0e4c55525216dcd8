"""Initializers for ``Parameter(init=...)``: ``fn(rng, shape, dtype) -> ndarray`` with a numpy
``Generator``, used by ``Module.init_params(seed)``.

>>> from kiln import nn
>>> p = nn.Parameter((2, 3), init=nn.init.normal(0.02))
>>> p.initial_value(np.random.default_rng(0)).shape          # doctest: +SKIP
(2, 3)
"""
from .parameter import constant_init as constant, fan_in_uniform, normal, ones, uniform, zeros

__all__ = ["constant", "fan_in_uniform", "normal", "ones", "uniform", "zeros"]
