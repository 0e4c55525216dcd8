"""Deploying from C: examples/c/run_model.c (model loaded from mlp.so) and examples/c/static_app.c
(model and runtime linked into one program), built with cc against the runtime (shared, static,
and ASan+UBSan), run, and compared with the Python VM."""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
from typing import Dict, List

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "c"
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
LIBS = ["-Wl,--as-needed", "-lm", "-lpthread", "-ldl"]
ASAN = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined"]
ASAN_ENV = {"ASAN_OPTIONS": "abort_on_error=0:exitcode=99", "UBSAN_OPTIONS": "print_stacktrace=1"}

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


@dataclasses.dataclass(frozen=True)
class Programs:
    run_model: pathlib.Path          # runtime as a shared library
    run_model_static: pathlib.Path   # runtime linked in
    static_app: pathlib.Path         # model and runtime linked in
    asan_run_model: pathlib.Path
    asan_static_app: pathlib.Path


@pytest.fixture(scope="session")
def programs(tmp_path_factory, mlp_artifact, runtime_build) -> Programs:
    out = tmp_path_factory.mktemp("c_programs")
    rb, inc = runtime_build, f"-I{runtime_build.include_dir}"
    model_inc, model_a = f"-I{mlp_artifact.static_dir}", str(mlp_artifact.static_dir / "mlp.a")
    run_model, static_app = str(EXAMPLES / "run_model.c"), str(EXAMPLES / "static_app.c")
    p = Programs(*(out / n for n in ["run_model", "run_model_static", "static_app",
                                      "asan_run_model", "asan_static_app"]))
    cmds = [
        [*CFLAGS, "-O2", inc, run_model, "-o", p.run_model, f"-L{rb.shared_lib.parent}",
         "-lkiln_runtime", f"-Wl,-rpath,{rb.shared_lib.parent}"],
        [*CFLAGS, "-O2", inc, run_model, str(rb.static_lib), "-o", p.run_model_static],
        [*CFLAGS, "-O2", inc, model_inc, static_app, model_a, str(rb.static_lib), "-o", p.static_app],
        [*CFLAGS, *ASAN, inc, run_model, str(rb.asan_static_lib), "-o", p.asan_run_model],
        [*CFLAGS, *ASAN, inc, model_inc, static_app, model_a, str(rb.asan_static_lib), "-o",
         p.asan_static_app],
    ]
    procs = [subprocess.Popen(["cc", *map(str, c), *LIBS], stderr=subprocess.PIPE, text=True)
             for c in cmds]
    for proc, cmd in zip(procs, cmds):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"cc {' '.join(map(str, cmd))}\n{err}"
    return p


def shape_args(artifact) -> List[str]:
    return [f"{path}:{'x'.join(map(str, shape))}" for path, shape in
            zip(artifact.arg_paths, artifact.arg_shapes)]


def run(exe, *args, cwd=None, env=None):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env={**os.environ, **(env or {})})


def parse_outputs(stdout: str) -> Dict[int, np.ndarray]:
    """run_model's output format: "output K: float32 (D0, D1)" then a line of values."""
    lines, result = stdout.splitlines(), {}
    for i, line in enumerate(lines):
        m = re.fullmatch(r"output (\d+): float32 \(([\d, ]*)\)", line)
        if m:
            shape = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
            values = np.array([float(v) for v in lines[i + 1].split()], dtype=np.float32)
            result[int(m.group(1))] = values.reshape(shape)
    return result


def assert_clean(proc, rc=0):
    """Exit status `rc` and no sanitizer report."""
    assert "AddressSanitizer" not in proc.stderr and "runtime error:" not in proc.stderr, proc.stderr
    assert "LeakSanitizer" not in proc.stderr, proc.stderr
    assert proc.returncode == rc, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def static_app_data(shapes) -> List[np.ndarray]:
    """The built-in data of static_app.c (see its header comment)."""
    out = []
    for k, shape in enumerate(shapes):
        i = np.arange(int(np.prod(shape)), dtype=np.int64)
        v = (i % 13) / 16.0 if k == 0 else ((i * (7 + 2 * k) + k) % 17 - 8) / 128.0
        out.append(v.astype(np.float32).reshape(shape))
    return out


