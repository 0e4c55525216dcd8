"""The runtime on real compiled models (reliability_models.py: MLP, CNN, control flow, symbolic shapes)
from C, under sanitizers (reliability_test.c says what each mode does):

- threads: 8 threads x 1,000 calls sharing one library, one VM and one function, every output
  checked, under ThreadSanitizer (issue 17 item 4);
- leaks: 1,000 load / init / run / free cycles, zero bytes lost under LeakSanitizer (item 5);
- faults: the runtime's k-th allocation made to fail for every k along load -> init -> run ->
  free; each failure is an "out of memory" status, nothing leaks (item 3).
"""
from __future__ import annotations

import os
import subprocess

import pytest

from reliability_models import MODELS

# Absurd sizes must fail as allocations, not abort the process.
_LIMITS = "allocator_may_return_null=1"
ENV = dict(os.environ, ASAN_OPTIONS=f"detect_leaks=1:{_LIMITS}",
           TSAN_OPTIONS=f"halt_on_error=1:{_LIMITS}", UBSAN_OPTIONS="print_stacktrace=1")


def _run(exe, *args, timeout=300):
    run = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=ENV,
                         timeout=timeout)
    out = run.stdout + run.stderr[-6000:]
    assert run.returncode == 0 and run.stdout.strip().endswith("ALL OK"), out
    reports = [line for line in run.stderr.splitlines() if "Sanitizer" in line]
    assert reports == [] and "runtime error" not in run.stderr, out
    return run.stdout.splitlines()[0]


@pytest.mark.parametrize("model", MODELS)
def test_threads_share_library_vm_function_under_tsan(model, model_manifest, reliability_exe):
    line = _run(reliability_exe("tsan"), "threads", model_manifest(model), 8, 1000)
    assert line.startswith("threads: 8 x 1000 calls, 8000 outputs correct, 0 wrong"), line


@pytest.mark.parametrize("model", MODELS)
def test_load_init_run_free_cycles_leak_nothing(model, model_manifest, reliability_exe):
    line = _run(reliability_exe("asan"), "leaks", model_manifest(model), 1000)
    assert line == "leaks: 1000 load/init/run/free cycles, 1000 correct", line


@pytest.mark.parametrize("model", MODELS)
def test_every_allocation_failure_is_an_error_and_leaks_nothing(model, model_manifest, reliability_exe):
    line = _run(reliability_exe("asan"), "faults", model_manifest(model))
    assert line.startswith("faults: each of the "), line
