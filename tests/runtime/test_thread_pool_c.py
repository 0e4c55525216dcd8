"""The thread pool under stress, from C (thread_pool_test.c): thousands of small loops back to
back and after idle gaps, resizes, failing tasks, nested launches and two launching threads, under
ThreadSanitizer (no data race, no lost wake-up) and AddressSanitizer + UBSan. The runtime's
sources are compiled with the test into tmp_path (~1 s), so it shares no build directory."""

import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parents[1] / "runtime_c"


@pytest.mark.parametrize("sanitizer,flags", [
    ("tsan", ["-fsanitize=thread"]),
    ("asan", ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]),
])
def test_thread_pool_stress_under_sanitizer(tmp_path, sanitizer, flags):
    exe = tmp_path / "thread_pool_test"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", *flags,
                    f"-I{RUNTIME / 'include'}", *sorted(map(str, RUNTIME.glob("src/*.c"))),
                    str(HERE / "thread_pool_test.c"), "-o", str(exe), "-ldl", "-lpthread", "-lm"],
                   check=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", TSAN_OPTIONS="halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1")
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ALL OK", run.stdout + run.stderr[-5000:]
    assert "Sanitizer" not in run.stderr and "runtime error" not in run.stderr, run.stderr[-5000:]
