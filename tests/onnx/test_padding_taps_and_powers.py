"""ONNX graphs that this session's graph rewrites change, against onnxruntime: DeepLabV3's ASPP
(3 x 3 convs at dilation 1, 12, 24 and 36 over a 14 x 14 map, concatenated: conv_live_taps
trims and splits them), ESPCN's 9-channel conv before a pixel shuffle (pad_conv_channels), and
GPT-2's tanh GELU and RMSNorm (Pow by 3 and 2: simplify_power)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(7)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _check(nodes, x, inits, out_shape, rtol=1e-4, atol=1e-4):
    """The model of ``nodes`` (input ``x``, output ``y``): Kiln's default pipeline at one and two
    threads against onnxruntime; returns the compiled module."""
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, list(x.shape))],
                     [h.make_tensor_value_info("y", TP.FLOAT, list(out_shape))],
                     [nh.from_array(a, n) for n, a in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    mod, params = from_onnx(m)
    mod = kiln.transform.bind_params("main", params)(mod)
    out = kiln.get_pipeline("default")(mod)
    vm = kiln.VirtualMachine(kiln.compile(out, "llvm"), kiln.cpu())
    try:
        for threads in (1, 2):
            kiln.set_num_threads(threads)
            np.testing.assert_allclose(vm["main"](kiln.nd.array(x)).numpy(), want, rtol=rtol,
                                       atol=atol * max(1.0, float(np.abs(want).max())))
    finally:
        kiln.set_num_threads(0)
    return out


def test_aspp_dilated_convs_match_onnxruntime():
    c, o, hw = 48, 16, 14
    nodes, inits, parts = [], {}, []
    for i, rate in enumerate((1, 12, 24, 36)):
        inits[f"w{i}"], inits[f"b{i}"] = _rand(o, c, 3, 3, scale=0.1), _rand(o)
        nodes += [h.make_node("Conv", ["x", f"w{i}", f"b{i}"], [f"c{i}"], dilations=[rate, rate],
                              pads=[rate] * 4, kernel_shape=[3, 3]),
                  h.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        parts.append(f"r{i}")
    nodes.append(h.make_node("Concat", parts, ["y"], axis=1))
    out = _check(nodes, _rand(1, c, hw, hw), inits, (1, 4 * o, hw, hw))
    convs = [b.value for b in out["main"].bindings() if getattr(b.value, "op", None) == "call_tir"
             and "conv" in b.value.args[0].name]
    # rate 1: one conv; 12: nine bands; 24 and 36: one 1 x 1 conv each
    assert len(convs) == 1 + 9 + 1 + 1, [c.args[0].name for c in convs]


def test_a_nine_channel_conv_before_a_pixel_shuffle_matches_onnxruntime():
    inits = {"w": _rand(9, 32, 3, 3, scale=0.1), "b": _rand(9)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             h.make_node("DepthToSpace", ["c"], ["y"], blocksize=3, mode="CRD")]
    _check(nodes, _rand(1, 32, 20, 20), inits, (1, 1, 60, 60))


def test_tanh_gelu_and_rms_norm_powers_match_onnxruntime():
    c = {"three": np.array(3.0, np.float32), "k": np.array(0.044715, np.float32),
         "s": np.array(np.sqrt(2 / np.pi), np.float32), "half": np.array(0.5, np.float32),
         "one": np.array(1.0, np.float32), "two": np.array(2.0, np.float32),
         "eps": np.array(1e-6, np.float32)}
    nodes = [  # 0.5 x (1 + tanh(s (x + k x^3))), then x / sqrt(mean(x^2) + eps)
        h.make_node("Pow", ["x", "three"], ["x3"]), h.make_node("Mul", ["x3", "k"], ["kx3"]),
        h.make_node("Add", ["x", "kx3"], ["inner"]), h.make_node("Mul", ["inner", "s"], ["si"]),
        h.make_node("Tanh", ["si"], ["t"]), h.make_node("Add", ["t", "one"], ["t1"]),
        h.make_node("Mul", ["x", "t1"], ["xt"]), h.make_node("Mul", ["xt", "half"], ["g"]),
        h.make_node("Pow", ["g", "two"], ["g2"]),
        h.make_node("ReduceMean", ["g2"], ["ms"], axes=[-1], keepdims=1),
        h.make_node("Add", ["ms", "eps"], ["mse"]), h.make_node("Sqrt", ["mse"], ["rms"]),
        h.make_node("Div", ["g", "rms"], ["y"])]
    out = _check(nodes, _rand(1, 64, 256), c, (1, 64, 256))
    assert "pow" not in "".join(f.script() for f in out.functions.values() if hasattr(f, "script"))
