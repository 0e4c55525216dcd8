"""kiln.compile: one shared library holding the kernels and the executable blob."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from kiln import te
from kiln.codegen import BuildOptions
from kiln.executable import Executable, compile as kiln_compile, deserialize, load_spec, read_blob
from kiln.executable.executable import BLOB_SIZE_SYMBOL, BLOB_SYMBOL
from kiln.ir import Constant, FunctionBuilder, GraphVar, IRModule, TensorType, call_dps_packed, call_tir


def _module(bias=1.0):
    A = te.placeholder((8,), "float32", name="A")
    B = te.placeholder((8,), "float32", name="B")
    add = te.create_prim_func([A, B, te.compute((8,), lambda i: A[i] + B[i], name="C")])
    X = te.placeholder((8,), "float32", name="X")
    scale = te.create_prim_func([X, te.compute((8,), lambda i: X[i] * 3.0, name="Y")])
    x = GraphVar("x", TensorType((8,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        lv = fb.emit(call_tir("add", [x, Constant(np.full(8, bias, "float32"))], TensorType((8,), "float32")))
        gv = fb.emit_output(call_tir("scale", [lv], TensorType((8,), "float32")))
    return IRModule({"add": add, "scale": scale, "main": fb.finish(gv)})


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    return BuildOptions(cache_dir=str(tmp_path_factory.mktemp("kiln_cache")))


@pytest.fixture(scope="module")
def ex(options):
    return kiln_compile(_module(), "llvm", options=options)


def _dynamic_symbols(path):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not available")
    out = subprocess.run([nm, "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_library_exports_blob_and_kernels(ex):
    assert isinstance(ex, Executable)
    syms = _dynamic_symbols(ex.library_path)
    assert {BLOB_SYMBOL, BLOB_SIZE_SYMBOL, "kiln_library_info", "kiln_fn_add", "kiln_fn_scale"} <= syms


def test_blob_in_library_is_the_blob(ex):
    blob = read_blob(ex.library_path)
    assert blob == ex.blob
    assert deserialize(blob) == ex.spec == load_spec(ex.library_path)


def test_executable_attributes(ex):
    assert ex.kernel_names == ["add", "scale"]
    assert ex.function_names == ["main"]
    assert ex.target.startswith("llvm -mtriple=")
    s = ex.stats
    assert (s.num_kernels, s.num_externs, s.num_constants, s.constant_bytes) == (2, 0, 1, 32)
    assert s.arena_size == 64 and s.naive_size == 64 and s.blob_size == len(ex.blob)
    r = repr(ex)
    assert "functions=['main']" in r and "kernels=2" in r and "arena=64 bytes" in r
    text = ex.disassemble()
    assert "kernel 1: scale" in text and "CALL_KERNEL 0 3 0 1 2" in text and "RET" in text


def test_export_library(ex, tmp_path):
    path = ex.export_library(tmp_path / "model.so")
    assert os.path.exists(path) and read_blob(path) == ex.blob
    with pytest.raises(ValueError, match="export_static"):
        ex.export_library(tmp_path / "model.a")


def test_cache_is_keyed_by_the_blob(ex, options):
    again = kiln_compile(_module(), "llvm", options=options)
    assert again.library_path == ex.library_path
    other = kiln_compile(_module(bias=2.0), "llvm", options=options)  # same kernels, other weights
    assert other.library_path != ex.library_path
    assert read_blob(other.library_path) == other.blob != ex.blob


def test_library_loads_in_the_runtime(ex):
    runtime = pytest.importorskip("kiln.runtime")
    lib = runtime.load_module(ex.library_path)
    a = runtime.nd.array(np.arange(8, dtype="float32"))
    b = runtime.nd.array(np.ones(8, dtype="float32"))
    c = runtime.nd.empty((8,), "float32")
    lib["add"](a, b, c)
    np.testing.assert_allclose(c.numpy(), np.arange(8) + 1.0)


def test_externs_only_module(options):
    x = GraphVar("x", TensorType((4,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(call_dps_packed("env.relu", [x], TensorType((4,), "float32")))
    ex = kiln_compile(IRModule({"main": fb.finish(gv)}), "llvm", options=options)
    assert ex.kernel_names == [] and ex.spec.externs == ["env.relu"]
    assert {BLOB_SYMBOL, "kiln_library_info"} <= _dynamic_symbols(ex.library_path)


def test_large_constant_round_trips(options):
    w = np.random.default_rng(0).standard_normal(300_000).astype("float32")  # ~1.2 MB
    A = te.placeholder((300_000,), "float32", name="A")
    B = te.placeholder((300_000,), "float32", name="B")
    add = te.create_prim_func([A, B, te.compute((300_000,), lambda i: A[i] + B[i], name="C")])
    x = GraphVar("x", TensorType((300_000,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(call_tir("add", [x, Constant(w)], TensorType((300_000,), "float32")))
    ex = kiln_compile(IRModule({"add": add, "main": fb.finish(gv)}), "llvm", options=options)
    np.testing.assert_array_equal(load_spec(ex.library_path).constants[0], w)
