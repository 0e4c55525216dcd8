"""The C++ binding (bindings/cpp/kiln.hpp) on the exported MLP: the example (examples/cpp) and a
test program (bindings/cpp/test/binding_test.cpp) built with g++ -std=c++17 against the C
runtime, compared with the Python VM and numpy; every runtime error surfaces as kiln::Error with
its code and message; moved-from handles are safe; one build under ASan + UBSan runs clean.
All but the header-only check are marked slow (three C++ builds, ~20 s)."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CPP = ROOT / "bindings" / "cpp"
EXAMPLE = ROOT / "examples" / "cpp" / "main.cpp"
TEST_PROGRAM = CPP / "test" / "binding_test.cpp"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

CXXFLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer"]

# Status codes (kiln_runtime.h).
INVALID_ARGUMENT, SHAPE_MISMATCH, DTYPE_MISMATCH = 0x10, 0x11, 0x12
INVALID_STATE, NOT_FOUND, IO, INVALID_FORMAT = 0x15, 0x20, 0x30, 0x31
RUNTIME = 0x02


def _compile_all(runtime_build, out, jobs):
    """Compiles {name: (source, extra flags, static runtime)} in parallel; returns name -> exe."""
    procs = {}
    for name, (source, extra, static_lib) in jobs.items():
        cmd = ["g++", *CXXFLAGS, *extra, f"-I{runtime_build.include_dir}", f"-I{CPP}",
               str(source), str(static_lib), "-o", str(out / name), *runtime_build.libs]
        procs[name] = (cmd, subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True))
    for name, (cmd, proc) in procs.items():
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, " ".join(cmd) + "\n" + err
    return {name: out / name for name in jobs}


@pytest.fixture(scope="module")
def binaries(runtime_build, tmp_path_factory):
    """The example, the test program, and the test program under ASan + UBSan (-O0: quicker to
    build, and the sanitizers check just the same)."""
    lib, asan_lib = runtime_build.static_lib, runtime_build.asan_static_lib
    return _compile_all(runtime_build, tmp_path_factory.mktemp("cpp"), {
        "example": (EXAMPLE, ["-O1"], lib),
        "binding_test": (TEST_PROGRAM, ["-O1"], lib),
        "binding_test_asan": (TEST_PROGRAM, ["-O0", "-g", *SANITIZE], asan_lib),
    })


def _generated_inputs():
    """examples/cpp/main.cpp's deterministic inputs, reproduced in numpy."""
    shapes = [(1, 784), (256, 784), (256,), (10, 256), (10,)]
    arrays = []
    for k, shape in enumerate(shapes):
        i = np.arange(int(np.prod(shape)), dtype=np.int64)
        base = (((i * 7919 + k * 104729) % 1000) / 1000.0 - 0.5).astype(np.float32)
        arrays.append((base * np.float32(1.0 if k == 0 else 0.1)).reshape(shape))
    return arrays


def _mlp_numpy(x, w1, b1, w2, b2):
    return np.maximum(x @ w1.T + b1, 0) @ w2.T + b2


