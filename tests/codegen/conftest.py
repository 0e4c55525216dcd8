"""Fixtures for the codegen tests; the ctypes harness itself is in cg_harness.py."""
from __future__ import annotations

import numpy as np
import pytest

from kiln import codegen
from kiln.ir import IRModule
from kiln.ir import dtype as dt
from kiln.ir.evaluator import evaluate

from cg_harness import KernelLibrary


@pytest.fixture(scope="session")
def options(tmp_path_factory):
    return codegen.BuildOptions(cache_dir=str(tmp_path_factory.mktemp("kiln-cache")))


@pytest.fixture(scope="session")
def build(options):
    """build(mod_or_func, target="llvm") -> KernelLibrary."""
    def _build(mod, target="llvm"):
        return KernelLibrary(codegen.build_library(mod, target, options))
    return _build


def tolerance(dtype: str):
    return {"float16": (2e-3, 2e-3), "float32": (2e-5, 1e-6), "float64": (1e-12, 1e-14)}.get(dt.element(dtype), (0, 0))


def _compare(func, lib, name, arrays, ctx, rtol, atol, expected, byte_offset):
    got = [a.copy() for a in arrays]
    ref = [a.copy() for a in arrays]
    assert lib.call(name, *got, ctx=ctx, byte_offset=byte_offset) == 0, f"{name}: non-zero status"
    evaluate(func, *ref)
    for k, (g, r) in enumerate(zip(got, ref)):
        rt, at = tolerance(g.dtype.name)
        rt, at = rtol if rtol is not None else rt, atol if atol is not None else at
        np.testing.assert_allclose(g, r, rtol=rt, atol=at, err_msg=f"{name}: argument {k} vs evaluator")
        if expected is not None and expected[k] is not None:
            np.testing.assert_allclose(g, expected[k], rtol=max(rt, 1e-6), atol=max(at, 1e-6),
                                       err_msg=f"{name}: argument {k} vs numpy")
    return got


@pytest.fixture(scope="session")
def check(build):
    """check(func, *arrays, ctx=None, rtol=None, atol=None, expected=None): run ``func`` compiled
    and in the reference evaluator on copies of ``arrays``; every array must agree afterwards
    (and equal ``expected[k]`` where given). Returns the compiled run's arrays."""
    def _check(func, *arrays, ctx=None, rtol=None, atol=None, expected=None, byte_offset=0):
        if isinstance(func, IRModule):
            func = func["main"]
        return _compare(func, build(func), "main", arrays, ctx, rtol, atol, expected, byte_offset)
    return _check


@pytest.fixture(scope="session")
def check_many(build):
    """check_many({name: (func, arrays, expected)}): like ``check`` for many functions built
    into one library (one LLVM compile and link instead of one per case)."""
    def _check_many(cases, rtol=None, atol=None, ctx=None):
        lib = build(IRModule({name: c[0] for name, c in cases.items()}))
        return {name: _compare(func, lib, name, arrays, ctx, rtol, atol, expected, 0)
                for name, (func, arrays, expected) in cases.items()}
    return _check_many
