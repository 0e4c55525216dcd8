"""Channel-blocked activations (``transform/layout_nchwc.py``, docs/layout.md): with and without
the pass, in one process, rounds alternating (``onnx_models.alternate``), medians, one thread.

- layers: MobileNetV2's depthwise convs (conv + bias + clip, batch 1): the NCHW program of the
  default pipeline without the pass (its input NCHW) against ``depthwise_conv2d_nchwc`` (its
  input already blocked, as the pass leaves it between convs);
- models: ResNet-18 and MobileNetV2 (tests/onnx_models/onnx_model_zoo.py, opset 17) through
  the "default" pipeline with ``PassContext(nchwc_layout=True / False)``, and onnxruntime.

    .venv/bin/python bench/nchwc.py [--layers] [--models resnet18,mobilenet_v2] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

import kiln
from kiln import ops
from kiln.ir import FunctionBuilder, GraphVar, IRModule
from kiln.ir.graph import Constant, TensorType
from kiln.ops.nchwc import pack_depthwise_weight, to_blocked
from kiln.transform import PassContext

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "onnx_models"))

from onnx_models import alternate  # noqa: E402

# (channels, input size, stride, channel block) of MobileNetV2's depthwise layers, with the
# block the pass gives them on an AVX-512 host (on AVX2: 16 and 8).
DEPTHWISE = [(32, 112, 1, 32), (96, 112, 2, 32), (144, 56, 1, 16), (144, 56, 2, 16),
             (192, 28, 1, 32), (192, 28, 2, 32), (384, 14, 1, 32), (576, 14, 1, 32),
             (576, 14, 2, 32), (960, 7, 1, 32)]


def _graph(x_ty, body) -> IRModule:
    x = GraphVar("x", x_ty)
    fb = FunctionBuilder([x])
    with fb.dataflow():
        out = fb.emit_output(body(lambda op, *a, **k: fb.emit(ops.call(op, *a, **k)), x))
    return IRModule({"main": fb.finish(out)})


def depthwise_modules(c: int, size: int, stride: int, block: int):
    """(NCHW module, blocked module) of ``clip(depthwise_conv(x) + b)``."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((c, 1, 3, 3)).astype("float32")
    bias = rng.standard_normal((1, c, 1, 1)).astype("float32")
    nchw = _graph(TensorType((1, c, size, size), "float32"), lambda e, x: ops.call(
        "clip", e("add", e("conv2d", x, Constant(w), padding=(1, 1), strides=(stride, stride),
                           groups=c), Constant(bias)), min=0.0, max=6.0))
    blocked = _graph(TensorType((1, c // block, size, size, block), "float32"), lambda e, x: ops.call(
        "clip", e("add", e("depthwise_conv2d_nchwc", x, Constant(pack_depthwise_weight(w, block)),
                           padding=(1, 1), strides=(stride, stride)),
                  Constant(to_blocked(bias, block))), min=0.0, max=6.0))
    return nchw, blocked


def _vm(mod, ctx):
    out = kiln.get_pipeline("default", ctx)(mod)
    return kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())["main"]


def layers(rounds: int = 7) -> list:
    kiln.set_num_threads(1)
    rows = []
    for c, size, stride, block in DEPTHWISE:
        nchw, blocked = depthwise_modules(c, size, stride, block)
        x = np.random.default_rng(1).standard_normal((1, c, size, size)).astype("float32")
        xn, xb = kiln.nd.array(x), kiln.nd.array(to_blocked(x, block))
        f_n = _vm(nchw, PassContext(nchwc_layout=False))
        f_b = _vm(blocked, PassContext())
        np.testing.assert_allclose(f_b(xb).numpy(), to_blocked(f_n(xn).numpy(), block),
                                   rtol=1e-4, atol=1e-4)
        med = alternate({"nchw": lambda: f_n(xn), "blocked": lambda: f_b(xb)}, rounds=rounds,
                        per_round=20, settle_s=0.05)
        rows.append({"layer": f"dw 3x3 {c} @{size} s{stride}", "nchw_ms": med["nchw"] * 1e3,
                     "nchwc_ms": med["blocked"] * 1e3, "speedup": med["nchw"] / med["blocked"]})
    kiln.set_num_threads(0)
    return rows


def models(names=("resnet18", "mobilenet_v2"), threads: int = 1, rounds: int = 9) -> list:
    import onnx
    import onnx_model_zoo as zoo
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = zoo.export(name, os.path.join(tmp, f"{name}.onnx"))
            inputs = zoo.example_inputs(name)
            args = [kiln.nd.array(v) for v in inputs.values()]
            sess = zoo.ort_session(path, threads=threads)
            want = sess.run(None, inputs)[0]
            fns = {}
            for label, on in (("nchwc", True), ("nchw", False)):
                mod, params = kiln.frontend.from_onnx(onnx.load(path))
                mod = kiln.transform.bind_params("main", params)(mod)
                f = _vm(mod, PassContext(nchwc_layout=on))
                np.testing.assert_allclose(f(*args).numpy(), want, rtol=1e-4, atol=1e-4)
                fns[label] = (lambda f: lambda: f(*args))(f)
            fns["ort"] = lambda: sess.run(None, inputs)
            kiln.set_num_threads(threads)
            med = alternate(fns, rounds=rounds)
            kiln.set_num_threads(0)
            rows.append({"model": name, "threads": threads, "nchwc_ms": med["nchwc"] * 1e3,
                         "nchw_ms": med["nchw"] * 1e3, "ort_ms": med["ort"] * 1e3,
                         "speedup": med["nchw"] / med["nchwc"],
                         "nchwc/ort": med["nchwc"] / med["ort"], "nchw/ort": med["nchw"] / med["ort"]})
    return rows


def _print(rows):
    for r in rows:
        print("  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in r.items()), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", action="store_true", help="the depthwise layers")
    ap.add_argument("--models", default="", help="comma-separated zoo models")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    from onnx_models import cpu_name
    print(f"# {cpu_name()}")
    if a.layers or not a.models:
        _print(layers(a.rounds))
    if a.models:
        _print(models(tuple(a.models.split(",")), a.threads, a.rounds))