@pytest.fixture(scope="module")
def bad_files(mlp_artifact, tmp_path_factory):
    """A copy of mlp.so with a corrupted executable blob, one truncated, and a missing path."""
    out = tmp_path_factory.mktemp("cpp_bad")
    data = mlp_artifact.so_path.read_bytes()
    blob = data.find(b"KILNEXE\0")
    assert blob >= 0
    corrupt = bytearray(data)
    corrupt[blob + 32:blob + 40] = (0xFFFF_FFF0).to_bytes(8, "little")  # section_table_offset
    (out / "corrupt.so").write_bytes(bytes(corrupt))
    (out / "truncated.so").write_bytes(data[:len(data) // 2])
    return out / "corrupt.so", out / "truncated.so", out / "no_such_model.so"


def _run_test_program(exe, mlp_artifact, bad_files, env=None):
    args = [str(exe), str(mlp_artifact.so_path), *map(str, bad_files),
            *map(str, mlp_artifact.arg_paths)]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    lines = run.stdout.splitlines()
    assert lines and lines[-1] == "DONE", run.stdout + run.stderr[-4000:]
    fails = [line for line in lines if line.startswith("FAIL")]
    assert run.returncode == 0 and not fails, "\n".join(fails) + run.stderr[-4000:]
    outs = np.array([float(line.split()[1]) for line in lines if line.startswith("OUT ")])
    errors = {}
    for line in lines:
        if line.startswith("ERR "):
            _, name, code, message = line.split(" ", 3)
            errors[name] = (int(code, 16), message)
    oks = {line.split()[1] for line in lines if line.startswith("OK ")}
    return outs, errors, oks, run


@pytest.fixture(scope="module")
def program(binaries, mlp_artifact, bad_files):
    """The test program's (outputs, errors by case, passed checks, process), run once."""
    return _run_test_program(binaries["binding_test"], mlp_artifact, bad_files)


@pytest.mark.slow
def test_example_generated_inputs_match_numpy(binaries, mlp_artifact):
    exe = binaries["example"]
    run = subprocess.run([str(exe), str(mlp_artifact.so_path)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "output (1, 10) float32"
    got = np.array([float(v) for v in lines[1:]], dtype=np.float32)
    np.testing.assert_allclose(got, _mlp_numpy(*_generated_inputs())[0], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_example_file_inputs_match_python_vm(binaries, mlp_artifact):
    exe = binaries["example"]
    run = subprocess.run([str(exe), str(mlp_artifact.so_path), *map(str, mlp_artifact.arg_paths)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = np.array([float(v) for v in run.stdout.splitlines()[1:]], dtype=np.float32)
    # The Python VM ran the same kernels: equal up to float rounding.
    np.testing.assert_allclose(got, mlp_artifact.expected().ravel(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_example_reports_errors(binaries, mlp_artifact, tmp_path):
    exe = binaries["example"]
    run = subprocess.run([str(exe), str(tmp_path / "missing.so")], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.startswith("kiln error 48 (") and "missing.so" in run.stderr, run.stderr


@pytest.mark.slow
def test_api_block_output_matches_python_vm_and_numpy(program, mlp_artifact):
    outs, _, oks, _ = program
    np.testing.assert_allclose(outs.astype(np.float32), mlp_artifact.expected().ravel(),
                               rtol=1e-5, atol=1e-6)
    x = np.load(mlp_artifact.input_npy)
    params = [np.load(p) for p in mlp_artifact.param_npys]
    np.testing.assert_allclose(outs, _mlp_numpy(x, *params)[0], rtol=1e-4, atol=1e-5)
    assert {"module_kind", "function_names", "output_metadata", "call_again", "value_kind",
            "value_to_ndarray_shares", "ndarray_copy_shares", "ndarray_shared_lifetime",
            "ndarray_empty_extent", "ndarray_int64", "dltensor_access", "ndarray_copy_from",
            "profile_tuple", "function_keeps_module_alive", "dlpack_roundtrip", "ndarray_wrap"} <= oks


@pytest.mark.slow
def test_cpp_functions_registry_and_tuples(program):
    """Functions implemented in C++ (Function::FromCallable), the external-function registry,
    tuples built in C++; exceptions thrown in a callback reach the caller as kiln::Error."""
    _, errors, oks, _ = program
    assert {"callback_values", "registered_callback", "tuple_roundtrip", "tuple_nested"} <= oks
    assert errors["unregistered"][0] == NOT_FOUND and "'cpp.relu'" in errors["unregistered"][1]
    assert errors["callback_kiln_error"] == (SHAPE_MISMATCH, "f: custom shape complaint")
    assert errors["callback_std_exception"][0] == RUNTIME


@pytest.mark.slow
def test_runtime_errors_are_kiln_errors(program, bad_files):
    _, errors, _, _ = program
    _, truncated, missing = bad_files
    assert errors["wrong_shape"] == (
        SHAPE_MISMATCH, "forward: argument 0 'x' expected shape (1, 784), got (1, 785)")
    assert errors["wrong_dtype"] == (
        DTYPE_MISMATCH, "forward: argument 0 'x' expected dtype float32, got int32")
    assert errors["wrong_count"] == (INVALID_ARGUMENT, "forward: expected 5 arguments, got 1")
    assert errors["wrong_kind"] == (
        INVALID_ARGUMENT, "forward: argument 0 'x' expected a tensor, got int")
    code, message = errors["unknown_function"]
    assert code == NOT_FOUND and "'backward'" in message and "forward" in message
    code, message = errors["before_init"]
    assert code == INVALID_STATE and message.startswith("forward:") and "init" in message
    code, message = errors["missing_file"]
    assert code == IO and str(missing) in message
    code, message = errors["corrupt_file"]
    assert code == INVALID_FORMAT and message.startswith("executable:"), message
    code, message = errors["truncated_file"]
    assert code == INVALID_FORMAT and str(truncated) in message
    assert errors["negative_extent"][0] == INVALID_ARGUMENT
    # Errors raised by the binding itself use the same exception and codes.
    assert errors["value_wrong_kind"] == (INVALID_ARGUMENT,
                                          "kiln::Value: expected a tensor, got null")
    assert errors["data_wrong_type"][0] == DTYPE_MISMATCH
    assert errors["from_vector_size"][0] == SHAPE_MISMATCH
    assert errors["unknown_dtype"] == (INVALID_ARGUMENT, "kiln::DataType: unknown dtype 'float7x'")


@pytest.mark.slow
def test_runtime_errors_match_python_binding(program, mlp_artifact):
    """kiln::Error carries the same code and message as the Python binding's KilnError."""
    import kiln
    _, errors, _, _ = program
    vm = kiln.VirtualMachine(kiln.load_module(str(mlp_artifact.so_path)), kiln.cpu())
    x = kiln.nd.array(np.load(mlp_artifact.input_npy))
    params = [kiln.nd.array(np.load(p)) for p in mlp_artifact.param_npys]
    cases = {"wrong_shape": (kiln.nd.empty((1, 785), "float32"), *params),
             "wrong_dtype": (kiln.nd.empty((1, 784), "int32"), *params),
             "wrong_count": (x,)}
    for name, args in cases.items():
        with pytest.raises(kiln.KilnError) as info:
            vm["forward"](*args)
        assert errors[name] == (info.value.status, str(info.value)), name


@pytest.mark.slow
def test_moved_from_handles_are_safe(program):
    _, errors, oks, _ = program
    assert {"module_move", "module_move_back", "function_move", "value_move"} <= oks
    for name in ["moved_module", "moved_function", "moved_ndarray_arg", "moved_ndarray_shape"]:
        code, message = errors[name]
        assert code == INVALID_STATE and "empty" in message, (name, message)
    assert errors["moved_value"][0] == INVALID_ARGUMENT


@pytest.mark.slow
def test_under_address_and_undefined_sanitizers(binaries, mlp_artifact, bad_files):
    exe = binaries["binding_test_asan"]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1")
    outs, errors, _, run = _run_test_program(exe, mlp_artifact, bad_files, env=env)
    np.testing.assert_allclose(outs.astype(np.float32), mlp_artifact.expected().ravel(),
                               rtol=1e-5, atol=1e-6)
    assert "corrupt_file" in errors and "moved_value" in errors
    reports = [line for line in run.stderr.splitlines() if "Sanitizer" in line]
    assert reports == [] and "runtime error" not in run.stderr, run.stderr[-4000:]


def test_header_compiles_standalone_with_strict_flags(runtime_build, tmp_path):
    """kiln.hpp includes what it uses and is warning-free in a translation unit of its own."""
    src = tmp_path / "only_header.cpp"
    src.write_text('#include "kiln.hpp"\n'
                   'int main() { return kiln::GetNumThreads() > 0 ? 0 : 1; }\n')
    flags = ["-Wshadow", "-Wconversion"]
    exe = _compile_all(runtime_build, tmp_path, {
        "only_header": (src, flags, runtime_build.static_lib)})["only_header"]
    assert subprocess.run([str(exe)], timeout=30).returncode == 0


def test_string_tensors_through_the_binding(runtime_make, tmp_path):
    """bindings/cpp/test/strings_test.cpp (under ASan + UBSan): NDArray::FromStrings / ToStrings around a compiled
    model with string operators (tests/onnx/string_models.py), its outputs checked, over the
    shared runtime and libkiln_strings.so (one runtime copy: the library finds the runtime next
    to itself); wrong counts and typed access to a string tensor refused."""
    import importlib.util
    import kiln
    from kiln.frontend.onnx import from_onnx
    spec = importlib.util.spec_from_file_location("string_models", ROOT / "tests" / "onnx" / "string_models.py")
    string_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(string_models)
    mod = from_onnx(string_models.equal_and_concat_model())[0]
    kiln.compile(kiln.get_pipeline("default")(mod), "llvm").export_library(tmp_path / "model.so")
    runtime_make("all", copy={"libkiln_runtime.so": tmp_path / "libkiln_runtime.so",
                              "libkiln_strings.so": tmp_path / "libkiln_strings.so"})
    exe = tmp_path / "strings_test"
    # Under ASan + UBSan: the header's block building and reading is what is new here.
    subprocess.run(["g++", *CXXFLAGS, "-O1", "-g", *SANITIZE, f"-I{ROOT / 'runtime_c' / 'include'}", f"-I{CPP}",
                    str(CPP / "test" / "strings_test.cpp"), f"-L{tmp_path}", "-lkiln_strings",
                    "-lkiln_runtime", f"-Wl,-rpath,{tmp_path}", "-o", str(exe)], check=True)
    run = subprocess.run([str(exe), str(tmp_path / "model.so")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ALL OK", run.stdout + run.stderr
