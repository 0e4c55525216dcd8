"""The VM, tuples and the registry exercised from C (vm_test.c) under AddressSanitizer + UBSan
(with every allocation made to fail in turn, and truncated / randomly corrupted executables) and
under ThreadSanitizer (concurrent calls while init runs again)."""

import os
import pathlib
import subprocess

import pytest

from kiln.executable.format import serialize

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parents[1] / "runtime_c"


@pytest.mark.parametrize("sanitizer,flags", [
    ("asan", ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]),
    ("tsan", ["-fsanitize=thread"]),
])
def test_vm_under_sanitizer(kernel_libs, build_model, fixture_spec, if_spec, runtime_make, tmp_path,
                            sanitizer, flags):
    archive = tmp_path / "libkiln_runtime.a"
    runtime_make(sanitizer, copy={f"{sanitizer}/libkiln_runtime.a": archive})
    blob = serialize(fixture_spec())
    (tmp_path / "blob.bin").write_bytes(blob)
    (tmp_path / "if_blob.bin").write_bytes(serialize(if_spec()))
    # derived dimensions: cat(a[m], b[n]) -> [m + n] over the 'derived' fixture, m bounded by 8
    from test_derived_dims import derived_spec
    (tmp_path / "derived_blob.bin").write_bytes(serialize(derived_spec(bounds=[8, -1])))
    exe = tmp_path / "vm_test"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", *flags,
                    f"-I{RUNTIME / 'include'}", str(HERE / "vm_test.c"),
                    str(archive), "-o", str(exe),
                    "-ldl", "-lpthread", "-lm"], check=True)
    # Corrupted executables may ask for absurd sizes: those allocations must fail cleanly.
    limits = "allocator_may_return_null=1:max_allocation_size_mb=256"
    env = dict(os.environ, ASAN_OPTIONS=f"detect_leaks=1:{limits}",
               TSAN_OPTIONS=f"halt_on_error=1:{limits}", UBSAN_OPTIONS="print_stacktrace=1")
    run = subprocess.run([str(exe), str(kernel_libs["fixture"]), str(tmp_path / "blob.bin"),
                          str(build_model(blob)), str(tmp_path / "if_blob.bin"),
                          str(kernel_libs["derived"]), str(tmp_path / "derived_blob.bin")],
                         capture_output=True, text=True, env=env,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ALL OK", run.stdout + run.stderr[-5000:]
    reports = [line for line in run.stderr.splitlines()
               if "Sanitizer" in line and "Sanitizer failed to allocate" not in line]
    assert reports == [] and "runtime error" not in run.stderr, run.stderr[-5000:]
