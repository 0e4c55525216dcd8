"""Typed bindings per model (kiln.bindgen): examples/bindings (an MLP, weights bound) run from C
(shared library and static archive), C++ (both) and Java (only the platform jar), against the
Python VM's output; a model with tuple results (the prefill/decode LM) from C and Java; the CLI
`kiln export-bindings`; symbolic shapes refused with a clear message."""
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.bindgen import BindgenError, signatures, write_bindings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bindings"
PROGRAMS = pathlib.Path(__file__).resolve().parent / "programs"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("g++") is None,
                               reason="needs gcc and g++")


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    """What examples/bindings/export_typed.py writes, run as the README says."""
    out = tmp_path_factory.mktemp("typed")
    subprocess.run([sys.executable, str(EXAMPLE / "export_typed.py"), str(out)], check=True,
                   capture_output=True, timeout=600)
    return out, np.fromfile(out / "expected.bin", dtype="<f4")


def _build(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, " ".join(map(str, cmd)) + "\n" + proc.stderr


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@needs_gcc
@pytest.mark.parametrize("static", [False, True], ids=["shared", "static"])
def test_c(typed, runtime_build, tmp_path, static):
    out, expected = typed
    exe = tmp_path / "main_c"
    _build(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", *(["-DKILN_STATIC"] if static else []),
            f"-I{runtime_build.include_dir}", f"-I{out}", str(EXAMPLE / "main.c"),
            *([str(out / "mlp.a")] if static else []), str(runtime_build.static_lib), "-o", str(exe),
            *runtime_build.libs])
    lines = _run([str(exe), str(out)]).split("\n")
    # the constant is the executable's planned arena
    arena = signatures(kiln.executable.load_spec(str(out / "mlp.so")))[0].arena_bytes
    assert lines[0] == f"arena {arena} bytes"
    np.testing.assert_allclose(np.array(lines[1:11], dtype=np.float32), expected, rtol=1e-5, atol=1e-6)


@needs_gcc
@pytest.mark.parametrize("static", [False, True], ids=["shared", "static"])
def test_cpp(typed, runtime_build, tmp_path, static):
    out, expected = typed
    exe = tmp_path / "main_cpp"
    _build(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1",
            *(["-DKILN_STATIC"] if static else []), f"-I{runtime_build.include_dir}",
            f"-I{ROOT / 'bindings' / 'cpp'}", f"-I{out}", str(EXAMPLE / "main.cpp"),
            *([str(out / "mlp.a")] if static else []), str(runtime_build.static_lib), "-o", str(exe),
            *runtime_build.libs])
    got = np.array([line.split() for line in _run([str(exe), str(out)]).split("\n") if line], dtype=np.float32)
    np.testing.assert_allclose(got[:, 0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[:, 1], got[:, 0])     # both Forward overloads agree


def test_java_with_only_the_platform_jar(typed, java_build, tmp_path):
    out, expected = typed
    _build([str(java_build["javac"]), "--release", "11", "-Xlint:all", "-Werror", "-cp", str(java_build["jar"]),
            "-d", str(tmp_path), str(out / "MlpModel.java"), str(EXAMPLE / "Main.java")])
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    text = _run([str(java_build["java"]), "-Xcheck:jni", "-cp", f"{java_build['platform_jar']}:{tmp_path}",
                 "Main", str(out)], env=env)
    got = np.array([line.split() for line in text.split("\n") if line], dtype=np.float32)
    np.testing.assert_allclose(got[:, 0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[:, 1], got[:, 0])     # the direct-buffer variant agrees


def test_cli_writes_bindings_for_a_shipped_library(typed, tmp_path):
    out, _ = typed
    proc = subprocess.run([sys.executable, "-m", "kiln.cli", "export-bindings", str(out / "mlp.so"),
                           "--lang", "c,cpp,java", "-o", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["MlpModel.java", "mlp.hpp", "mlp_bindings.h"]
    assert (tmp_path / "MlpModel.java").read_text() == (out / "MlpModel.java").read_text()
    header = (tmp_path / "mlp_bindings.h").read_text()
    assert ("kiln_status_t kiln_model_mlp_forward(kiln_model_mlp_t* m, const float x[1][784], "
            "float out[1][10])") in header
    assert "#define KILN_MODEL_MLP_FORWARD_X_DIM1 784" in header
    assert "open_static" not in header and "open_static" in (out / "mlp_bindings.h").read_text()
    assert "float[] forward(float[] x)" in (out / "MlpModel.java").read_text()


@needs_gcc
def test_tuple_results_from_c_and_java(runtime_build, java_build, tmp_path):
    from test_section_c_calls import LM, _reference
    rng = np.random.default_rng(5)
    a = {"inputs": rng.standard_normal((1, 4, 16), dtype=np.float32),
         "weight": rng.standard_normal((16, 16), dtype=np.float32) * 0.5,
         "kv_cache": rng.standard_normal((1, 4, 16), dtype=np.float32),
         "token": rng.standard_normal((1, 1, 16), dtype=np.float32)}
    for name, v in a.items():
        v.tofile(tmp_path / f"{name}.bin")
    ex = kiln.compile(kiln.get_pipeline("default")(LM), target="llvm")
    ex.export_library(str(tmp_path / "lm.so"))
    write_bindings(ex.spec, tmp_path, "lm")
    expected = _reference(**a)

    def check(text):
        got = {name: np.array(v, dtype=np.float32) for name, *v in (line.split() for line in text.strip().split("\n"))}
        assert sorted(got) == sorted(expected)
        for name, e in expected.items():
            np.testing.assert_allclose(got[name], e.ravel(), rtol=1e-4, atol=1e-5, err_msg=name)

    exe = tmp_path / "lm_typed"
    _build(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{runtime_build.include_dir}",
            f"-I{tmp_path}", str(PROGRAMS / "lm_typed.c"), str(runtime_build.static_lib), "-o", str(exe),
            *runtime_build.libs])
    check(_run([str(exe), str(tmp_path / "lm.so"), str(tmp_path)]))

    classes = tmp_path / "classes"
    _build([str(java_build["javac"]), "--release", "11", "-Xlint:all", "-Werror", "-cp", str(java_build["jar"]),
            "-d", str(classes), str(tmp_path / "LmModel.java"), str(PROGRAMS / "LmTyped.java")])
    check(_run([str(java_build["java"]), "-cp", f"{java_build['platform_jar']}:{classes}", "LmTyped",
                str(tmp_path / "lm.so"), str(tmp_path)]))


def test_symbolic_shapes_are_refused_with_the_function_and_input(tmp_path):
    from kiln import nn
    mod, _ = nn.Sequential(nn.Linear(8, 4)).export(spec={"forward": {"x": nn.spec.Tensor(("n", 8), "float32")}})
    ex = kiln.compile(kiln.get_pipeline("default")(mod), target="llvm")
    with pytest.raises(BindgenError, match=r"function 'forward': input 'x' has symbolic dimensions \['n', 8\]"):
        write_bindings(ex.spec, tmp_path, "dyn")
    ex.export_library(str(tmp_path / "dyn.so"))
    proc = subprocess.run([sys.executable, "-m", "kiln.cli", "export-bindings", str(tmp_path / "dyn.so")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "symbolic dimensions" in proc.stderr
    with pytest.raises(BindgenError, match="unknown binding language"):
        write_bindings(ex.spec, tmp_path, "dyn", langs=["rust"])
