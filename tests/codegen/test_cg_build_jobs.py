"""build_library: one object per kernel (cached by its IR), worker processes for big modules,
and the same library however the work was spread."""
from __future__ import annotations

import os

import numpy as np
import pytest

from kiln import codegen
from kiln.codegen import BuildOptions, CodegenError, emit
from kiln.ir import IRModule

from cg_harness import KernelLibrary
from cg_irbuild import buf, elementwise, prim_func, realize, store, nest


def _module(n_kernels=4, scale=1.0):
    funcs = {}
    for k in range(n_kernels):
        n = 8 * (k + 1)
        A, B = buf("A", (n,)), buf("B", (n,))
        funcs[f"k{k}"] = elementwise(n, [A], B, lambda a, k=k: a * (scale + k), "vectorized")
    return IRModule(funcs)


def _objects(cache):
    return sorted(f for f in os.listdir(os.path.join(cache, "objects")) if f.endswith(".o"))


@pytest.fixture
def workers_at_once(monkeypatch):
    """Worker processes start after the first kernel, whatever its size."""
    monkeypatch.setattr(emit, "PARALLEL_AFTER_S", 0.0)


def test_workers_build_the_same_library(tmp_path, workers_at_once):
    serial = codegen.build_library(_module(), "llvm", BuildOptions(cache_dir=str(tmp_path / "a"), jobs=1))
    parallel = codegen.build_library(_module(), "llvm", BuildOptions(cache_dir=str(tmp_path / "b"), jobs=3))
    assert os.path.basename(serial) == os.path.basename(parallel)   # same key: same objects
    assert _objects(tmp_path / "a") == _objects(tmp_path / "b")
    for name in _objects(tmp_path / "a"):
        with open(tmp_path / "a" / "objects" / name, "rb") as f, \
                open(tmp_path / "b" / "objects" / name, "rb") as g:
            assert f.read() == g.read(), name
    lib = KernelLibrary(parallel)
    for k in range(4):
        n = 8 * (k + 1)
        a, b = np.arange(n, dtype="float32"), np.zeros(n, "float32")
        assert lib.call(f"k{k}", a, b) == 0
        np.testing.assert_allclose(b, a * (1.0 + k))


def test_objects_are_cached_per_kernel(tmp_path):
    opts = BuildOptions(cache_dir=str(tmp_path), jobs=1)
    first = codegen.build_library(_module(), "llvm", opts)
    before = set(_objects(tmp_path))
    assert len(before) == 6      # four kernels, the library table and the CPU check
    mod = _module()
    A, B = buf("A", (8,)), buf("B", (8,))
    other = IRModule({**dict(mod.items()), "k0": elementwise(8, [A], B, lambda a: a - 1.0, "vectorized")})
    second = codegen.build_library(other, "llvm", opts)
    assert second != first
    assert len(set(_objects(tmp_path)) - before) == 1   # only the changed kernel is compiled


def test_a_kernel_error_is_raised_with_workers_running(tmp_path, workers_at_once):
    X = buf("X", (4,))   # neither a parameter nor allocated: codegen refuses it
    A, B = buf("A", (4,)), buf("B", (4,))
    bad = prim_func([A, B], nest([], realize("B", [], lambda: store(B, X[0], 0))))
    mod = IRModule({**dict(_module(3).items()), "bad": bad})
    with pytest.raises(CodegenError, match="buffer 'X' is used but is neither a parameter"):
        codegen.build_library(mod, "llvm", BuildOptions(cache_dir=str(tmp_path), jobs=2))


def test_the_cpu_check_object_is_shared_by_libraries(tmp_path):
    """The CPU features check is the same for every library of a target: one object holds it
    for both libraries here (each has its own library table)."""
    opts = BuildOptions(cache_dir=str(tmp_path), jobs=1)
    codegen.build_library(_module(2), "llvm", opts)
    codegen.build_library(_module(3), "llvm", opts)

    def defines_features(name):
        with open(os.path.join(tmp_path, "objects", name), "rb") as f:
            return b"kiln_cpu_features" in f.read()
    objs = _objects(tmp_path)
    assert len(objs) == 6        # three kernels, two library tables, one CPU check
    assert sum(map(defines_features, objs)) == 1
