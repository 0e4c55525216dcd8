"""The torch.export importer (DESIGN.md, "Frontends"): ``from_exported_program(ep,
keep_params_as_input=False) -> (IRModule, params)``.

``program`` walks the FX graph; one module per op family (``elementwise``, ``nn``, ``tensor``,
``reduction``, ``scatter``, ``volumetric``, ``control_flow``) registers converters in the table of ``common`` keyed
by ATen operator or overload. ``supported_ops()`` lists them. Each converter maps onto the operator library
(``kiln.ops``): no operator is defined twice.
"""
from . import control_flow, elementwise, nn, reduction, scatter, tensor, volumetric
from .common import supported_ops
from .errors import TorchImportError
from .program import from_exported_program, load, save

_FAMILIES = (control_flow, elementwise, nn, reduction, scatter, tensor, volumetric)   # imported for their converters

__all__ = ["from_exported_program", "load", "save", "TorchImportError", "supported_ops"]
