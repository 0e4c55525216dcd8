"""Where a model loses time at two threads: the figures of bench/RESULTS.md, "Session 7".

    .venv/bin/python bench/thread_scaling.py profile gpt2          # per kernel, 1 vs 2 threads
    .venv/bin/python bench/thread_scaling.py threshold gpt2 16384,65536   # A/B of the parallel cut
    .venv/bin/python bench/thread_scaling.py idle gpt2 0.2         # the calls after an idle gap
    .venv/bin/python bench/thread_scaling.py scaling gpt2 11       # plain calls, 1 vs 2 threads
    .venv/bin/python bench/thread_scaling.py chain 64 256 16       # a chain of 64x256x256 matmuls

Models: those of tests/onnx_models/onnx_model_zoo.py (mlp, resnet18, mobilenet_v2, gpt2), with
seeded random weights. Every comparison alternates its sides round by round in one process and
takes medians, so a burst of load on the machine hits both alike.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

import onnx

import kiln
from kiln.frontend.onnx import from_onnx
from kiln.transform.infra import PassContext

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx_models"))
import onnx_model_zoo as zoo  # noqa: E402


def compiled(name: str, ctx: PassContext | None = None):
    """(the model's ``main``, its arguments) compiled with the default pipeline under ``ctx``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = zoo.export(name, os.path.join(tmp, f"{name}.onnx"))
        mod, params = from_onnx(onnx.load(path))
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default", ctx)(mod), "llvm"), kiln.cpu())
    args = [kiln.nd.array(v) for v in zoo.example_inputs(name).values()]
    return vm, args


def median_call(f, args, calls: int = 30, warm: int = 5) -> float:
    for _ in range(warm):
        f(*args)
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def profile(name: str, runs: int = 30, top: int = 20) -> None:
    """Per kernel and VM instruction: µs per call (summed over its calls) at 1 and 2 threads,
    median of ``runs`` profiled calls, and their ratio."""
    vm, args = compiled(name)
    per = {}
    total = {}
    calls = {}
    for threads in (1, 2):
        kiln.set_num_threads(threads)
        median_call(vm["main"], args, calls=1, warm=20)
        rows = collections.defaultdict(list)
        totals = []
        for _ in range(runs):
            # A plain call first: the report's Python work after the last profiled call can
            # outlast the pool's 50 µs idle spin, and a profile that starts with the worker
            # asleep times its wake-up in the first loops (2t looked like 1t in one run).
            vm["main"](*args)
            report = vm.profile("main", *args)
            for r in report.rows:
                rows[(r.name, r.kind)].append(r.total_us)
                calls[(r.name, r.kind)] = r.calls
            totals.append(report.total_us)
        per[threads] = {k: statistics.median(v) for k, v in rows.items()}
        total[threads] = statistics.median(totals)
    kiln.set_num_threads(0)
    print(f"{name}: profiled call {total[1] / 1e3:.2f} ms at 1 thread, {total[2] / 1e3:.2f} ms at 2 "
          f"({total[2] / total[1]:.2f})")
    print("| kernel or instruction | kind | calls | 1 thread µs | 2 threads µs | 2t / 1t |")
    print("|---|---|---|---|---|---|")
    for k in sorted(per[1], key=lambda k: -per[1][k])[:top]:
        one, two = per[1][k], per[2].get(k, float("nan"))
        print(f"| {k[0]} | {k[1]} | {calls[k]} | {one:.1f} | {two:.1f} | {two / one:.2f} |")


def threshold(name: str, values, threads: int = 2, rounds: int = 9) -> None:
    """Plain-call latency at ``threads`` of the model compiled with each ``parallel_min_elements``
    in ``values``, alternating round by round."""
    fns = {v: compiled(name, PassContext(parallel_min_elements=v)) for v in values}
    kiln.set_num_threads(threads)
    res = {v: [] for v in values}
    for _ in range(rounds):
        for v, (vm, args) in fns.items():
            res[v].append(median_call(vm["main"], args))
    kiln.set_num_threads(0)
    base = statistics.median(res[values[0]])
    for v in values:
        m = statistics.median(res[v])
        print(f"{name} at {threads} threads, parallel_min_elements={v}: {m * 1e3:.3f} ms ({m / base:.3f})")


def scaling(name: str, rounds: int = 11, calls: int = 20) -> float:
    """Plain-call latency at 1 and 2 threads, alternating round by round (``calls`` calls a
    round after 3 warm-up calls), medians; prints them and returns 2-thread / 1-thread. The
    figure issue 10's goal of 0.55 is about (bench/RESULTS.md, "Session 12"); compare two
    runtimes or schedules by running it in one process per side, alternating the processes."""
    vm, args = compiled(name)
    f = vm["main"]
    res = {1: [], 2: []}
    for _ in range(rounds):
        for threads in (1, 2):
            kiln.set_num_threads(threads)
            res[threads].append(median_call(f, args, calls=calls, warm=3))
    kiln.set_num_threads(0)
    one, two = (statistics.median(res[t]) * 1e3 for t in (1, 2))
    print(f"{name}: {one:.4f} ms at 1 thread, {two:.4f} ms at 2 ({two / one:.3f})")
    return two / one


def chain_module(m: int, k: int, length: int, distinct: bool, seed: int = 0):
    """``length`` matmuls ``(1, m, k) @ (k, k)`` in a chain, each reading the one before: one
    weight for all (``distinct=False``) or one each."""
    import numpy as np

    from kiln import ops
    from kiln.ir import FunctionBuilder, GraphVar, IRModule, TensorType
    from kiln.ir.graph import Constant
    rng = np.random.default_rng(seed)
    x = GraphVar("x", TensorType((1, m, k), "float32"))
    fb = FunctionBuilder([x])
    w = (rng.standard_normal((k, k)) / np.sqrt(k)).astype("float32")
    with fb.dataflow():
        h = x
        for i in range(length):
            if distinct:
                w = (rng.standard_normal((k, k)) / np.sqrt(k)).astype("float32")
            call = ops.call("matmul", h, Constant(w))
            h = fb.emit_output(call) if i == length - 1 else fb.emit(call)
    return IRModule({"main": fb.finish(h)})


def chain(m: int, k: int, length: int, rounds: int = 11) -> dict:
    """µs per matmul of a chain (``chain_module``) at 1 and 2 threads, same weight and
    distinct weights, alternating round by round; prints and returns them. How a matmul
    splits its work among the cores shows here: each reads what the one before wrote
    (bench/RESULTS.md, "Session 12")."""
    import numpy as np
    fns = {}
    for distinct in (False, True):
        mod = kiln.get_pipeline("default")(chain_module(m, k, length, distinct))
        fns["distinct" if distinct else "same"] = kiln.VirtualMachine(
            kiln.compile(mod, "llvm"), kiln.cpu())["main"]
    a = kiln.nd.array(np.random.default_rng(1).standard_normal((1, m, k)).astype("float32"))
    res = {(n, t): [] for n in fns for t in (1, 2)}
    for _ in range(rounds):
        for n, f in fns.items():
            for t in (1, 2):
                kiln.set_num_threads(t)
                res[(n, t)].append(median_call(f, [a], calls=20, warm=3))
    kiln.set_num_threads(0)
    out = {}
    for n in fns:
        one, two = (statistics.median(res[(n, t)]) * 1e6 / length for t in (1, 2))
        out[n] = (one, two)
        print(f"chain of {length} {m}x{k}x{k} matmuls, {n} weights: {one:.1f} us a matmul at 1 "
              f"thread, {two:.1f} at 2 ({two / one:.3f})")
    return out


def idle(name: str, gap_s: float, rounds: int = 6, calls: int = 8) -> None:
    """The latency of each of the ``calls`` calls that follow ``gap_s`` seconds of idling, at 1
    and 2 threads (medians over ``rounds``), beside back-to-back calls."""
    vm, args = compiled(name)
    f = vm["main"]
    after = {1: [], 2: []}
    steady = {1: [], 2: []}
    for _ in range(rounds):
        for threads in (1, 2):
            kiln.set_num_threads(threads)
            steady[threads].append(median_call(f, args))
            time.sleep(gap_s)
            ts = []
            for _ in range(calls):
                t0 = time.perf_counter()
                f(*args)
                ts.append(time.perf_counter() - t0)
            after[threads].append(ts)
    kiln.set_num_threads(0)
    for threads in (1, 2):
        firsts = " ".join(f"{statistics.median(c) * 1e3:.2f}" for c in zip(*after[threads]))
        print(f"{name} at {threads} thread(s): back to back {statistics.median(steady[threads]) * 1e3:.2f} "
              f"ms; the {calls} calls after {gap_s} s idle: {firsts} ms")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("profile", help="per kernel, 1 vs 2 threads")
    a.add_argument("model")
    a = sub.add_parser("threshold")
    a.add_argument("model")
    a.add_argument("values", help="parallel_min_elements values, comma-separated")
    a = sub.add_parser("idle")
    a.add_argument("model")
    a.add_argument("gap", type=float, nargs="?", default=0.2)
    a = sub.add_parser("scaling", help="plain calls, 1 vs 2 threads")
    a.add_argument("model")
    a.add_argument("rounds", type=int, nargs="?", default=11)
    a = sub.add_parser("chain", help="a chain of M x K x K matmuls, 1 vs 2 threads")
    for name in ("m", "k", "length"):
        a.add_argument(name, type=int)
    args = p.parse_args(argv)
    if args.what == "chain":
        chain(args.m, args.k, args.length)
        return 0
    if args.model not in zoo.MODELS:
        p.error(f"unknown model {args.model!r}; one of {', '.join(zoo.MODELS)}")
    if args.what == "profile":
        profile(args.model)
    elif args.what == "threshold":
        threshold(args.model, [int(v) for v in args.values.split(",")])
    elif args.what == "scaling":
        scaling(args.model, args.rounds)
    else:
        idle(args.model, args.gap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