# ---- run_model ------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["run_model", "run_model_static", "asan_run_model"])
def test_run_model_matches_python(programs, mlp_artifact, variant):
    proc = run(getattr(programs, variant), mlp_artifact.so_path, *shape_args(mlp_artifact),
               env=ASAN_ENV)
    assert_clean(proc)
    outputs = parse_outputs(proc.stdout)
    assert list(outputs) == [0]
    np.testing.assert_allclose(outputs[0], mlp_artifact.expected(), rtol=1e-6, atol=1e-7)


def test_run_model_static_runtime_needs_no_libkiln(programs):
    libs = subprocess.run(["ldd", str(programs.run_model_static)], capture_output=True, text=True).stdout
    assert "kiln" not in libs


@pytest.mark.parametrize("exe", ["run_model", "asan_run_model"])
def test_file_size_does_not_match_shape(programs, mlp_artifact, exe):
    args = shape_args(mlp_artifact)
    args[0] = f"{mlp_artifact.input_path}:1x785"
    proc = run(getattr(programs, exe), mlp_artifact.so_path, *args, env=ASAN_ENV)
    assert_clean(proc, rc=1)
    assert (f"run_model: argument 0 ('{mlp_artifact.input_path}'): file has 3136 bytes, float32 "
            "shape (1, 785) needs 3140") in proc.stderr


@pytest.mark.parametrize("exe", ["run_model", "asan_run_model"])
def test_wrong_input_shape_names_the_argument(programs, mlp_artifact, exe):
    args = shape_args(mlp_artifact)
    args[0] = f"{mlp_artifact.param_paths[0]}:784x256"   # right size, wrong shape
    proc = run(getattr(programs, exe), mlp_artifact.so_path, *args, env=ASAN_ENV)
    assert_clean(proc, rc=1)
    assert ("run_model: calling 'forward': forward: argument 0 'x' expected shape (1, 784), "
            "got (784, 256) [shape mismatch]") in proc.stderr


def test_wrong_argument_count(programs, mlp_artifact):
    proc = run(programs.run_model, mlp_artifact.so_path, *shape_args(mlp_artifact)[:1])
    assert_clean(proc, rc=1)
    assert "forward: expected 5 arguments, got 1" in proc.stderr


@pytest.mark.parametrize("exe", ["run_model", "asan_run_model"])
def test_unknown_function(programs, mlp_artifact, exe):
    proc = run(getattr(programs, exe), "-f", "backward", mlp_artifact.so_path, env=ASAN_ENV)
    assert_clean(proc, rc=1)
    assert "run_model: calling 'backward':" in proc.stderr
    assert "has no function 'backward'" in proc.stderr and "forward" in proc.stderr
    assert "[not found]" in proc.stderr


@pytest.mark.parametrize("exe", ["run_model", "asan_run_model"])
@pytest.mark.parametrize("keep", [0, 64, 5000, -1000])
def test_truncated_library(programs, mlp_artifact, tmp_path, exe, keep):
    data = mlp_artifact.so_path.read_bytes()
    bad = tmp_path / "truncated.so"
    bad.write_bytes(data[:keep] if keep >= 0 else data[:len(data) + keep])
    proc = run(getattr(programs, exe), bad, *shape_args(mlp_artifact), env=ASAN_ENV)
    assert_clean(proc, rc=1)
    assert proc.stderr.startswith(f"run_model: loading '{bad}': ")
    assert proc.stderr.rstrip().endswith(("[invalid format]", "[I/O error]")), proc.stderr
    assert proc.stdout == ""


def test_missing_files(programs, mlp_artifact, tmp_path):
    proc = run(programs.run_model, tmp_path / "nope.so")
    assert_clean(proc, rc=1)
    assert f"run_model: loading '{tmp_path / 'nope.so'}'" in proc.stderr
    proc = run(programs.run_model, mlp_artifact.so_path, f"{tmp_path / 'x.bin'}:1x784")
    assert_clean(proc, rc=1)
    assert f"run_model: argument 0 ('{tmp_path / 'x.bin'}'): cannot read" in proc.stderr
    proc = run(programs.run_model, mlp_artifact.so_path, f"{mlp_artifact.input_path}:1xx784")
    assert_clean(proc, rc=1)
    assert "bad shape '1xx784'" in proc.stderr


