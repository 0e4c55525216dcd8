"""Helpers for the end-to-end ONNX model tests: import -> bind -> "default" -> compile. Every
model imports: an import error fails the test (it would be a regression)."""
from __future__ import annotations

import numpy as np


def compile_onnx(model, shape_dict=None, const_inputs=None, with_executable=False,
                 target="llvm"):
    """Import, bind the initializers, run the "default" pipeline for ``target`` (default: the
    host), compile, and return a ``kiln.VirtualMachine`` (and the ``Executable`` with
    ``with_executable``)."""
    import kiln
    mod, params = kiln.frontend.from_onnx(model, shape_dict=shape_dict, const_inputs=const_inputs)
    mod = kiln.transform.bind_params("main", params)(mod)
    ex = kiln.compile(kiln.get_pipeline("default", target=target)(mod), target=target)
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    return (vm, ex) if with_executable else vm


def run_kiln(vm, inputs: dict) -> list:
    """The outputs of ``vm["main"]`` on ``inputs`` (in graph-input order) as numpy arrays."""
    out = vm["main"](*inputs.values())
    outs = out if isinstance(out, tuple) else (out,)
    return [np.asarray(o.numpy()) for o in outs]
