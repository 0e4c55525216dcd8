"""The runtime's thread-safety and leak contracts from Java (issue 17 items 4 and 5):
JavaReliability.java on the real models of reliability_models.py, as a plain ``java`` program
(-Xcheck:jni) so its threads are Java threads and its RSS is the JVM's own."""
from __future__ import annotations

import re
import subprocess

import pytest

from reliability_models import MODELS


def _run(cmd, timeout=300):
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = run.stdout + run.stderr[-4000:]
    assert run.returncode == 0 and run.stdout.strip().endswith("ALL OK"), out
    assert "WARNING" not in out, out  # -Xcheck:jni found no JNI misuse
    return run.stdout.splitlines()[0]


@pytest.mark.parametrize("model", MODELS)
def test_java_threads_share_module_vm_function(model, model_manifest, java_reliability):
    line = _run([*java_reliability, "threads", str(model_manifest(model)), "8", "1000"])
    assert line.startswith("threads: 8 x 1000 calls, 8000 outputs correct, 0 wrong"), line


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_java_load_run_close_cycles_keep_rss_flat(model, model_manifest, java_reliability):
    """2,000 cycles; over the second 1,000 the JVM's RSS may grow by 1 MiB at most (measured:
    4 to 20 KiB). Keeping one extra VM alive per cycle grows it by 3.9 MiB. The JVM's own
    growth is held still so it can neither hide nor fake a native leak: a fixed, pre-touched
    heap (-Xms = -Xmx, AlwaysPreTouch) and the C1 JIT only, which is done compiling early (C2
    compiling late in the run adds up to 3 MiB of code cache)."""
    java, *rest = java_reliability
    cmd = [java, "-Xmx64m", "-Xms64m", "-XX:+AlwaysPreTouch", "-XX:TieredStopAtLevel=1", *rest]
    line = _run([*cmd, "leaks", str(model_manifest(model)), "2000"])
    grown = int(re.search(r"grown (-?\d+) KiB", line).group(1))
    assert "2000 cycles, 2000 correct" in line and grown < 1024, line
