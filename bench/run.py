"""Kiln's benchmark harness: `make bench` or `.venv/bin/python bench/run.py [NAME ...]`.

Each benchmark runs Kiln and its reference (numpy, later onnxruntime) in the same process and
reports both, so the ratio is meaningful even on a noisy machine. Results are printed as a
Markdown table; paste them into bench/RESULTS.md with the command and the machine.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import table  # noqa: E402

BENCHMARKS = {
    "matmul": lambda args: __import__("matmul").run(sizes=args.sizes, repeat=args.repeat),
    "models": lambda args: __import__("models").run(repeat=args.repeat),
    "onnx": lambda args: __import__("onnx_models").run(
        names=args.models or __import__("onnx_models").MODELS, repeat=args.repeat),
    "conv": lambda args: __import__("conv").run(repeat=args.repeat),
    "microkernel": lambda args: __import__("microkernel").run(repeat=args.repeat),
    "torch_export": lambda args: __import__("torch_export").run(repeat=args.repeat),
    # default vs tuned at fixed budgets (2, 5, 10 min per workload by default: about an hour
    # for all of them, so only when named: bench/run.py tune [--budgets 20s,1m])
    "tune": lambda args: __import__("tune").run(
        args.workloads or __import__("tune").WORKLOADS, args.budgets, args.threads,
        args.repeat, args.plot_dir),
}
LONG = ("tune",)     # not run without being named


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=[n for n in BENCHMARKS if n not in LONG],
                   help=f"any of {list(BENCHMARKS)} (default: all but {', '.join(LONG)})")
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--models", nargs="+", help="onnx: only these models (mlp, resnet18, "
                   "mobilenet_v2, gpt2)")
    __import__("tune").add_arguments(p.add_argument_group("tune"))
    args = p.parse_args(argv)
    models = __import__("onnx_models").MODELS
    bad = [m for m in args.models or () if m not in models]
    if bad:
        p.error(f"unknown model(s) {bad}; known: {list(models)}")
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; known: {list(BENCHMARKS)}")
    from onnx_models import cpu_name
    print(f"# machine: {cpu_name()}, {os.cpu_count()} cores")
    for name in args.names:
        rows = BENCHMARKS[name](args)
        for r in rows:
            if "kiln_gflops" in r:
                r["ratio"] = r["kiln_gflops"] / r["numpy_gflops"]
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
