"""The ONNX importer (DESIGN.md, "Frontends"): ``from_onnx(model, shape_dict=None, name="main", const_inputs=None)
-> (IRModule, params)``.

One module per op family (``nn``, ``elementwise``, ``tensor``, ``reduction``), each registering
converters in the table of ``common`` keyed by ONNX op type, with the opset version each
converter applies from. ``supported_ops()`` lists the op types.
"""
from . import (attention, control_flow, einsum, elementwise, grid, indexing, loss, nn, quantize,  # noqa: F401
               recurrent, reduction, spectral, tensor)  # (each registers its converters)
from . import loop, sequence  # noqa: F401,E402  (control flow and sequences)
from . import (data_dependent, deform_conv, det, flex_attention, integer_ops,  # noqa: F401,E402
               linear_attention, ml, roi_align, strings, tfidf, training)
from .common import ONNXImportError, supported_ops
from .importer import from_onnx

__all__ = ["from_onnx", "ONNXImportError", "supported_ops"]
