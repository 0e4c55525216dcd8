"""Targets, compiled modules, the library cache, the kiln_library_info table, kiln.build through
the runtime, and the errors codegen gives for programs and targets it cannot compile."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from kiln import codegen
from kiln.codegen import BuildOptions, CodegenError, parse_target
from kiln.ir import Buffer, Div, For, IRModule, Var

from cg_irbuild import buf, elementwise, nest, prim_func, realize, store


def add_one(n=8):
    A, B = buf("A", (n,)), buf("B", (n,))
    return elementwise(n, [A], B, lambda a: a + 1.0, "vectorized")


# ---- targets --------------------------------------------------------------------------------

def test_host_target():
    t = parse_target("llvm")
    assert t.host and t.linkable and str(t) == "llvm"
    assert t.vector_bits in (128, 256, 512)
    assert t.function_attributes()["target-cpu"] == t.cpu


@pytest.mark.parametrize("spec,triple,cpu,bits", [
    ("llvm -mcpu=skylake-avx512", None, "skylake-avx512", 512),
    ("llvm -mcpu=haswell", None, "haswell", 256),
    ("llvm -mcpu=haswell -mattr=-avx", None, "haswell", 128),
    ("llvm -mtriple=aarch64-linux-gnu", "aarch64-linux-gnu", "generic", 128),
    ("aarch64-linux-gnu", "aarch64-linux-gnu", "generic", 128),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4", "x86_64-linux-gnu", "znver4", 512),
])
def test_parse_target(spec, triple, cpu, bits):
    t = parse_target(spec)
    assert (t.triple == triple if triple else t.triple == parse_target("llvm").triple)
    assert t.cpu == cpu and t.vector_bits == bits
    assert parse_target(str(t)) == t  # str() round-trips


def test_target_features():
    t = parse_target("llvm -mcpu=haswell -mattr=-fma")
    assert t.has_feature("avx2") and not t.has_feature("fma")
    assert parse_target("aarch64-linux-gnu").has_feature("neon")
    assert parse_target("aarch64-linux-gnu").lanes(32) == 4


@pytest.mark.parametrize("spec,message", [
    ("cuda", "target 'cuda': no CUDA code generation"),
    ("llvm -mcpu", "bad target option"),
    ("llvm -opt=3", "unknown target option '-opt'"),
    ("llvm -mattr=avx2", "bad -mattr entry 'avx2'"),
    ("sparc99-unknown-none", "unknown target triple"),
    ("", "bad target"),
])
def test_bad_targets(spec, message):
    with pytest.raises(CodegenError, match=message):
        parse_target(spec)


# ---- compiled modules and libraries -----------------------------------------------------------

def test_compiled_module_outputs(tmp_path):
    cm = codegen.compile_module(add_one(), "llvm")
    ir_text = cm.llvm_ir()
    assert re.search(r"define dso_local .*i32 @kiln_fn_main\(", ir_text) and "@kiln_library_info" in ir_text
    assert "kiln_fn_main" in cm.assembly()
    obj = cm.object_code()
    assert obj[:4] == b"\x7fELF"
    path = cm.save_object(str(tmp_path / "k.o"))
    assert open(path, "rb").read() == obj
    assert [k.name for k in cm.kernels] == ["main"]


def test_library_cache(tmp_path):
    opts = BuildOptions(cache_dir=str(tmp_path / "cache"))
    p1 = codegen.build_library(add_one(), "llvm", opts)
    inode = os.stat(p1).st_ino      # a rewrite would replace the file (os.replace): a new inode
    p2 = codegen.build_library(add_one(), "llvm", opts)   # an equal program: a cache hit
    assert p1 == p2 and os.stat(p2).st_ino == inode
    p3 = codegen.build_library(add_one(16), "llvm", opts)     # another program
    other_cpu = "llvm -mcpu=x86-64" if parse_target("llvm").arch == "x86_64" else "llvm -mcpu=generic"
    p4 = codegen.build_library(add_one(), other_cpu, opts)   # another target
    assert len({p1, p3, p4}) == 3
    assert all(os.path.dirname(p) == str(tmp_path / "cache") for p in (p1, p3, p4))


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "env-cache"))
    assert BuildOptions().cache_dir == str(tmp_path / "env-cache")
    monkeypatch.delenv("KILN_CACHE_DIR")
    assert BuildOptions().cache_dir.endswith(os.path.join(".cache", "kiln"))


def test_library_info_table(build):
    n, m = Var("n"), Var("m")
    A, B = buf("A", (n, 4, m)), buf("B", (m,), "int8")
    flag = Buffer("flag", (), "bool")
    i = Var("i")
    body = realize("B", [("S", m, i)], lambda vi: store(B, A[0, 0, vi].astype("int8"), vi))
    f1 = prim_func([A, B, flag], nest([(i, m, "serial")], body))
    lib = build(IRModule({"my-kernel.v2": f1, "my_kernel_v2": add_one(), "main": add_one(4)}))
    assert lib.info.abi_version == 3 and set(lib.kernels) == {"my-kernel.v2", "my_kernel_v2", "main"}
    # the last field: KILN_PARAM_WRITTEN (1) for the parameters the kernel stores into
    assert lib.params("my-kernel.v2") == [("A", 2, 32, 1, [-1, 4, -2], 0), ("B", 0, 8, 1, [-2], 1),
                                          ("flag", 6, 8, 1, [], 0)]
    assert lib.sym_names("my-kernel.v2") == ["n", "m"]
    assert lib.params("main") == [("A", 2, 32, 1, [4], 0), ("B", 2, 32, 1, [4], 1)]
    assert lib.sym_names("main") == []
    # sanitized, de-duplicated symbols
    assert hasattr(lib.lib, "kiln_fn_my_kernel_v2") and hasattr(lib.lib, "kiln_fn_my_kernel_v2_2")


def test_scalar_parameter_is_a_0d_tensor(build):
    n = 10
    A, B = buf("A", (n,)), buf("B", (n,))
    alpha = Var("alpha", "float32")
    k = Var("k", "int32")
    i = Var("i")
    body = realize("B", [("S", n, i)], lambda vi: store(B, A[vi] * alpha + k.astype("float32"), vi))
    lib = build(prim_func([A, alpha, k, B], nest([(i, n, "vectorized")], body)))
    assert [p[4] for p in lib.params("main")] == [[10], [], [], [10]]
    a = np.arange(n, dtype="float32")
    b = np.zeros(n, "float32")
    assert lib.call("main", a, np.array(2.5, "float32"), np.array(-3, "int32"), b) == 0
    np.testing.assert_allclose(b, a * 2.5 - 3)


# ---- kiln.build through the runtime ---------------------------------------------------------------

def test_kiln_build_runs_through_runtime(options):
    runtime = pytest.importorskip("kiln.runtime")
    from kiln.driver import build
    rt = build(add_one(8), "llvm", options)
    a = runtime.nd.array(np.arange(8, dtype="float32"))
    b = runtime.nd.empty((8,), "float32")
    rt(a, b)
    np.testing.assert_array_equal(b.numpy(), np.arange(8, dtype="float32") + 1)


def test_kiln_build_parallel_symbolic_with_thread_pool(options):
    runtime = pytest.importorskip("kiln.runtime")
    from kiln.driver import build
    n = Var("n")
    A, B = buf("A", (n,)), buf("B", (n,))
    i0, i1 = Var("i0"), Var("i1")
    body = realize("B", [("S", n, i0 * 8 + i1)], lambda vi: store(B, A[vi] * 3.0, vi), predicate=i0 * 8 + i1 < n)
    func = prim_func([A, B], nest([(i0, (n + 7) // 8, "parallel"), (i1, 8, "vectorized")], body))
    rt = build(func, "llvm", options)
    old = runtime.get_num_threads()
    try:
        runtime.set_num_threads(2)
        for size in (0, 5, 100003):
            a = np.random.default_rng(size).random(size).astype("float32")
            b = np.zeros(size, "float32")
            rt(a, b)
            np.testing.assert_allclose(b, a * 3, rtol=1e-6)
    finally:
        runtime.set_num_threads(old)


def test_kiln_build_accepts_a_schedule(options):
    pytest.importorskip("kiln.runtime")
    import kiln
    from kiln.driver import build
    sch = kiln.Schedule(IRModule({"main": add_one(16)}))
    rt = build(sch, "llvm", options)
    a = np.arange(16, dtype="float32")
    b = np.zeros(16, "float32")
    rt(a, b)
    np.testing.assert_array_equal(b, a + 1)


# ---- errors -----------------------------------------------------------------------------------------

def test_thread_binding_is_rejected():
    n = 8
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i_0")
    body = realize("B", [("S", n, i)], lambda vi: store(B, A[vi], vi))
    func = prim_func([A, B], For(i, 0, n, "thread_binding", body, thread_binding="blockIdx.x"))
    with pytest.raises(CodegenError, match="loop 'i_0' is bound to blockIdx.x; the CPU target cannot run"):
        codegen.compile_module(func)


def test_unbound_buffer_and_variable():
    n = 4
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    i = Var("i")
    func = prim_func([A, B], nest([(i, n, "serial")], realize("B", [("S", n, i)], lambda vi: store(B, C[vi], vi))))
    with pytest.raises(CodegenError, match="buffer 'C' is used but is neither a parameter"):
        codegen.compile_module(func)
    j = Var("j")
    func = prim_func([A, B], nest([(i, n, "serial")], realize("B", [("S", n, i)], lambda vi: store(B, A[j], vi))))
    with pytest.raises(CodegenError, match="variable 'j' is used outside the scope"):
        codegen.compile_module(func)


def test_other_errors():
    with pytest.raises(CodegenError, match="no tensor programs"):
        codegen.compile_module(IRModule({}))
    with pytest.raises(CodegenError, match="cannot compile a str"):
        codegen.compile_module("main")
    n = 4
    A, B = buf("A", (n,), "int32"), buf("B", (n,), "int32")
    with pytest.raises(CodegenError, match="'/' on int32"):
        codegen.compile_module(elementwise(n, [A], B, lambda a: Div(a, a), "serial"))
    # A shape seen only whole (n * 2, n bound nowhere else) is one symbolic dimension of its
    # own (codegen/opaque_dims.py), not an error.
    P = buf("P", (Var("n") * 2,))
    cm = codegen.compile_module(prim_func([P], nest([(Var("i"), 1, "serial")],
                                                   realize("x", [], lambda: store(P, 1.0, 0)))))
    (info,) = cm.kernels
    assert info.sym_names == ["n * 2"] and info.params[0].shape == [-1] and info.derived == []