"""A padded conv's padding read in place against a padded copy (``schedule_conv``'s decision
``pad_inline``, fixed either way), compiled for this host and, with ``--targets``, for others
this host can run (AVX2 code on an AVX-512 core): the figures of bench/RESULTS.md, "Session
27". Each conv (conv + bias + relu, batch 1, float32) alone; rounds alternate between the two
programs, each round the kernel's time from ``vm.profile`` after 3 warm calls; medians.

    .venv/bin/python bench/conv_padding.py [--rounds 15] [--threads 1]
    .venv/bin/python bench/conv_padding.py --targets llvm "llvm -mcpu=haswell"
    .venv/bin/python bench/conv_padding.py --convs "3->32 k3 s2 p1 @224"
"""
from __future__ import annotations

import argparse
import re
import statistics
from typing import Dict, List, Tuple

import numpy as np

import kiln
from kiln.schedule.decisions import Decisions
from kiln.transform import PassContext
from kiln.transform.default_schedule import schedule_kernel

from conv import conv_module

# Stems of MobileNetV2, ResNet and a YOLO-style detector, a direct 3x3 conv, and stride-2
# 3x3 convs over blocked inputs (the form "I->O kK sS pP @HW").
CONVS = ["3->32 k3 s2 p1 @224", "3->64 k7 s2 p3 @224", "3->16 k6 s2 p2 @320",
         "64->64 k3 s1 p1 @56", "32->64 k3 s2 p1 @112", "128->128 k3 s2 p1 @28"]


def parse(spec: str) -> Tuple[int, int, int, int, int, int]:
    """"I->O kK sS pP @HW" as (I, O, K, S, P, HW)."""
    m = re.fullmatch(r"\s*(\d+)->(\d+)\s+k(\d+)\s+s(\d+)\s+p(\d+)\s+@(\d+)\s*", spec)
    if m is None:
        raise ValueError(f"not a conv spec (want 'I->O kK sS pP @HW'): {spec!r}")
    return tuple(int(g) for g in m.groups())


def spec_module(spec: str, seed: int = 0):
    """relu(conv2d(x, W) + b) for ``spec`` (``conv.conv_module``, constant weights); (module,
    input array)."""
    c, o, k, s, p, hw = parse(spec)
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((o, c, k, k)).astype("float32")
    b = rng.standard_normal(o).astype("float32")
    mod = conv_module((1, c, hw, hw), w, b, {"strides": (s, s), "padding": (p, p)})
    return mod, rng.standard_normal((1, c, hw, hw)).astype("float32")


def programs(spec: str, target: str) -> Dict[bool, Tuple[object, str]]:
    """The conv compiled for ``target`` with ``pad_inline`` fixed False and True: {decision:
    (VirtualMachine, the kernel's schedule)} (Winograd off, so the direct conv is measured)."""
    mod, _ = spec_module(spec)
    ctx = PassContext(target=target, winograd=False)
    pre = kiln.get_pipeline("default", PassContext(target=target, winograd=False,
                                                   disabled_passes=("default_schedule",)))(mod)
    out = {}
    for inline in (False, True):
        funcs, desc = dict(pre.functions), ""
        for name, f in pre.functions.items():
            if isinstance(f, kiln.ir.PrimFunc):
                funcs[name] = schedule_kernel(f, ctx, Decisions(fixed={"pad_inline": inline}))
                desc = dict(funcs[name].attrs).get("kiln.schedule", "")
        ex = kiln.compile(kiln.IRModule(funcs, pre.attrs), target)
        out[inline] = (kiln.VirtualMachine(ex, kiln.cpu()), desc)
    return out


def measure(spec: str, target: str, rounds: int, threads: int) -> dict:
    """One row: the kernel's median µs with the padded copy and read in place, their ratio,
    the largest difference between the two outputs and the in-place schedule."""
    _, x = spec_module(spec)
    progs = programs(spec, target)
    xa = kiln.nd.array(x)
    outs = {k: vm["main"](xa).numpy() for k, (vm, _) in progs.items()}
    np.testing.assert_allclose(outs[True], outs[False], rtol=1e-5, atol=1e-5)
    before = kiln.get_num_threads()
    kiln.set_num_threads(threads)
    times: Dict[bool, List[float]] = {k: [] for k in progs}
    try:
        for _ in range(rounds):
            for k, (vm, _) in progs.items():
                for _ in range(3):
                    vm["main"](xa)
                times[k].append(vm.profile("main", xa).total_us)
    finally:
        kiln.set_num_threads(before)
    copy, inplace = (statistics.median(times[k]) for k in (False, True))
    return {"conv": spec, "target": target, "copy_us": copy, "inplace_us": inplace,
            "ratio": inplace / copy, "max_diff": float(np.abs(outs[True] - outs[False]).max()),
            "schedule": progs[True][1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--convs", nargs="*", default=CONVS, help="'I->O kK sS pP @HW' specs")
    ap.add_argument("--targets", nargs="*", default=["llvm"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    print("| conv | target | padded copy us | in place us | in place / copy | schedule (in place) |")
    print("|---|---|---|---|---|---|")
    for target in args.targets:
        for spec in args.convs:
            r = measure(spec, target, args.rounds, args.threads)
            print(f"| {spec} | {target} | {r['copy_us']:.0f} | {r['inplace_us']:.0f} | "
                  f"{r['ratio']:.3f} | {r['schedule']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
