"""Kiln script: IR as Python-syntax text, printed by ``kiln.ir.printer`` and parsed here.

>>> from kiln.script import T
>>> @kiln.script.ir_module                              # doctest: +SKIP
... class MyModule:
...     @T.prim_func
...     def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
...         for i in range(8):
...             with T.block("B"):
...                 vi = T.axis.spatial(8, i)
...                 B[vi] = A[vi] + 1.0
>>> kiln.script.parse(MyModule.script())              # doctest: +SKIP   (an equal IRModule)

``T`` is the tensor-program namespace, ``R`` the graph-function one. Function kinds plug into
the parser with ``register_function_kind`` (and into the printer with
``kiln.ir.printer.register_function_printer``). Large graph constants print as
``R.const(metadata["key"])``: ``parse(text, metadata=metadata(original))`` reads them back.
"""
from ..ir.analysis import infer_access_regions
from ..ir.graph_printer import metadata
from . import relax as R
from . import tir as T
from . import tir_parser as _tir_parser  # registers @T.prim_func  # noqa: F401
from . import graph_parser as _graph_parser  # registers @R.function  # noqa: F401
from .parser import (ScriptError, ir_module, module_attrs, parse, register_function_kind)


def assert_roundtrip(node):
    """Check that ``node`` (an IRModule, PrimFunc or graph Function) prints to text that parses
    back to a structurally equal node (large constants passed as metadata), and that the reparsed node prints to the very same text.
    Returns the reparsed node. Raises AssertionError showing the text on failure."""
    from ..ir.printer import to_text
    from ..ir.structural import assert_structural_equal
    text = to_text(node)
    try:
        parsed = parse(text, metadata=metadata(node))
    except ScriptError as e:
        raise AssertionError(f"printed text does not parse: {e}\n--- text ---\n{text}") from None
    assert_structural_equal(node, parsed)
    again = to_text(parsed)
    if again != text:
        raise AssertionError(f"printing the reparsed node gives other text\n--- first ---\n{text}\n"
                             f"--- second ---\n{again}")
    return parsed


__all__ = ["R", "T", "ScriptError", "assert_roundtrip", "infer_access_regions", "ir_module",
           "metadata", "module_attrs", "parse", "register_function_kind"]
