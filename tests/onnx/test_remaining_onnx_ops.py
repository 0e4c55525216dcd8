"""ONNX operators of the last backend-test gaps, each against onnxruntime where it has a kernel
(else onnx's reference evaluator): BatchNormalization in training mode, Dropout in training mode
with ratio 0, ConvInteger / MatMulInteger / QLinearConv, Det, MaxPool's Indices, RoiAlign, DeformConv,
MelWeightMatrix, 3-D ConvTranspose, QuantizeLinear to uint16."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(13)
ELEM = {np.dtype(np.float32): TP.FLOAT, np.dtype(np.float64): TP.DOUBLE, np.dtype(np.int64): TP.INT64,
        np.dtype(np.int32): TP.INT32, np.dtype(np.uint8): TP.UINT8, np.dtype(np.int8): TP.INT8,
        np.dtype(np.uint16): TP.UINT16,
        np.dtype(np.bool_): TP.BOOL}


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(node, feeds, out_types, opset=21, inits=(), rtol=1e-5, atol=1e-5, reference=False):
    """One-node model; Kiln's outputs equal onnxruntime's (or onnx's reference evaluator's)."""
    ins = [h.make_tensor_value_info(k, ELEM[v.dtype], list(v.shape)) for k, v in feeds.items()]
    outs = [h.make_tensor_value_info(o, t, None) for o, t in zip(node.output, out_types)]
    m = h.make_model(h.make_graph([node], "g", ins, outs, [nh.from_array(np.asarray(a), n) for n, a in inits]),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    if reference:
        want = ReferenceEvaluator(m).run(None, feeds)
    else:
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    mod, params = from_onnx(m)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    got = vm["main"](*feeds.values())
    got = [g.numpy() for g in (got if isinstance(got, (list, tuple)) else [got])]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_batch_norm_training_mode():
    feeds = {"x": rand(4, 3, 5), "s": rand(3), "b": rand(3), "m": rand(3), "v": np.abs(rand(3))}
    node = h.make_node("BatchNormalization", list(feeds), ["y", "rm", "rv"], training_mode=1, momentum=0.8,
                       epsilon=1e-3)
    check(node, feeds, [TP.FLOAT] * 3, opset=15, reference=True)


def test_dropout_training_zero_ratio():
    x = rand(2, 5)
    node = h.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=3)
    check(node, {"x": x}, [TP.FLOAT, TP.BOOL], opset=13,
          inits=[("r", np.float32(0)), ("t", np.bool_(True))])


def test_conv_integer_per_channel_zero_point_strided():
    x = RNG.integers(0, 256, (1, 2, 6, 7)).astype(np.uint8)
    w = RNG.integers(0, 256, (3, 2, 3, 2)).astype(np.uint8)
    feeds = {"x": x, "w": w, "xz": np.array(120, np.uint8), "wz": np.array([3, 128, 250], np.uint8)}
    node = h.make_node("ConvInteger", list(feeds), ["y"], pads=[1, 0, 1, 1], strides=[2, 1])
    # onnxruntime's ConvInteger takes one weight zero point only
    check(node, feeds, [TP.INT32], opset=10, rtol=0, atol=0, reference=True)


def test_matmul_integer_per_column_zero_point():
    a = RNG.integers(-128, 128, (2, 4, 5)).astype(np.int8)
    b = RNG.integers(0, 256, (5, 3)).astype(np.uint8)
    feeds = {"a": a, "b": b, "az": np.array(-3, np.int8), "bz": np.array([128, 0, 255], np.uint8)}
    node = h.make_node("MatMulInteger", list(feeds), ["y"])
    check(node, feeds, [TP.INT32], opset=10, rtol=0, atol=0)


def test_qlinear_conv_per_channel_scale_and_bias():
    x = RNG.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)
    feeds = {"x": x, "xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8), "w": w,
             "ws": np.array([0.01, 0.02, 0.005], np.float32), "wz": np.array([0, 0, 0], np.int8),
             "ys": np.array(0.3, np.float32), "yz": np.array(100, np.uint8), "b": np.array([50, -400, 1000], np.int32)}
    node = h.make_node("QLinearConv", list(feeds), ["y"], pads=[1, 1, 1, 1])
    check(node, feeds, [TP.UINT8], opset=10, rtol=0, atol=1)


@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 4, 4), (1, 1)])
def test_det(shape):
    x = rand(*shape)
    check(h.make_node("Det", ["x"], ["y"]), {"x": x}, [TP.FLOAT], rtol=1e-4, atol=1e-5)


def test_det_singular_and_needs_pivoting():
    x = np.array([[[1, 2, 3], [2, 4, 6], [0, 1, 1]],         # singular: rows 0 and 1 parallel
                  [[0, 1, 2], [3, 0, 1], [1, 1, 0]],         # a zero first pivot: a row swap
                  [[0, 0, 1], [0, 1, 0], [1, 0, 0]]], np.float32)
    check(h.make_node("Det", ["x"], ["y"]), {"x": x}, [TP.FLOAT], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,attrs", [
    ((2, 3, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])),
    ((1, 2, 6, 6), dict(kernel_shape=[2, 2], dilations=[2, 1], ceil_mode=1, strides=[2, 2])),
    ((1, 2, 5, 4), dict(kernel_shape=[2, 3], storage_order=1)),
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
])
def test_max_pool_indices(shape, attrs):
    x = rand(*shape)
    check(h.make_node("MaxPool", ["x"], ["y", "i"], **attrs), {"x": x}, [TP.FLOAT, TP.INT64], opset=12)


@pytest.mark.parametrize("mode,ctm", [("avg", "half_pixel"), ("avg", "output_half_pixel"), ("max", "half_pixel")])
def test_roi_align(mode, ctm):
    x = rand(2, 3, 8, 9)
    rois = np.array([[0.5, 1.0, 12.0, 10.0], [-3.0, -2.0, 4.0, 3.5], [10.0, 12.0, 20.0, 18.0],
                     [2.0, 2.0, 2.5, 2.2]], np.float32)     # inside, across the top-left, past the map, tiny
    feeds = {"x": x, "rois": rois, "b": np.array([1, 0, 1, 0], np.int64)}
    node = h.make_node("RoiAlign", list(feeds), ["y"], mode=mode, coordinate_transformation_mode=ctm,
                       output_height=3, output_width=4, sampling_ratio=2, spatial_scale=0.5)
    check(node, feeds, [TP.FLOAT], opset=16, rtol=1e-5, atol=1e-5)


def test_deform_conv_groups_strides_mask():
    n, c, ih, iw, oc, kh, kw = 2, 4, 7, 6, 6, 3, 2
    attrs = dict(group=2, offset_group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 1, 1, 0])
    oh = (ih + 2 - kh) // 2 + 1
    ow = iw + 1 - ((kw - 1) * 2 + 1) + 1
    feeds = {"x": rand(n, c, ih, iw), "w": rand(oc, c // 2, kh, kw),
             "off": 1.5 * rand(n, 2 * kh * kw * 2, oh, ow), "b": rand(oc)}
    feeds["m"] = np.abs(rand(n, 2 * kh * kw, oh, ow))
    check(h.make_node("DeformConv", list(feeds), ["y"], **attrs), feeds, [TP.FLOAT], opset=19, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("args", [(8, 16, 8192, 0.0, 4096.0), (5, 64, 16000, 100.0, 7000.0)])
def test_mel_weight_matrix(args):
    names = ["bins", "n_fft", "rate", "lo", "hi"]
    inits = [(n, np.array(v, np.int32 if i < 3 else np.float32)) for i, (n, v) in enumerate(zip(names, args))]
    node = h.make_node("MelWeightMatrix", names, ["m"])
    x = rand(3, args[1] // 2 + 1)  # a spectrogram for the bank to map: the graph's run-time input
    m = h.make_model(h.make_graph([node, h.make_node("MatMul", ["x", "m"], ["y"])], "g",
                                  [h.make_tensor_value_info("x", TP.FLOAT, list(x.shape))],
                                  [h.make_tensor_value_info("y", TP.FLOAT, None)],
                                  [nh.from_array(v, n) for n, v in inits]),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    mod, params = from_onnx(m)
    mod = kiln.transform.bind_params("main", params)(mod) if params else mod
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    np.testing.assert_allclose(vm["main"](x).numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1], output_padding=[1, 0, 0], group=2),
    dict(dilations=[2, 1, 1], auto_pad="SAME_UPPER", strides=[1, 2, 1]),
])
def test_conv_transpose_3d(attrs):
    feeds = {"x": rand(1, 4, 3, 4, 3), "w": rand(4, 3, 3, 2, 2), "b": rand(3 * attrs.get("group", 1))}
    check(h.make_node("ConvTranspose", list(feeds), ["y"], **attrs), feeds, [TP.FLOAT], opset=11,
          rtol=1e-4, atol=1e-4)


def test_quantize_linear_uint16_saturates():
    x = np.concatenate([rand(10) * 3000, [-5.0, 1e6]]).astype(np.float32)
    feeds = {"x": x, "s": np.array(0.25, np.float32), "z": np.array(30000, np.uint16)}
    check(h.make_node("QuantizeLinear", list(feeds), ["y"]), feeds, [TP.UINT16], opset=21, rtol=0, atol=0)
