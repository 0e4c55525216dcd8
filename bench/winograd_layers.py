"""ResNet-18's 3x3 stride-1 conv layers (conv + bias + relu, batch 1, float32, one thread):
the direct conv of Kiln's "default" pipeline against Winograd F(4x4, 3x3)
(``transform/conv_winograd.py``, forced on), with the cost rule's estimates beside them.
Rounds alternate between the two (a round: the best of 5 calls); each reports the median of
its rounds (``speedup``: of the medians, ``best_speedup``: of the best rounds), and the Winograd
kernels' share (input transform, contraction, output transform) from ``vm.profile``.

    .venv/bin/python bench/winograd_layers.py [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import kiln
from kiln.transform.conv_winograd import conv_plan, with_winograd

from conv import LAYERS, conv_module

RESNET = ["resnet 3x3 64 @56", "resnet 3x3 128 @28", "resnet 3x3 256 @14", "resnet 3x3 512 @7"]


def compile_fn(mod, winograd: bool, tile: int = 4):
    pipe = kiln.get_pipeline("default")
    if winograd:
        pipe = with_winograd(pipe, choose=lambda call, plan: tile)
    out = pipe(mod)
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    return vm, out


def _stage(kernel: str) -> str:
    for stage in ("input", "gemm", "output"):
        if f"winograd_{stage}" in kernel:
            return stage
    return kernel


def _time(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run(names=None, rounds: int = 15, tile: int = 4) -> list[dict]:
    kiln.set_num_threads(1)
    rows = []
    for name in names or RESNET:
        x_shape, w_shape, attrs = LAYERS[name]
        rng = np.random.default_rng(0)
        w = (rng.standard_normal(w_shape) / np.sqrt(9 * w_shape[1])).astype("float32")
        b = rng.standard_normal(w_shape[0]).astype("float32")
        x = rng.standard_normal(x_shape).astype("float32")
        mod = conv_module(x_shape, w, b, attrs)
        vm_d, _ = compile_fn(mod, False)
        vm_w, mod_w = compile_fn(mod, True, tile)
        xa = kiln.nd.array(x)
        f_d, f_w = vm_d["main"], vm_w["main"]
        yd, yw = f_d(xa).numpy(), f_w(xa).numpy()
        err = float(np.abs(yd - yw).max() / max(1e-30, np.abs(yd).max()))
        t_d, t_w = [], []
        reps = 5
        for _ in range(rounds):
            t_d.append(_time(lambda: f_d(xa), reps))
            t_w.append(_time(lambda: f_w(xa), reps))
        prof = {}
        for _ in range(5):
            for k, us in vm_w.profile("main", xa).kernels.items():
                prof.setdefault(k, []).append(us)
        share = {_stage(k): statistics.median(v) / 1e3 for k, v in prof.items()}
        call = next(bd.value for bd in mod["main"].bindings() if getattr(bd.value, "op", "") == "conv2d")
        plan = conv_plan(call)
        rows.append({"layer": name, "tile": tile, "direct_ms": statistics.median(t_d) * 1e3,
                     "winograd_ms": statistics.median(t_w) * 1e3,
                     "speedup": statistics.median(t_d) / statistics.median(t_w),
                     "best_speedup": min(t_d) / min(t_w),
                     "est_speedup": plan.speedup(tile), "rule": plan.choice(), "max_rel_err": f"{err:.1e}",
                     "kernels_ms": ", ".join(f"{k} {v:.3f}" for k, v in share.items())})
    kiln.set_num_threads(0)
    return rows


if __name__ == "__main__":
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from harness import table
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tile", type=int, default=4, help="m of F(m x m, 3 x 3)")
    ap.add_argument("layers", nargs="*")
    args = ap.parse_args()
    print(table(run(args.layers or None, args.rounds, args.tile)))
