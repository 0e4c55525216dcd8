"""Compile cost of ``kiln compile``: seconds and peak memory per model (median of ``--runs`` cold
compiles), and how the compile-time steps scale with model size.

    .venv/bin/python bench/compile_cost.py [--runs 3] [--models resnet18,mobilenet_v2,gpt2] [--cpus 1]
    .venv/bin/python bench/compile_cost.py --scaling 8,32,128

- ``compile_s``: the ``kiln compile`` steps after reading the file (import, bind, pipeline,
  codegen and link), cold build cache, as ``onnx_models.compile_child`` times them (median);
- ``peak_mb``: VmHWM of the ``kiln compile`` process (``compile_child``'s number, median);
- ``tree_rss_mb`` / ``tree_pss_mb``: the largest sum of resident memory over that process and
  its children (codegen worker processes, the linker), sampled every 10 ms. RSS counts the
  shared pages (libLLVM, numpy, Python) once per process, so it overstates the footprint; PSS
  splits each shared page between the processes that map it, so it adds up to the memory the
  compile really holds. From one more compile, sampled every 20 ms (sampling costs CPU, so
  that run is not timed).

``--scaling`` compiles MLPs of N layers and prints the Python function calls of every pipeline
pass and of ``kiln.compile`` (deterministic counts, cProfile), then of ``build_library`` on
modules of N distinct kernels of one size, with the ratio between the largest and smallest N:
a step that grows linearly shows the ratio of the Ns, a quadratic one its square
(tests/test_compile_scaling.py asserts it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "onnx_models"))
sys.path.insert(0, HERE)

MODELS = ("resnet18", "mobilenet_v2", "gpt2")


def _tree_kib(pid: int) -> tuple:
    """(RSS, PSS) KiB of ``pid`` and all its descendants (0 for those gone meanwhile)."""
    rss = pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return rss, pss


def compile_tree(model_path: str, lib_path: str, cache_dir: str) -> tuple:
    """``onnx_models.compile_child`` plus the sampled peaks of the process tree: (seconds, peak
    MiB of the compile process, peak RSS and peak PSS MiB of it and its children)."""
    import re
    from onnx_models import _CHILD
    cmd = [sys.executable, "-c", _CHILD, "compile", model_path, "-o", lib_path, "--cache-dir", cache_dir]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0, 0]

    def sample():
        while proc.poll() is None:
            rss, pss = _tree_kib(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.02)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    err = proc.communicate()[1]
    t.join()
    if proc.returncode != 0:
        raise RuntimeError(f"kiln compile {model_path} failed:\n{err}")
    steps = [float(s) for s in re.findall(r"done \(([0-9.]+) s\)", err)]
    hwm = re.search(r"peak_kib (-?\d+)", err)
    return sum(steps[1:]), int(hwm.group(1)) / 1024, peak[0] / 1024, peak[1] / 1024


def run(names=MODELS, runs: int = 3) -> list:
    import onnx_model_zoo as zoo
    from onnx_models import compile_child
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = zoo.export(name, os.path.join(tmp, f"{name}.onnx"))
            lib = os.path.join(tmp, f"{name}.so")
            res = [compile_child(path, lib, os.path.join(tmp, f"cache-{name}-{k}")) for k in range(runs)]
            tree = compile_tree(path, lib, os.path.join(tmp, f"cache-{name}-tree"))
            rows.append({"model": name, "compile_s": statistics.median(r[0] for r in res),
                         "peak_mb": statistics.median(r[1] for r in res),
                         "tree_rss_mb": tree[2], "tree_pss_mb": tree[3],
                         "all_s": [round(r[0], 2) for r in res]})
    return rows


def deep_mlp(n: int, widths=None, width: int = 64):
    """An MLP of ``n`` Linear+ReLU layers with weights bound; ``widths`` (``n + 1`` values), or
    widths cycling through five values from ``width`` (so at most a handful of distinct
    kernels: identical ones are compiled once)."""
    import kiln
    from kiln import nn

    widths = widths or [width + 8 * (k % 5) for k in range(n + 1)]

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(widths[k], widths[k + 1]) for k in range(n)])
            self.relu = nn.ReLU()

        def forward(self, x):
            for layer in self.layers:
                x = self.relu(layer(x))
            return x

    m = MLP()
    m.load_state_dict(m.init_params(seed=0))
    mod, _ = m.export(spec={"forward": {"x": nn.spec.Tensor((1, widths[0]), "float32")}})
    return kiln.transform.bind_params("forward", m.state_dict())(mod)


def scale_kernels(k: int):
    """``k`` tensor programs of the same size that differ in a constant (none is merged)."""
    import kiln
    from kiln import te
    from kiln.ir import IRModule
    funcs = {}
    for j in range(k):
        a, c = te.placeholder((256,), "float32", name="a"), float(j + 2)
        funcs[f"scale{j}"] = te.create_prim_func([a, te.compute((256,), lambda i: a[i] * c + 1.0, name="b")])
    return kiln.get_pipeline("zero")(IRModule(funcs))


def count_calls(fn):
    """(``fn()``, the Python function calls it made, from cProfile): deterministic, unlike time."""
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    try:
        out = fn()
    finally:
        pr.disable()
    return out, sum(v[1] for v in pstats.Stats(pr).stats.values())


def step_calls(n: int, cache_dir: str) -> dict:
    """Python function calls of each pipeline pass and of kiln.compile on ``deep_mlp(n)``."""
    import kiln
    from kiln.codegen import BuildOptions
    mod, out = deep_mlp(n), {}
    for p in kiln.get_pipeline("default").passes:
        mod, out[p.name] = count_calls(lambda: p(mod))
    _, out["kiln.compile"] = count_calls(lambda: kiln.compile(mod, "llvm", options=BuildOptions(
        cache_dir=cache_dir, jobs=1)))
    return out


def kernel_calls(k: int, cache_dir: str) -> dict:
    """Python function calls of build_library on ``k`` distinct kernels of the same size."""
    from kiln.codegen import BuildOptions, build_library
    mod = scale_kernels(k)
    _, n = count_calls(lambda: build_library(mod, "llvm", BuildOptions(cache_dir=cache_dir, jobs=1),
                                             lower=True))
    return {"build_library (N kernels)": n}


def scaling(ns) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        step_calls(2, tmp)   # warm the caches (schedule rules, LLVM) so the first N pays nothing extra
        kernel_calls(2, os.path.join(tmp, "k"))
        res = [{**step_calls(n, os.path.join(tmp, str(n))), **kernel_calls(n, os.path.join(tmp, f"k{n}"))}
               for n in ns]
    print(f"{'step':28s}" + "".join(f"{'N=' + str(n):>11s}" for n in ns) + f"   ratio (N x{ns[-1] / ns[0]:g})")
    for k in res[0]:
        print(f"{k:28s}" + "".join(f"{r[k]:11d}" for r in res) + f"   {res[-1][k] / max(1, res[0][k]):.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--scaling", default=None, help="layer counts, e.g. 8,32,128")
    ap.add_argument("--cpus", type=int, default=0,
                    help="run the compiles on this many CPUs only (1: no parallel codegen)")
    args = ap.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cpus])   # children inherit it
    if args.scaling:
        scaling([int(n) for n in args.scaling.split(",")])
        return
    from onnx_models import cpu_name
    print(f"# {cpu_name()}, {len(os.sched_getaffinity(0))} CPUs, python {sys.version.split()[0]}")
    print(f"{'model':14s} {'compile_s':>9s} {'peak_mb':>8s} {'tree_rss_mb':>11s} {'tree_pss_mb':>11s}  runs (s)")
    for r in run(args.models.split(","), args.runs):
        print(f"{r['model']:14s} {r['compile_s']:9.2f} {r['peak_mb']:8.0f} {r['tree_rss_mb']:11.0f} "
              f"{r['tree_pss_mb']:11.0f}  {r['all_s']}")


if __name__ == "__main__":
    main()
