"""The ``kiln`` command line (compiler/kiln/cli.py), run as a subprocess the way a user runs it:
the ``kiln`` entry point next to the interpreter when installed, else ``python -m kiln.cli``."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ENTRY = os.path.join(os.path.dirname(sys.executable), "kiln")


def kiln_cli(*args, entry_point=False, cwd=None):
    cmd = [ENTRY] if entry_point else [sys.executable, "-m", "kiln.cli"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def small_cnn(path, batch="N", op="Relu"):
    """Conv(3->8, 3x3) -> ``op`` -> GlobalAveragePool -> Flatten -> Gemm(8->4): input ``x`` of
    shape (batch, 3, 8, 8), ``batch`` symbolic when a string."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype("float32"), "b")
    fw = numpy_helper.from_array(rng.standard_normal((4, 8)).astype("float32"), "fw")
    fb = numpy_helper.from_array(rng.standard_normal(4).astype("float32"), "fb")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node(op, ["c"], ["r"], name="act"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
                              initializer=[w, b, fw, fb])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(model.onnx, model.so, the compile process) for the small CNN with batch pinned to 2."""
    d = tmp_path_factory.mktemp("cli")
    model = small_cnn(d / "model.onnx")
    lib = d / "model.so"
    proc = kiln_cli("compile", model, "-o", lib, "--shape", "x=2,3,8,8")
    assert proc.returncode == 0, proc.stderr
    return model, lib, proc


def test_compile_writes_library_and_reports_progress(compiled):
    _, lib, proc = compiled
    assert lib.is_file()
    assert "wrote" in proc.stdout and "kernels" in proc.stdout
    for step in ("importing", "running pipeline 'default'", "compiling"):
        assert f"kiln: {step}" in proc.stderr
    assert "done (" in proc.stderr


def test_inspect_lists_functions_inputs_kernels_arena_target_constants(compiled):
    _, lib, _ = compiled
    proc = kiln_cli("inspect", lib, entry_point=os.path.exists(ENTRY))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "target:    llvm" in out
    assert "main:" in out
    assert "input 0: x  float32(2, 3, 8, 8)" in out
    assert "kernels:" in out and "arena:" in out
    assert "constants:" in out and "constants: 0 " not in out   # the bound weights


def test_inspect_disassemble(compiled):
    proc = kiln_cli("inspect", compiled[1], "--disassemble")
    assert proc.returncode == 0, proc.stderr
    assert "CALL" in proc.stdout.upper()


def test_run_matches_onnxruntime(compiled, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model, lib, _ = compiled
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    proc = kiln_cli("run", lib, "--input", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "y.npy")
    assert proc.returncode == 0, proc.stderr
    assert "output 0: float32(2, 4)" in proc.stdout
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-4)


def test_run_random_and_bench(compiled):
    lib = compiled[1]
    proc = kiln_cli("run", lib, "--random")
    assert proc.returncode == 0, proc.stderr
    proc = kiln_cli("bench", lib, "--repeat", "3", "--threads", "1", "--profile")
    assert proc.returncode == 0, proc.stderr
    assert "main: best" in proc.stdout and "1 thread(s)" in proc.stdout
    assert "profile of 'main'" in proc.stdout


def test_run_errors_name_the_input(compiled, tmp_path):
    lib = compiled[1]
    proc = kiln_cli("run", lib)
    assert proc.returncode == 1
    assert "input 'x' (float32(2, 3, 8, 8)) is not given" in proc.stderr
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 8, 8), "float32"))
    proc = kiln_cli("run", lib, "--input", f"x={tmp_path / 'bad.npy'}")
    assert proc.returncode == 1
    assert "expected shape (2, 3, 8, 8), got (1, 3, 8, 8)" in proc.stderr
    proc = kiln_cli("run", lib, "--input", f"y={tmp_path / 'bad.npy'}")
    assert proc.returncode == 1 and "no input(s) ['y']" in proc.stderr


def test_symbolic_batch_compiles_and_runs_with_shape(tmp_path):
    lib = tmp_path / "sym.so"
    proc = kiln_cli("compile", small_cnn(tmp_path / "sym.onnx"), "-o", lib, "-q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "input 0: x  float32(N, 3, 8, 8)" in kiln_cli("inspect", lib).stdout
    proc = kiln_cli("run", lib, "--random")
    assert proc.returncode == 1 and "pin it with --shape x=" in proc.stderr
    proc = kiln_cli("run", lib, "--random", "--shape", "x=3,3,8,8")
    assert proc.returncode == 0 and "output 0: float32(3, 4)" in proc.stdout, proc.stderr


def test_compile_errors(tmp_path):
    proc = kiln_cli("compile", tmp_path / "missing.onnx")
    assert proc.returncode == 1 and "missing.onnx: no such file" in proc.stderr
    (tmp_path / "junk.onnx").write_bytes(b"\xff not a model")
    proc = kiln_cli("compile", tmp_path / "junk.onnx", "-o", tmp_path / "junk.so")
    assert proc.returncode == 1 and "error:" in proc.stderr
    proc = kiln_cli("compile", small_cnn(tmp_path / "m.onnx"), "--shape", "x=2,a")
    assert proc.returncode == 2 and "must be integers" in proc.stderr
    proc = kiln_cli("compile", small_cnn(tmp_path / "m.onnx"), "--pipeline", "nope", "-o", tmp_path / "m.so")
    assert proc.returncode == 1 and "unknown pipeline 'nope'" in proc.stderr
    proc = kiln_cli("compile", small_cnn(tmp_path / "m.onnx"), "--target", "foo", "-o", tmp_path / "m.so")
    assert proc.returncode == 1 and "unknown target 'foo'" in proc.stderr


def test_compile_names_unsupported_operator(tmp_path):
    model = small_cnn(tmp_path / "odd.onnx", op="NoSuchOp")
    proc = kiln_cli("compile", model, "-o", tmp_path / "odd.so", "--shape", "x=1,3,8,8")
    assert proc.returncode == 1
    assert "operator NoSuchOp is not supported" in proc.stderr and "'act'" in proc.stderr


def test_inspect_rejects_non_library(tmp_path):
    (tmp_path / "not.so").write_text("hello")
    proc = kiln_cli("inspect", tmp_path / "not.so")
    assert proc.returncode == 1 and "error:" in proc.stderr
    proc = kiln_cli("inspect", tmp_path / "absent.so")
    assert proc.returncode == 1 and "absent.so: no such file" in proc.stderr


def test_usage_errors():
    proc = kiln_cli()
    assert proc.returncode == 2 and "COMMAND" in proc.stderr
    proc = kiln_cli("--help")
    assert proc.returncode == 0 and "compile" in proc.stdout and "inspect" in proc.stdout


def _if_model(path):
    """y = If(flag, Relu(x), Neg(x)) for x of shape (2, 4)."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"])], "then", [],
                               [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "else", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4])])
    graph = helper.make_graph([helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
                              "if", [helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
                                     helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def test_if_model_compiles_with_private_branches_or_a_const_input(tmp_path):
    model = _if_model(tmp_path / "if.onnx")
    assert kiln_cli("compile", model, "-o", tmp_path / "if.so", "-q").returncode == 0
    proc = kiln_cli("inspect", tmp_path / "if.so")
    assert proc.returncode == 0, proc.stderr
    assert "main_if0_then (private: a branch of an IF)" in proc.stdout
    assert "input 0: flag  bool()" in proc.stdout
    x = np.arange(-4, 4, dtype="float32").reshape(2, 4)
    np.save(tmp_path / "x.npy", x)
    for flag, want in ((True, np.maximum(x, 0)), (False, -x)):
        np.save(tmp_path / "flag.npy", np.array(flag))
        proc = kiln_cli("run", tmp_path / "if.so", "--input", f"flag={tmp_path / 'flag.npy'}",
                        "--input", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "y.npy")
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)
    proc = kiln_cli("compile", model, "-o", tmp_path / "neg.so", "-q", "--const-input", "flag=0")
    assert proc.returncode == 0, proc.stderr
    proc = kiln_cli("inspect", tmp_path / "neg.so")
    assert "functions: 1" in proc.stdout and "flag" not in proc.stdout
    proc = kiln_cli("compile", model, "--const-input", "flag")
    assert proc.returncode == 2 and "expected NAME=VALUE" in proc.stderr


def test_compile_schedules_for_the_given_target(tmp_path):
    """``--target`` reaches the pipeline too: an AVX2 target (which every CPU here runs) gets
    AVX2 tiles and the library runs and matches the host build."""
    model = small_cnn(tmp_path / "m.onnx")
    for name, target in (("avx2", "llvm -mcpu=haswell"), ("host", "llvm")):
        proc = kiln_cli("compile", model, "--shape", "x=2,3,8,8", "--target", target,
                        "-o", tmp_path / f"{name}.so")
        assert proc.returncode == 0, proc.stderr
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    outs = []
    for name in ("avx2", "host"):
        proc = kiln_cli("run", tmp_path / f"{name}.so", "--input", f"x={tmp_path / 'x.npy'}",
                        "--output", tmp_path / f"{name}.npy")
        assert proc.returncode == 0, proc.stderr
        outs.append(np.load(tmp_path / f"{name}.npy"))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_cache_shows_trims_and_clears(tmp_path):
    """`kiln cache` reports the build cache against its limit, trims it least recently used
    first, clears it, keeps files used in the last minute and what builds did not write."""
    cache = tmp_path / "cache"
    (cache / "objects").mkdir(parents=True)
    old = [cache / "kiln_a.so", cache / "objects" / "b.o", cache / "objects" / "c.lowered"]
    for i, p in enumerate(old):
        p.write_bytes(b"\0" * (300 << 10))
        os.utime(p, (1000 + i, 1000 + i))
    recent = cache / "objects" / "d.o"
    recent.write_bytes(b"\0" * (100 << 10))
    (cache / "notes.txt").write_text("not Kiln's")
    proc = kiln_cli("cache", "--dir", str(cache))
    assert proc.returncode == 0, proc.stderr
    from kiln.codegen.cache_limit import default_cache_limit    # 512M under `make test`
    limit = default_cache_limit() / (1 << 20)
    assert proc.stdout.strip() == f"{cache}: 4 files, 1.0 MB (limit {limit:.1f} MB)"
    proc = kiln_cli("cache", "--dir", str(cache), "--trim", "800K")      # 1000K -> 640K
    assert "removed 2 files, 0.6 MB" in proc.stdout and not old[0].exists() and not old[1].exists()
    assert old[2].exists() and recent.exists()
    proc = kiln_cli("cache", "--dir", str(cache), "--clear")
    assert "removed 1 files" in proc.stdout and not old[2].exists()
    assert recent.exists() and (cache / "notes.txt").exists()         # in use; not a build's
    proc = kiln_cli("cache", "--trim", "lots")
    assert proc.returncode == 1 and "not a size: 'lots'" in proc.stderr
    proc = kiln_cli("cache", "--dir", str(cache), "--trim", "0")
    assert proc.returncode == 1 and "--trim needs a size above 0" in proc.stderr
