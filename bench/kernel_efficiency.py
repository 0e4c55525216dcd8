"""Every kernel of a model against the core's peak: where a model loses time, kernel by kernel.

    .venv/bin/python bench/kernel_efficiency.py --models ssdlite yolo_like     # bench/more_models.py's
    .venv/bin/python bench/kernel_efficiency.py --onnx model.onnx             # any ONNX (random input)
    .venv/bin/python bench/kernel_efficiency.py --models vit --peak 150 --top 20

Each model is compiled with the default pipeline and profiled (``vm.profile``, medians of
``--calls`` profiled calls) at one and two threads. A kernel's arithmetic comes from its
unscheduled program (``tune.access.access_features``: operations of the stored values times
iterations; a Winograd kernel counts its own arithmetic, not the direct conv's), its bytes from
its parameters (what it must read and write at least once). Kernels whose bytes per second
exceed ``--bandwidth`` count as bound by memory; every other contraction kernel (conv, matmul,
Winograd, attention) loses ``time - flops / peak``. The table ranks kernels by that loss as a
share of their model's time: session 26 found a ragged panel guarded in every tile (Swin-T), a
gathering bilinear resize (LR-ASPP) and split kernels (GRU) this way (bench/RESULTS.md).
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import statistics
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CONTRACTIONS = ("conv", "matmul", "winograd", "attention", "depthwise")


def kernel_rows(onnx_path: str, x: np.ndarray, calls: int = 5, threads=(1, 2)) -> list:
    """Per kernel of the ONNX model at ``onnx_path`` run on ``x``: a dict with ``kernel``,
    ``calls``, ``us`` (one thread) and ``us2`` (two, when asked), ``share`` (of the model's
    one-thread time), ``gflops``, ``gbs``, ``shapes`` and ``schedule``."""
    import onnx

    import kiln
    from kiln.transform import PassContext
    from kiln.tune.access import access_features
    mod, params = kiln.frontend.from_onnx(onnx.load(onnx_path))
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    plain = kiln.get_pipeline("default", PassContext(disabled_passes=("default_schedule",)))(mod)
    scheduled = kiln.get_pipeline("default")(mod)
    vm = kiln.VirtualMachine(kiln.compile(scheduled, "llvm"), kiln.cpu())
    arg = kiln.nd.array(x)
    times = {}
    for t in threads:
        kiln.set_num_threads(t)
        for _ in range(3):
            vm["main"](arg)
        per = collections.defaultdict(list)
        counts = {}
        for _ in range(calls):
            for r in vm.profile("main", arg).rows:
                if r.kind == "kernel":
                    per[r.name].append(r.total_us)
                    counts[r.name] = r.calls
        times[t] = ({n: statistics.median(v) for n, v in per.items()}, counts)
    kiln.set_num_threads(0)
    one, counts = times[threads[0]]
    total = sum(one.values())
    rows = []
    for name, us in one.items():
        func = plain.functions.get(name)
        if not isinstance(func, kiln.ir.PrimFunc) or us <= 0:
            continue
        buffers = [p for p in func.params if hasattr(p, "shape")]
        shapes = [tuple(int(d.value) for d in b.shape) for b in buffers]
        nbytes = sum(math.prod(s) * 4 for s in shapes)
        flops = 2 ** access_features(func)["flops"]
        n = counts[name]
        sched = dict(getattr(scheduled.functions.get(name), "attrs", ()) or ()).get("kiln.schedule", "")
        rows.append({"kernel": name, "calls": n, "us": us, "share": us / total,
                     "us2": times[threads[-1]][0].get(name, us) if len(threads) > 1 else None,
                     "gflops": flops * n / us / 1e3, "gbs": nbytes * n / us / 1e3,
                     "shapes": shapes, "schedule": sched})
    return sorted(rows, key=lambda r: -r["us"])


def lost(row: dict, peak_gflops: float, bandwidth_gbs: float) -> float:
    """The share of its model's time ``row``'s kernel loses against ``peak_gflops`` (0 for a
    kernel bound by memory or not a contraction)."""
    if not row["schedule"].split(":")[0].startswith(CONTRACTIONS) or row["gbs"] > bandwidth_gbs:
        return 0.0
    ideal = row["us"] * min(1.0, row["gflops"] / peak_gflops)
    return (row["us"] - ideal) / row["us"] * row["share"]


def _input_for(onnx_path: str) -> np.ndarray:
    """A seeded random input for the ONNX model's one graph input (static shape, float32)."""
    import onnx
    graph = onnx.load(onnx_path, load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    (inp,) = [i for i in graph.input if i.name not in inits]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    if not dims or any(d <= 0 for d in dims):
        raise SystemExit(f"{onnx_path}: input {inp.name!r} needs a static shape, got {dims}")
    return np.random.default_rng(0).standard_normal(dims).astype("float32")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=[], help="names from bench/more_models.py")
    p.add_argument("--onnx", nargs="*", default=[], help="ONNX files (one float32 input)")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--peak", type=float, default=150.0, help="GFLOP/s a kernel should reach")
    p.add_argument("--bandwidth", type=float, default=10.0,
                   help="GB/s above which a kernel counts as bound by memory")
    args = p.parse_args(argv)
    if not args.models and not args.onnx:
        p.error("give --models or --onnx")
    from onnx_models import cpu_name
    ranked = []
    with tempfile.TemporaryDirectory() as tmp:
        sources = [(path, _input_for(path)) for path in args.onnx]
        if args.models:
            import more_models
            for name in args.models:
                path = os.path.join(tmp, f"{name}.onnx")
                sources.append((path, more_models.export(name, path)))
        for path, x in sources:
            model = os.path.splitext(os.path.basename(path))[0]
            rows = kernel_rows(path, x, args.calls)
            print(f"\n## {model}: {sum(r['us'] for r in rows) / 1e3:.2f} ms of kernels at one thread\n")
            print("| kernel | calls | us (1t) | 2t / 1t | share | GFLOP/s | GB/s | schedule |")
            print("|---|---|---|---|---|---|---|---|")
            for r in rows[:args.top]:
                print(f"| {r['kernel']} | {r['calls']} | {r['us']:.0f} | {r['us2'] / r['us']:.2f} | "
                      f"{100 * r['share']:.1f}% | {r['gflops']:.1f} | {r['gbs']:.1f} | {r['schedule']} |")
            ranked += [(lost(r, args.peak, args.bandwidth), model, r) for r in rows]
    print(f"\n## Largest losses against {args.peak:.0f} GFLOP/s (CPU: {cpu_name()})\n")
    print("| model | kernel | lost share of the model | GFLOP/s | shapes |")
    print("|---|---|---|---|---|")
    for share, model, r in sorted(ranked, key=lambda t: -t[0])[:args.top]:
        if share > 0:
            print(f"| {model} | {r['kernel']} | {100 * share:.1f}% | {r['gflops']:.1f} | {r['shapes']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
