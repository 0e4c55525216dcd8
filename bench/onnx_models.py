"""ONNX models (an MLP 784-256-10, ResNet-18, MobileNetV2, a GPT-2-style decoder; seeded random weights, exported
from PyTorch at opset 17 by tests/onnx_models/onnx_model_zoo.py) through ``kiln compile`` and
Kiln's VM, against onnxruntime (CPU, all graph optimisations, the same intra-op thread count)
in the same process.

- ``compile_s``: import + bind + "default" pipeline + codegen/link, with a cold build cache, as
  timed by the ``kiln compile`` steps (Python start-up and imports not included);
- ``compile_peak_mb``: peak resident memory (VmHWM) of that ``kiln compile`` process, everything
  included (interpreter, numpy, onnx, LLVM, the weights);
- ``kiln_ms`` / ``ort_ms``: median latency of one inference (batch 1), threads 1 and 2, the two
  systems timed in alternating rounds (``alternate``); ``kiln/ort`` below 1: Kiln is faster;
- after the table: the per-kernel profile of ResNet-18 (``vm.profile``), top kernels by time.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "onnx_models"))

import onnx_model_zoo as zoo  # noqa: E402

MODELS = ("mlp", "resnet18", "mobilenet_v2", "gpt2")


_CHILD = """import sys
from kiln.cli import main
rc = main(sys.argv[1:])
with open("/proc/self/status") as f:
    hwm = [line.split()[1] for line in f if line.startswith("VmHWM:")]
print(f"peak_kib {hwm[0] if hwm else -1}", file=sys.stderr)
sys.exit(rc)
"""


def compile_child(model_path: str, lib_path: str, cache_dir: str) -> tuple:
    """Runs ``kiln compile`` in a child process with a cold cache; returns (seconds of its compile
    steps, the child's peak RSS in MiB). The peak is VmHWM from /proc (Linux), read by the child
    itself: ``ru_maxrss`` of a child also counts the parent's RSS at fork, so it is useless here."""
    cmd = [sys.executable, "-c", _CHILD, "compile", model_path, "-o", lib_path, "--cache-dir", cache_dir]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kiln compile {model_path} failed:\n{proc.stderr}")
    steps = [float(s) for s in re.findall(r"done \(([0-9.]+) s\)", proc.stderr)]
    peak = re.search(r"peak_kib (-?\d+)", proc.stderr)
    peak_mb = int(peak.group(1)) / 1024 if peak and int(peak.group(1)) >= 0 else float("nan")
    return sum(steps[1:]), peak_mb   # steps[0] reads the file


def alternate(fns: dict, rounds: int = 7, per_round: int = 10, settle_s: float = 0.25,
              warm_s: float = 0.03) -> dict:
    """Median seconds of each of ``fns`` (name -> callable), timed in alternating rounds: each
    round runs every function ``per_round`` times (after warm-up calls) and keeps its
    median; the result is the median of the rounds. Alternating means a burst of load on the
    machine hits both systems alike, so the ratio stays meaningful on a noisy machine.

    Before each block the process sleeps ``settle_s``: thread pools spin for a while after
    their last task (OpenBLAS for about 0.1 s, onnxruntime's and Kiln's briefly), and a
    system timed while the other's workers still spin would lose a core to them. After the
    sleep, warm-up calls for ``warm_s`` (at least one): on the project's VMs the first calls
    after an idle 0.25 s are slow for numpy and Kiln alike (a 1.7 ms matmul took 5 calls to
    reach its speed, bench/RESULTS.md "Session 13"), which a block of 10 calls would
    otherwise mostly measure."""
    import statistics
    import time
    per = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(settle_s)
            end = time.perf_counter() + warm_s
            fn()
            while time.perf_counter() < end:
                fn()
            ts = []
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            per[name].append(statistics.median(ts))
    return {k: statistics.median(v) for k, v in per.items()}


def run(names=MODELS, threads=(1, 2), repeat: int = 10, profile_top: int = 10) -> list[dict]:
    """One row per model and thread count: median latency of Kiln and onnxruntime from
    ``alternate`` (``repeat`` calls per round), their ratio (below 1: Kiln faster), and the
    compile time and peak memory of ``kiln compile`` on the model."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = zoo.export(name, os.path.join(tmp, f"{name}.onnx"))
            lib = os.path.join(tmp, f"{name}.so")
            compile_s, peak_mb = compile_child(path, lib, os.path.join(tmp, f"cache-{name}"))
            vm = kiln.VirtualMachine(lib, kiln.cpu())
            inputs = zoo.example_inputs(name)
            args = [kiln.nd.array(v) for v in inputs.values()]
            f = vm["main"]
            got = f(*args).numpy()
            want = zoo.ort_session(path).run(None, inputs)[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            for t in threads:
                kiln.set_num_threads(t)
                sess = zoo.ort_session(path, threads=t)
                med = alternate({"kiln": lambda: f(*args),
                                 "ort": lambda: sess.run(None, inputs)}, per_round=repeat)
                rows.append({"model": name, "threads": t, "compile_s": compile_s,
                             "compile_peak_mb": peak_mb, "kiln_ms": med["kiln"] * 1e3,
                             "ort_ms": med["ort"] * 1e3, "kiln/ort": med["kiln"] / med["ort"]})
                del sess
            if name == "resnet18" and profile_top:
                kiln.set_num_threads(threads[-1])
                report = vm.profile("main", *args)
                rows_k = sorted((r for r in report.rows if r.kind == "kernel"), key=lambda r: -r.total_us)
                print(f"# ResNet-18 per-kernel profile ({threads[-1]} threads, one run, "
                      f"total {report.total_us / 1e3:.1f} ms), top {profile_top}:")
                for r in rows_k[:profile_top]:
                    print(f"#   {r.name:<32} {r.calls:>3} calls {r.total_us / 1e3:8.2f} ms "
                          f"{100 * r.total_us / report.total_us:5.1f}%")
            del vm, f
    kiln.set_num_threads(0)
    return rows


def cpu_name() -> str:
    """The CPU's model name and its widest vector extensions (for bench/RESULTS.md)."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return f"{model} ({', '.join(simd) or 'no AVX'})"
