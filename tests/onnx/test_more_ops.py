"""Operators the ONNX backend node tests cover thinly, on onnx.helper graphs against
onnxruntime: Einsum (ellipsis broadcasting, three operands), GatherND/ScatterND with batch
dims and slices, ScatterElements, 3-D pooling, Resize through the general decomposition
(cubic, antialias, 3-D input), CumProd, LRN, ReverseSequence."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

F, I64 = TP.FLOAT, TP.INT64
RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_both(node, feeds, inits=(), opset=18, rtol=1e-4, atol=1e-4, out_type=F):
    """One-node model: feeds are graph inputs, inits initializers; compare Kiln with ORT."""
    ins = [h.make_tensor_value_info(k, F if v.dtype == np.float32 else I64, list(v.shape))
           for k, v in feeds.items()]
    g = h.make_graph([node], "g", ins, [h.make_tensor_value_info(o, out_type, None) for o in node.output],
                     [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    mod, params = from_onnx(m)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    out = vm["main"](*feeds.values())
    got = out if isinstance(out, (list, tuple)) else [out]
    assert len(got) == len(want), f"{len(got)} outputs, onnxruntime gives {len(want)}"
    for g_, w in zip(got, want):
        g_ = np.asarray(g_.numpy() if hasattr(g_, "numpy") else g_)
        assert g_.shape == w.shape and g_.dtype == w.dtype, (g_.shape, g_.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("eq,shapes", [
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (2, 5, 4, 2)]),
    ("...ij,jk", [(2, 3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("iij->j", [(3, 3, 4)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("ab,cd", [(2, 3), (4, 5)]),
])
def test_einsum(eq, shapes):
    feeds = {f"x{k}": rand(*s) for k, s in enumerate(shapes)}
    run_both(h.make_node("Einsum", list(feeds), ["y"], equation=eq), feeds, opset=12)


def test_gathernd_batch_dims_and_slices():
    data = rand(2, 3, 4, 5)
    idx = np.array([[[1, -1], [0, 2]], [[2, 3], [1, 0]]], np.int64)        # (2, 2, 2): batch 2
    run_both(h.make_node("GatherND", ["d", "i"], ["y"], batch_dims=1), {"d": data, "i": idx})


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatternd_slices(reduction):
    data, upd = rand(5, 3, 2), rand(2, 3, 2)
    idx = np.array([[4], [1]], np.int64)
    run_both(h.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction),
             {"d": data, "i": idx, "u": upd})


def test_scatter_elements_axis1_add():
    data, upd = rand(3, 5), rand(3, 2)
    idx = np.array([[0, 4], [1, 1], [-1, 2]], np.int64)
    run_both(h.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="add"),
             {"d": data, "i": idx, "u": upd})


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 2, 2], strides=[2, 1, 2], pads=[1, 1, 0, 1, 0, 1], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 2, 3], pads=[1, 1, 1, 0, 0, 1], count_include_pad=1)),
])
def test_pool_3d(op, attrs):
    run_both(h.make_node(op, ["x"], ["y"], **attrs), {"x": rand(2, 3, 5, 6, 7)})


@pytest.mark.parametrize("attrs,scales,sizes", [
    (dict(mode="cubic"), [1, 1, 1.7, 0.6], None),
    (dict(mode="cubic", coordinate_transformation_mode="align_corners", cubic_coeff_a=-0.5),
     None, [1, 2, 9, 5]),
    (dict(mode="linear", antialias=1), [1, 1, 0.5, 0.4], None),
    (dict(mode="linear"), [1, 1, 1.5, 2.0, 0.75], None),                        # 3-D spatial input
    (dict(mode="nearest", nearest_mode="floor"), [1, 1, 0.7, 1.3], None),
])
def test_resize_general(attrs, scales, sizes):
    rank = len(scales or sizes)
    x = rand(*([1, 2, 6, 8, 4][:rank]))
    inits = [("roi", np.zeros(0, np.float32))]
    names = ["x", "roi"]
    if scales is not None:
        inits.append(("scales", np.asarray(scales, np.float32)))
        names.append("scales")
    else:
        inits.append(("scales", np.zeros(0, np.float32)))
        inits.append(("sizes", np.asarray(sizes, np.int64)))
        names += ["scales", "sizes"]
    run_both(h.make_node("Resize", names, ["y"], **attrs), {"x": x}, inits)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumprod(exclusive, reverse):
    run_both(h.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse),
             {"x": rand(3, 4)}, [("axis", np.array(0, np.int64))], opset=26)


def test_lrn():
    node = h.make_node("LRN", ["x"], ["y"], size=5, alpha=0.01, beta=0.6, bias=1.5)
    run_both(node, {"x": rand(2, 6, 3, 3)})


def test_reverse_sequence_batch_first():
    lens = np.array([1, 3, 4], np.int64)
    run_both(h.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1),
             {"x": rand(3, 4, 2), "l": lens})


def test_quantize_dequantize_per_axis_int8():
    x = rand(2, 3, 4)
    inits = [("s", np.array([0.02, 0.05, 0.1], np.float32)), ("z", np.array([-3, 0, 7], np.int8))]
    run_both(h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1), {"x": x}, inits, opset=13,
             out_type=TP.INT8)
    q = np.random.default_rng(2).integers(-128, 128, (2, 3, 4)).astype(np.int8)
    node = h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)
    g = h.make_graph([node], "g", [h.make_tensor_value_info("q", TP.INT8, [2, 3, 4])],
                     [h.make_tensor_value_info("y", F, None)], [nh.from_array(a, n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 10
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"q": q})[0]
    mod, params = from_onnx(m)
    mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    got = vm["main"](q)
    np.testing.assert_allclose(np.asarray(got.numpy() if hasattr(got, "numpy") else got), want, rtol=1e-6)


@pytest.mark.parametrize("op,lo,hi", [("Atan", -1e4, 1e4), ("Atan", -3, 3), ("Asin", -1, 1), ("Acos", -1, 1)])
def test_inverse_trig_precision(op, lo, hi):
    x = np.linspace(lo, hi, 4001).astype(np.float32)
    run_both(h.make_node(op, ["x"], ["y"]), {"x": x}, rtol=2e-6, atol=2e-7)


# The cubic kernels take far longer to compile than the rest (tens of seconds): marked slow.
@pytest.mark.parametrize("mode,padding,ac", [("linear", "zeros", 0), ("nearest", "reflection", 0),
                                             pytest.param("cubic", "reflection", 1, marks=pytest.mark.slow),
                                             ("linear", "border", 1)])
def test_grid_sample(mode, padding, ac):
    x, grid = rand(2, 3, 5, 6), (1.4 * rand(2, 4, 7, 2)).clip(-1.6, 1.6)
    run_both(h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding, align_corners=ac),
             {"x": x, "g": grid}, opset=20)


@pytest.mark.slow
def test_grid_sample_cubic_border_follows_the_onnx_reference():
    """onnxruntime does not move out-of-border coordinates before the cubic taps (it differs
    from onnx.reference by up to 0.2 here); Kiln follows the reference."""
    from onnx.reference import ReferenceEvaluator
    from kiln.frontend.onnx.backend import KilnBackend
    x, grid = rand(1, 2, 5, 6), (1.4 * rand(1, 4, 7, 2)).clip(-1.6, 1.6)
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode="cubic", padding_mode="border")
    ins = [h.make_tensor_value_info("x", F, x.shape), h.make_tensor_value_info("g", F, grid.shape)]
    g = h.make_graph([node], "g", ins, [h.make_tensor_value_info("y", F, [1, 2, 4, 7])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    want = ReferenceEvaluator(m).run(None, {"x": x, "g": grid})[0]
    np.testing.assert_allclose(KilnBackend.prepare(m).run([x, grid])[0], want, rtol=1e-5, atol=1e-5)


def test_affine_grid():
    theta = np.array([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]]], np.float32)
    size = np.array([1, 2, 5, 4], np.int64)
    node = h.make_node("AffineGrid", ["t", "s"], ["g"], align_corners=0)
    run_both(node, {"t": theta}, [("s", size)], opset=20)


@pytest.mark.parametrize("inverse,onesided,n", [(0, 0, None), (0, 1, 12), (1, 0, None)])
def test_dft(inverse, onesided, n):
    x = rand(2, 10, 2) if not onesided else rand(2, 10, 1)
    names, inits = ["x"], []
    if n is not None:
        names.append("n")
        inits.append(("n", np.array(n, np.int64)))
    run_both(h.make_node("DFT", names, ["y"], inverse=inverse, onesided=onesided, axis=1), {"x": x},
             inits, opset=17)


def test_col2im():
    x = rand(2, 3 * 4, 9)           # C = 3, block 2x2, 3x3 positions in the padded 6x7 image
    inits = [("img", np.array([5, 6], np.int64)), ("blk", np.array([2, 2], np.int64))]
    run_both(h.make_node("Col2Im", ["x", "img", "blk"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1]),
             {"x": x}, inits)
