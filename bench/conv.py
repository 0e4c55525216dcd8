"""Single conv2d layers of ResNet-18 and MobileNetV2 (conv + bias + relu, batch 1, float32)
through Kiln's "default" pipeline, against onnxruntime running the same Conv + Relu, in the
same process; one thread. ``schedule`` says which conv schedule Kiln picked: ``conv nchwc``
(channel-blocked, ``transform/conv_blocked.py``) or ``conv`` (NCHW, vectorized along the
width); ``nchw_ms`` is Kiln with ``PassContext(conv_blocking=False)`` and ``avx2_tiles_ms`` Kiln
scheduled for an AVX2 target, for comparison.
"""
from __future__ import annotations

import numpy as np

import kiln
from kiln import ops
from kiln.ir import FunctionBuilder, GraphVar, IRModule, TensorType
from kiln.ir.graph import Constant

# name: (input shape, weight shape, attrs)
LAYERS = {
    "resnet stem 7x7/2": ((1, 3, 224, 224), (64, 3, 7, 7), {"strides": (2, 2), "padding": (3, 3)}),
    "resnet 3x3 64 @56": ((1, 64, 56, 56), (64, 64, 3, 3), {"padding": (1, 1)}),
    "resnet 3x3/2 64->128": ((1, 64, 56, 56), (128, 64, 3, 3), {"strides": (2, 2), "padding": (1, 1)}),
    "resnet 3x3 128 @28": ((1, 128, 28, 28), (128, 128, 3, 3), {"padding": (1, 1)}),
    "resnet 3x3 256 @14": ((1, 256, 14, 14), (256, 256, 3, 3), {"padding": (1, 1)}),
    "resnet 3x3 512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), {"padding": (1, 1)}),
    "mobilenet dw 3x3 32 @112": ((1, 32, 112, 112), (32, 1, 3, 3), {"padding": (1, 1), "groups": 32}),
    "mobilenet dw 3x3/2 96 @112": ((1, 96, 112, 112), (96, 1, 3, 3),
                                   {"strides": (2, 2), "padding": (1, 1), "groups": 96}),
    "mobilenet dw 3x3 384 @14": ((1, 384, 14, 14), (384, 1, 3, 3), {"padding": (1, 1), "groups": 384}),
    "mobilenet 1x1 16->96 @112": ((1, 16, 112, 112), (96, 16, 1, 1), {}),
    "mobilenet 1x1 144->24 @56": ((1, 144, 56, 56), (24, 144, 1, 1), {}),
    "mobilenet 1x1 384->64 @14": ((1, 384, 14, 14), (64, 384, 1, 1), {}),
    "mobilenet 1x1 320->1280 @7": ((1, 320, 7, 7), (1280, 320, 1, 1), {}),
    "mobilenet 1x1 160->960 @7": ((1, 160, 7, 7), (960, 160, 1, 1), {}),
    "mobilenet 1x1 576->96 @14": ((1, 576, 14, 14), (96, 576, 1, 1), {}),
}


def conv_module(x_shape, w, b, attrs) -> IRModule:
    """relu(conv2d(x, w) + b) with constant ``w`` and ``b``."""
    x = GraphVar("x", TensorType(tuple(x_shape), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit(ops.call("conv2d", x, Constant(w), **attrs))
        y = fb.emit(ops.call("add", y, Constant(b.reshape(1, -1, 1, 1))))
        out = fb.emit_output(ops.call("relu", y))
    return IRModule({"main": fb.finish(out)})


def ort_session(x_shape, w, b, attrs):
    """An onnxruntime session (one thread) running Conv + Relu with the same weights."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    pads = list(attrs.get("padding", (0, 0)))
    pads = pads * 2 if len(pads) == 2 else pads
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=list(attrs.get("strides", (1, 1))),
                            pads=pads, group=attrs.get("groups", 1))
    graph = helper.make_graph(
        [conv, helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _compile(mod, ctx=None):
    target = ctx.target if ctx is not None and ctx.target is not None else "llvm"
    out = kiln.get_pipeline("default", ctx)(mod)
    name = next(n for n, f in out.functions.items() if n != "main" and hasattr(f, "params"))
    vm = kiln.VirtualMachine(kiln.compile(out, target=target), kiln.cpu())
    return vm["main"], dict(out[name].attrs)["kiln.schedule"]


# An AVX2 target, which every x86 CPU here runs: the tiles Kiln used before they were derived
# from the target (16 ymm registers), for comparison on a wider machine.
AVX2 = "llvm -mcpu=haswell"


def run(names=None, repeat: int = 20) -> list[dict]:
    """One row per layer: Kiln with this machine's tiles (``kiln_ms``), with AVX2 tiles
    (``avx2_tiles_ms``), in NCHW without channel blocking (``nchw_ms``), and onnxruntime,
    timed in alternating rounds (medians), one thread. Winograd is off here (a direct-conv
    comparison; ``bench/winograd_layers.py`` measures it)."""
    from onnx_models import alternate

    kiln.set_num_threads(1)
    PassContext = kiln.transform.PassContext
    rows = []
    for name in names or LAYERS:
        x_shape, w_shape, attrs = LAYERS[name]
        rng = np.random.default_rng(0)
        w = rng.standard_normal(w_shape).astype("float32")
        b = rng.standard_normal(w_shape[0]).astype("float32")
        x = rng.standard_normal(x_shape).astype("float32")
        mod = conv_module(x_shape, w, b, attrs)
        f, schedule = _compile(mod, PassContext(winograd=False))
        f_avx2, _ = _compile(mod, PassContext(target=AVX2, winograd=False))
        f_nchw, _ = _compile(mod, PassContext(conv_blocking=False, winograd=False))
        sess = ort_session(x_shape, w, b, attrs)
        xa = kiln.nd.array(x)
        want = sess.run(None, {"x": x})[0]
        for g in (f, f_avx2, f_nchw):
            np.testing.assert_allclose(g(xa).numpy(), want, rtol=1e-3, atol=1e-3)
        flops = 2.0 * want.size * int(np.prod(w_shape[1:]))
        med = alternate({"kiln": lambda: f(xa), "avx2": lambda: f_avx2(xa),
                         "nchw": lambda: f_nchw(xa), "ort": lambda: sess.run(None, {"x": x})},
                        per_round=repeat)
        rows.append({"layer": name, "schedule": schedule.split(",")[0],
                     "kiln_ms": med["kiln"] * 1e3, "avx2_tiles_ms": med["avx2"] * 1e3,
                     "nchw_ms": med["nchw"] * 1e3, "ort_ms": med["ort"] * 1e3,
                     "gflops": flops / med["kiln"] / 1e9, "kiln/ort": med["kiln"] / med["ort"]})
    kiln.set_num_threads(0)
    return rows