def test_usage(programs):
    proc = run(programs.run_model)
    assert proc.returncode == 2 and "usage:" in proc.stderr


# ---- static_app -----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def static_app_expected(mlp_artifact):
    import kiln
    vm = kiln.VirtualMachine(kiln.load_module(str(mlp_artifact.so_path)), kiln.cpu())
    args = static_app_data(mlp_artifact.arg_shapes)
    return vm["forward"](*[kiln.nd.array(a) for a in args]).numpy()


@pytest.mark.parametrize("variant", ["static_app", "asan_static_app"])
def test_static_app_matches_python(programs, static_app_expected, variant):
    proc = run(getattr(programs, variant), env=ASAN_ENV)
    assert_clean(proc)
    np.testing.assert_allclose(parse_outputs(proc.stdout)[0], static_app_expected, rtol=1e-6, atol=1e-7)


def test_static_app_is_self_contained(programs, static_app_expected, tmp_path):
    ldd = subprocess.run(["ldd", str(programs.static_app)], capture_output=True, text=True)
    libs = [line.split()[0] for line in ldd.stdout.splitlines() if line.strip()]
    allowed = re.compile(r"(linux-vdso|linux-gate|/lib\d*/ld-linux|ld-linux|libc|libm|libpthread)\b")
    assert libs and all(allowed.match(os.path.basename(lib)) or allowed.match(lib) for lib in libs), libs
    alone = tmp_path / "empty"
    alone.mkdir()
    shutil.copy(programs.static_app, alone / "app")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    proc = subprocess.run(["./app"], cwd=alone, capture_output=True, text=True, timeout=60, env=env)
    assert_clean(proc)
    np.testing.assert_allclose(parse_outputs(proc.stdout)[0], static_app_expected, rtol=1e-6, atol=1e-7)
    assert os.listdir(alone) == ["app"]


def test_static_app_with_single_threaded_runtime(mlp_artifact, runtime_build, runtime_make,
                                                 static_app_expected, tmp_path):
    """The runtime built without pthreads (KILN_SINGLE_THREADED) runs the same static model."""
    single = tmp_path / "libkiln_runtime_single.a"
    runtime_make("single", copy={"single/libkiln_runtime.a": single})
    exe = tmp_path / "app"
    subprocess.run(["cc", *CFLAGS, "-O2", f"-I{runtime_build.include_dir}", f"-I{mlp_artifact.static_dir}",
                    str(EXAMPLES / "static_app.c"), str(mlp_artifact.static_dir / "mlp.a"),
                    str(single), "-o", str(exe),
                    "-Wl,--as-needed", "-lm", "-ldl"], check=True)
    proc = run(exe)
    assert_clean(proc)
    np.testing.assert_allclose(parse_outputs(proc.stdout)[0], static_app_expected, rtol=1e-6, atol=1e-7)


# ---- export_static --------------------------------------------------------------------------

def _defined_globals(archive) -> Dict[str, str]:
    out = subprocess.run(["nm", "-g", "--defined-only", str(archive)], capture_output=True,
                         text=True, check=True).stdout
    return {parts[2]: parts[1] for parts in (l.split() for l in out.splitlines()) if len(parts) == 3}


def test_export_static_exports_only_prefixed_symbols(mlp_artifact):
    syms = _defined_globals(mlp_artifact.static_dir / "mlp.a")
    assert sorted(syms) == ["kiln_model_mlp_blob", "kiln_model_mlp_blob_size",
                            "kiln_model_mlp_create", "kiln_model_mlp_library_info"]
    assert syms["kiln_model_mlp_create"] == "T"
    header = (mlp_artifact.static_dir / "mlp.h").read_text()
    assert "kiln_status_t kiln_model_mlp_create(kiln_module_t** out_module);" in header
    assert "forward(x: float32[1, 784], fc1.weight: float32[256, 784]" in header


def test_export_static_rejects_bad_names(tmp_path):
    from kiln.executable.static import export_static
    for name in ["", "1mlp", "my-model", "a b", None]:
        with pytest.raises(ValueError, match="not a C identifier"):
            export_static(object(), tmp_path, name)


