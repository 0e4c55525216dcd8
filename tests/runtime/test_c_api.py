"""The C API exercised from C (runtime_test.c) under AddressSanitizer + UBSan (with every
allocation made to fail in turn) and under ThreadSanitizer."""

import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parents[1] / "runtime_c"


@pytest.mark.parametrize("sanitizer,flags", [
    ("asan", ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]),
    ("tsan", ["-fsanitize=thread"]),
])
def test_c_api_under_sanitizer(kernel_libs, runtime_make, tmp_path, sanitizer, flags):
    archive = tmp_path / "libkiln_runtime.a"
    runtime_make(sanitizer, copy={f"{sanitizer}/libkiln_runtime.a": archive})
    exe = tmp_path / "runtime_test"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", *flags,
                    f"-I{RUNTIME / 'include'}", str(HERE / "runtime_test.c"), str(archive), "-o", str(exe),
                    "-ldl", "-lpthread", "-lm"], check=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", TSAN_OPTIONS="halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1")
    run = subprocess.run([str(exe), str(kernel_libs["fixture"]), str(kernel_libs["bad_abi"]),
                          str(kernel_libs["no_info"])], capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ALL OK", run.stdout + run.stderr
    assert "Sanitizer" not in run.stderr, run.stderr
