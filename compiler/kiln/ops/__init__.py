"""The operator library: each operator's shape rule, tensor program and numpy reference.

One file per family (elementwise, reduction, nn, transform, ...); each registers its
operators with ``registry.register``. ``call(name, *args, **attrs)`` builds a typed graph call.
"""
from .registry import OpDef, OpError, PATTERNS, call, get, list_ops, register
