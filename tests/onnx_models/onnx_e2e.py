"""Helpers for the end-to-end ONNX model tests: import -> bind -> "default" -> compile, with a
skip naming the operator when the importer does not support an operator yet."""
from __future__ import annotations

import re

import numpy as np
import pytest


_UNSUPPORTED = re.compile(r"\((\w+), opset \d+\): (.*not supported.*)")


def import_or_skip(model, shape_dict=None, const_inputs=None):
    """``kiln.frontend.from_onnx(model, shape_dict, const_inputs=...)``; skips the test when the
    importer rejects an operator it does not support, with the operator named. Any other error
    fails the test."""
    import kiln
    from kiln.frontend.onnx.common import ONNXImportError
    from_onnx = kiln.frontend.from_onnx
    try:
        return from_onnx(model, shape_dict=shape_dict, const_inputs=const_inputs)
    except ONNXImportError as e:
        m = _UNSUPPORTED.search(str(e))
        if m is None:
            raise
        pytest.skip(f"importer does not support ONNX operator {m.group(1)}: {e}")


def compile_onnx(model, shape_dict=None, const_inputs=None, with_executable=False):
    """Import (or skip), bind the initializers, run the "default" pipeline, compile for the
    host, and return a ``kiln.VirtualMachine`` (and the ``Executable`` with ``with_executable``)."""
    import kiln
    mod, params = import_or_skip(model, shape_dict, const_inputs)
    mod = kiln.transform.bind_params("main", params)(mod)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), target="llvm")
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    return (vm, ex) if with_executable else vm


def run_kiln(vm, inputs: dict) -> list:
    """The outputs of ``vm["main"]`` on ``inputs`` (in graph-input order) as numpy arrays."""
    out = vm["main"](*inputs.values())
    outs = out if isinstance(out, tuple) else (out,)
    return [np.asarray(o.numpy()) for o in outs]
