"""Which kernels a target's code runs badly: one model compiled for two targets that both run on
this CPU, timed kernel by kernel (bench/RESULTS.md, "Session 22": AVX2 code measured on an
AVX-512 Xeon found a slow exp, a gathered pack, a re-laid-out concat and a one-vector tile).

    .venv/bin/python bench/target_survey.py gpt2                     # host vs llvm -mcpu=haswell
    .venv/bin/python bench/target_survey.py resnet18 --targets "llvm" "llvm -mcpu=haswell" --min-ratio 1.9
    .venv/bin/python bench/target_survey.py --onnx model.onnx        # any ONNX model (float inputs)

Models: those of tests/onnx_models/onnx_model_zoo.py (mlp, resnet18, mobilenet_v2, gpt2), or an
ONNX file. Each kernel's time is its median over ``--calls`` profiled calls at one thread
(``vm.profile``). A kernel whose second-target time is more than ``--min-ratio`` times the
first's is listed: with half the vector width (AVX2 next to AVX-512) a compute-bound kernel
should take about twice as long and a memory-bound one about as long, so a ratio well above 2
points at a rule that fits the second target badly. Kernels are matched by name; the two
pipelines name a kernel alike when they make the same graph (a layout choice that differs
between the targets can shift names: read the schedules printed beside them).
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile

import numpy as np
import onnx

import kiln
from kiln.frontend.onnx import from_onnx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx_models"))
import onnx_model_zoo as zoo  # noqa: E402

DEFAULT_TARGETS = ("llvm", "llvm -mcpu=haswell")


def _inputs(model: onnx.ModelProto) -> list:
    """Random float inputs (ones for integer ones) of the graph's static input shapes."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value or 1 for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        rng = np.random.default_rng(0)
        out.append(rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                   else np.ones(shape, dtype))
    return out


def kernel_times(path: str, target: str, calls: int) -> tuple:
    """({kernel: median us per inference}, {kernel: calls per inference}, {kernel: schedule})
    of the ONNX model at ``path`` compiled for ``target``, at one thread."""
    model = onnx.load(path)
    mod, params = from_onnx(model)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    mod = kiln.get_pipeline("default", target=target)(mod)
    schedules = {}
    for gv, f in mod.functions.items():
        attrs = dict(getattr(f, "attrs", ()) or ())
        if "kiln.schedule" in attrs:
            schedules[str(gv).lstrip("@")] = attrs["kiln.schedule"]
    vm = kiln.VirtualMachine(kiln.compile(mod, target=target), kiln.cpu())
    args = [kiln.nd.array(a) for a in _inputs(model)]
    kiln.set_num_threads(1)
    try:
        for _ in range(3):
            vm["main"](*args)
        per = collections.defaultdict(list)
        counts = {}
        for _ in range(calls):
            for row in vm.profile("main", *args).rows:
                if row.kind == "kernel":
                    per[row.name].append(row.total_us)
                    counts[row.name] = row.calls
    finally:
        kiln.set_num_threads(0)
    return {k: statistics.median(v) for k, v in per.items()}, counts, schedules


def survey(path: str, targets=DEFAULT_TARGETS, calls: int = 20, min_ratio: float = 2.0) -> dict:
    """Both targets' kernel times and the kernels whose ratio (second / first) passes
    ``min_ratio``, slowest first: ``{"totals": (us, us), "outliers": [(name, calls, us, us,
    schedule), ...]}``."""
    (t1, _, _), (t2, counts, schedules) = (kernel_times(path, t, calls) for t in targets)
    outliers = [(k, counts[k], t1[k], t2[k], schedules.get(k, ""))
                for k in t2 if k in t1 and t1[k] > 0 and t2[k] / t1[k] > min_ratio]
    outliers.sort(key=lambda r: -(r[3] - r[2]))
    return {"totals": (sum(t1.values()), sum(t2.values())), "outliers": outliers}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", choices=sorted(zoo.MODELS), help="a model of the test zoo")
    p.add_argument("--onnx", help="an ONNX file instead")
    p.add_argument("--targets", nargs=2, default=list(DEFAULT_TARGETS), metavar="TARGET")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--min-ratio", type=float, default=2.0)
    args = p.parse_args(argv)
    if (args.model is None) == (args.onnx is None):
        p.error("give a model of the zoo or --onnx FILE (one of them)")
    if args.calls < 1:
        p.error("--calls must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.onnx or zoo.export(args.model, os.path.join(tmp, f"{args.model}.onnx"))
        result = survey(path, args.targets, args.calls, args.min_ratio)
    a, b = args.targets
    total_a, total_b = result["totals"]
    print(f"{args.model or args.onnx}: kernels {total_a / 1e3:.2f} ms for '{a}', "
          f"{total_b / 1e3:.2f} ms for '{b}' ({total_b / total_a:.2f}x), one thread")
    print(f"| kernel | calls | {a} us | {b} us | ratio | schedule for {b} |")
    print("|---|---|---|---|---|---|")
    for name, n, x, y, sched in result["outliers"]:
        print(f"| {name} | {n} | {x:.1f} | {y:.1f} | {y / x:.2f} | {sched} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
