"""Frontends: everything that produces an ``IRModule`` (DESIGN.md, "Frontends").

- ``kiln.frontend.nn``: a PyTorch-like ``Module`` API; ``Module.export(spec)`` traces
  ``forward`` into graph functions (``from kiln import nn``).
- ``kiln.frontend.from_onnx``: the ONNX importer (``kiln.frontend.onnx``).

Sub-packages load on first use so that ``import kiln.frontend`` stays cheap.
"""
from importlib import import_module as _import_module

_LAZY = {"nn": ("kiln.frontend.nn", None),
         "onnx": ("kiln.frontend.onnx", None),
         "from_onnx": ("kiln.frontend.onnx", "from_onnx")}


def __getattr__(name):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'kiln.frontend' has no attribute {name!r}") from None
    value = _import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
