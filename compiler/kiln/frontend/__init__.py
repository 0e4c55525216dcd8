"""Frontends: everything that produces an ``IRModule`` (DESIGN.md, "Frontends").

- ``kiln.frontend.nn``: a PyTorch-like ``Module`` API; ``Module.export(spec)`` traces
  ``forward`` into graph functions (``from kiln import nn``).
- ``kiln.frontend.from_onnx``: the ONNX importer (``kiln.frontend.onnx``).
- ``kiln.frontend.from_exported_program``: the ``torch.export`` importer (``kiln.frontend.torch``).

Sub-packages load on first use so that ``import kiln.frontend`` stays cheap.
"""
from .._lazy import lazy_attributes

_LAZY = {"nn": ("kiln.frontend.nn", None),
         "onnx": ("kiln.frontend.onnx", None),
         "from_onnx": ("kiln.frontend.onnx", "from_onnx"),
         "torch": ("kiln.frontend.torch", None),
         "from_exported_program": ("kiln.frontend.torch", "from_exported_program")}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