TWO_MODELS = r"""
#include <stdio.h>
#include "kiln_runtime.h"
#include "first.h"
#include "second.h"
static int run(kiln_status_t (*create)(kiln_module_t**)) {
  kiln_module_t* lib = NULL; kiln_function_t *load = NULL, *init = NULL, *fwd = NULL;
  kiln_value_t vm = {KILN_VALUE_NULL, {0}}, out = {KILN_VALUE_NULL, {0}};
  kiln_value_t args[5]; int n = 0, rc = 1;
  const int64_t shapes[5][2] = {{1, 784}, {256, 784}, {256, 0}, {10, 256}, {10, 0}};
  if (create(&lib) || kiln_module_get_function(lib, "load_executable", &load)
      || kiln_function_call(load, NULL, 0, &vm)
      || kiln_module_get_function(vm.u.module, "init", &init) || kiln_function_call(init, NULL, 0, NULL)
      || kiln_module_get_function(vm.u.module, "forward", &fwd)) goto done;
  for (; n < 5; n++) {
    args[n].kind = KILN_VALUE_TENSOR;
    if (kiln_tensor_create(shapes[n], shapes[n][1] ? 2 : 1, (DLDataType){kDLFloat, 32, 1},
                           (DLDevice){kDLCPU, 0}, &args[n].u.tensor)) goto done;
    float* d = (float*)kiln_tensor_dltensor(args[n].u.tensor)->data;
    for (size_t i = 0; i < kiln_tensor_nbytes(args[n].u.tensor) / 4; i++) d[i] = (float)(i % 5) / 8;
  }
  if (kiln_function_call(fwd, args, 5, &out)) goto done;
  printf("%.9g\n", (double)((float*)kiln_tensor_dltensor(out.u.tensor)->data)[3]);
  rc = 0;
done:
  if (rc) fprintf(stderr, "%s\n", kiln_last_error());
  while (n-- > 0) kiln_tensor_release(args[n].u.tensor);
  kiln_value_release(&out); kiln_value_release(&vm);
  kiln_function_release(fwd); kiln_function_release(init); kiln_function_release(load);
  kiln_module_release(lib);
  return rc;
}
int main(void) { return run(kiln_model_first_create) || run(kiln_model_second_create); }
"""


def test_two_models_link_into_one_program(mlp_executable, runtime_build, tmp_path):
    # The same executable exported under two names: the prefixed symbols must not clash.
    mlp_executable.export_static(tmp_path, name="first")
    mlp_executable.export_static(tmp_path, name="second")
    src = tmp_path / "two.c"
    src.write_text(TWO_MODELS)
    exe = tmp_path / "two"
    subprocess.run(["cc", *CFLAGS, f"-I{runtime_build.include_dir}", f"-I{tmp_path}", str(src),
                    str(tmp_path / "first.a"), str(tmp_path / "second.a"),
                    str(runtime_build.static_lib), "-o", str(exe), *LIBS], check=True)
    proc = run(exe)
    assert_clean(proc)
    a, b = proc.stdout.split()
    assert a == b


# ---- examples/c/Makefile ----------------------------------------------------------------------

def test_examples_makefile_run(runtime_build, tmp_path):
    """`make -C examples/c run` (what the root Makefile runs), built into a tmp dir."""
    proc = subprocess.run(["make", "-s", "-C", str(EXAMPLES), f"B={tmp_path}",
                           f"RT_DIR={runtime_build.static_lib.parent}", "run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outputs = [np.array(line.split(), dtype=np.float32) for line in proc.stdout.splitlines()
               if re.fullmatch(r"[-+0-9.e ]+", line.strip())]
    assert len(outputs) == 3, proc.stdout
    expected = np.fromfile(tmp_path / "model" / "expected.bin", dtype="<f4")
    np.testing.assert_allclose(outputs[0], expected, rtol=1e-6, atol=1e-7)   # run_model
    np.testing.assert_allclose(outputs[1], expected, rtol=1e-6, atol=1e-7)   # run_model_static
    assert not list(EXAMPLES.glob("*.o"))
