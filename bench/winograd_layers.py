"""ResNet-18's 3x3 stride-1 conv layers (conv + bias + relu, batch 1, float32, one thread):
the direct conv of Kiln's "default" pipeline against Winograd F(4x4, 3x3)
(``transform/conv_winograd.py``, forced on), with the cost rule's estimates beside them.
Rounds alternate between the two (a round: the best of 5 calls); each reports the median of
its rounds (``speedup``: of the medians, ``best_speedup``: of the best rounds), and the Winograd
kernels' share (input transform, contraction, output transform) from ``vm.profile``.

    .venv/bin/python bench/winograd_layers.py [--rounds 15]
    .venv/bin/python bench/winograd_layers.py '64->32@224' --fuse off   # three kernels
    .venv/bin/python bench/winograd_layers.py '64->32@224' --fuse on    # one (fuse_winograd)
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


def compile_fn(mod, winograd: bool, tile: int = 4, fuse: str = "rule"):
    """``mod`` through the default pipeline, Winograd F(tile) forced on when ``winograd``, off
    otherwise (the default pipeline's cost rule would pick it for these layers); ``fuse``: its
    stages as one kernel (``"on"``), as three (``"off"``), or as ``fuse_winograd``'s rule
    decides (``"rule"``)."""
    off = ("fuse_winograd",) if fuse == "off" else ()
    pipe = kiln.get_pipeline("default", kiln.transform.PassContext(winograd=winograd,
                                                                   disabled_passes=off))
    if winograd:
        forced = -tile if fuse == "on" else tile     # (-m: conv_winograd's "F(m) fused")
        pipe = with_winograd(pipe, choose=lambda call, plan: forced)
    out = pipe(mod)
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    return vm, out


def layer(name: str):
    """A layer of bench/conv.py's LAYERS, or ``"C@H"`` / ``"C->O@H"`` / ``"NxC@H"``: a 3x3
    stride-1 pad-1 conv over an H x H image (batch N)."""
    if name in LAYERS:
        return LAYERS[name]
    n, _, rest = name.rpartition("x")
    chans, size = rest.split("@")
    c, _, o = chans.partition("->")
    n, c, o, size = int(n or 1), int(c), int(o or c), int(size)
    return (n, c, size, size), (o, c, 3, 3), {"padding": (1, 1)}


def _stage(kernel: str) -> str:
    for stage in ("input", "gemm", "output", "conv"):
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


def run(names=None, rounds: int = 15, tile: int = 4, fuse: str = "rule") -> list[dict]:
    kiln.set_num_threads(1)
    rows = []
    for name in names or RESNET:
        x_shape, w_shape, attrs = layer(name)
        rng = np.random.default_rng(0)
        w = (rng.standard_normal(w_shape) / np.sqrt(9 * w_shape[1])).astype("float32")
        b = rng.standard_normal(w_shape[0]).astype("float32")
        x = rng.standard_normal(x_shape).astype("float32")
        mod = conv_module(x_shape, w, b, attrs)
        vm_d, _ = compile_fn(mod, False)
        vm_w, mod_w = compile_fn(mod, True, tile, fuse)
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
        call = next(bd.value for bd in mod["main"].bindings()
                    if getattr(bd.value, "op", "") == "conv2d")
        plan = conv_plan(call, ctx=kiln.transform.PassContext())
        rows.append({"layer": name, "tile": tile, "fused": any("winograd_conv" in k for k in prof),
                     "direct_ms": statistics.median(t_d) * 1e3,
                     "winograd_ms": statistics.median(t_w) * 1e3,
                     "speedup": statistics.median(t_d) / statistics.median(t_w),
                     "best_speedup": min(t_d) / min(t_w),
                     "est_speedup": plan.speedup(tile), "rule": plan.choice(),
                     "max_rel_err": f"{err:.1e}",
                     "kernels_ms": ", ".join(f"{k} {v:.3f}" for k, v in share.items())})
    kiln.set_num_threads(0)
    return rows


def resnet18(rounds: int = 10) -> dict:
    """The whole ResNet-18 of examples/resnet18_onnx.py (seeded weights, from ONNX), batch 1, one
    thread: the default pipeline against it with ``conv_winograd`` (cost rule), and both
    against onnxruntime (one thread)."""
    import os
    import sys
    import tempfile
    import warnings

    import onnx
    import onnxruntime as ort
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from resnet18_onnx import ResNet18, image

    torch.manual_seed(0)
    model = ResNet18().eval()
    x = image()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet18.onnx")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (torch.from_numpy(x),), path, input_names=["x"],
                              output_names=["logits"], opset_version=17, dynamo=False)
        proto = onnx.load(path)
        proto.ir_version = 10
        mod, params = kiln.frontend.from_onnx(proto)
        mod = kiln.transform.bind_params("main", params)(mod)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    chosen = []

    def choose(call, plan):
        tile = plan.choice()
        chosen.append((tuple(call.args[0].ty.static_shape()[1:]), tile))
        return tile
    t0 = time.perf_counter()
    direct = kiln.get_pipeline("default")(mod)
    t_cd = time.perf_counter() - t0
    t0 = time.perf_counter()
    wino = with_winograd(kiln.get_pipeline("default"), choose=choose)(mod)
    t_cw = time.perf_counter() - t0
    kiln.set_num_threads(1)
    f_d = kiln.VirtualMachine(kiln.compile(direct, target="llvm"), kiln.cpu())["main"]
    f_w = kiln.VirtualMachine(kiln.compile(wino, target="llvm"), kiln.cpu())["main"]
    xa = kiln.nd.array(x)
    y_d, y_w = f_d(xa).numpy(), f_w(xa).numpy()
    y_o = sess.run(None, {"x": x})[0]
    t_d, t_w, t_o = [], [], []
    for _ in range(rounds):
        t_d.append(_time(lambda: f_d(xa), 3))
        t_w.append(_time(lambda: f_w(xa), 3))
        t_o.append(_time(lambda: sess.run(None, {"x": x}), 3))
    kiln.set_num_threads(0)
    scale = np.abs(y_d).max()
    return {"direct_ms": statistics.median(t_d) * 1e3, "winograd_ms": statistics.median(t_w) * 1e3,
            "ort_ms": statistics.median(t_o) * 1e3,
            "speedup": statistics.median(t_d) / statistics.median(t_w),
            "winograd_vs_direct_max_abs": float(np.abs(y_w - y_d).max()),
            "logit_scale": float(scale),
            "winograd_vs_ort_max_abs": float(np.abs(y_w - y_o).max()),
            "direct_vs_ort_max_abs": float(np.abs(y_d - y_o).max()),
            "top1_same": int(y_w.argmax()) == int(y_o.argmax()) == int(y_d.argmax()),
            "pipeline_s": f"{t_cd:.1f} / {t_cw:.1f}",
            "choices": sorted(set(chosen))}


if __name__ == "__main__":
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from harness import table
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tile", type=int, default=4, help="m of F(m x m, 3 x 3)")
    ap.add_argument("--fuse", choices=("rule", "on", "off"), default="rule",
                    help="the Winograd stages as one kernel (on), three (off), or by the rule")
    ap.add_argument("--resnet18", action="store_true", help="the whole model instead of layers")
    ap.add_argument("layers", nargs="*")
    args = ap.parse_args()
    if args.resnet18:
        for k, v in resnet18(args.rounds).items():
            print(f"{k}: {v}")
    else:
        print(table(run(args.layers or None, args.rounds, args.tile, args.fuse)))
