"""One model compiled by two source trees of Kiln, timed against each other in one process.

    git worktree add /tmp/kiln-old <commit>      # the tree to compare against
    cp compiler/kiln/_ffi*.so /tmp/kiln-old/compiler/kiln/
    .venv/bin/python bench/compare_trees.py /tmp/kiln-old/compiler --models gru swin_t
    .venv/bin/python bench/compare_trees.py /tmp/kiln-old/compiler --onnx model.onnx --rounds 11

Each tree compiles the model (the default pipeline, ``kiln.compile``, ``export_library``) in a
child process whose ``PYTHONPATH`` is that tree's ``compiler`` folder, with an empty build cache;
this process loads both libraries with its own runtime, checks that they compute the same (the
largest difference is printed), and alternates them round by round (``onnx_models.alternate``)
at one and two threads. ``new / old`` below 1: the new tree is faster. The host's noise between
two identical libraries is a few percent (bench/RESULTS.md, sessions 25 and 26): repeat a run
before believing a difference that small. The "against the commit before" figures of
bench/RESULTS.md "Session 26" came from this.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
NEW = os.path.join(os.path.dirname(HERE), "compiler")

_COMPILE = """
import sys, onnx, kiln
mod, params = kiln.frontend.from_onnx(onnx.load(sys.argv[1]))
if params:
    mod = kiln.transform.bind_params("main", params)(mod)
kiln.compile(kiln.get_pipeline("default")(mod), "llvm").export_library(sys.argv[2])
"""


def compile_with(tree: str, onnx_path: str, lib: str) -> str:
    """``onnx_path`` compiled to ``lib`` by the Kiln in ``tree`` (its ``compiler`` folder)."""
    if not os.path.isdir(os.path.join(tree, "kiln")):
        raise SystemExit(f"{tree}: not a Kiln source tree (no kiln/ in it); give its compiler folder")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, PYTHONPATH=tree, KILN_CACHE_DIR=cache)
        r = subprocess.run([sys.executable, "-c", _COMPILE, onnx_path, lib], env=env,
                           capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"compiling {onnx_path} with {tree} failed:\n{r.stderr[-3000:]}")
    return lib


def compare(old: str, new: str, onnx_path: str, x: np.ndarray, rounds: int = 7,
            calls: int = 3) -> list:
    """Rows ``{threads, old_ms, new_ms, ratio, max_diff}`` for one model at 1 and 2 threads."""
    import kiln
    from onnx_models import alternate
    with tempfile.TemporaryDirectory() as tmp:
        fns, outs = {}, {}
        for tag, tree in (("old", old), ("new", new)):
            lib = compile_with(tree, onnx_path, os.path.join(tmp, f"{tag}.so"))
            vm = kiln.VirtualMachine(lib, kiln.cpu())
            f, args = vm["main"], [kiln.nd.array(x)]
            outs[tag] = f(*args).numpy()
            fns[tag] = (lambda f=f, args=args, vm=vm: f(*args))
        diff = float(np.abs(outs["old"].astype("float64") - outs["new"]).max())
        rows = []
        for t in (1, 2):
            kiln.set_num_threads(t)
            med = alternate(fns, rounds=rounds, per_round=calls)
            rows.append({"threads": t, "old_ms": med["old"] * 1e3, "new_ms": med["new"] * 1e3,
                         "ratio": med["new"] / med["old"], "max_diff": diff})
        kiln.set_num_threads(0)
        fns.clear()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", help="the compiler folder of the tree to compare against")
    p.add_argument("--new", default=NEW, help="the compiler folder of the new tree (this one)")
    p.add_argument("--models", nargs="*", default=[], help="names from bench/more_models.py")
    p.add_argument("--onnx", nargs="*", default=[], help="ONNX files (one float32 input)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=3)
    args = p.parse_args(argv)
    if not args.models and not args.onnx:
        p.error("give --models or --onnx")
    if args.rounds < 1 or args.calls < 1:
        p.error("--rounds and --calls must be at least 1")
    from kernel_efficiency import _input_for
    from onnx_models import cpu_name
    print(f"CPU: {cpu_name()}")
    print("| model | threads | old ms | new ms | new / old | max difference |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        sources = [(os.path.splitext(os.path.basename(f))[0], f, _input_for(f)) for f in args.onnx]
        if args.models:
            import more_models
            for name in args.models:
                path = os.path.join(tmp, f"{name}.onnx")
                sources.append((name, path, more_models.export(name, path)))
        for name, path, x in sources:
            for r in compare(args.old, args.new, path, x, args.rounds, args.calls):
                print(f"| {name} | {r['threads']} | {r['old_ms']:.3f} | {r['new_ms']:.3f} | "
                      f"{r['ratio']:.3f} | {r['max_diff']:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
