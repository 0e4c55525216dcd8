"""ai.onnx.ml (Binarizer, ArrayFeatureExtractor, TreeEnsemble) against onnxruntime, and the
ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) against onnx's reference
evaluator (onnxruntime's CPU build has no training-domain kernels), on models that import no
default-domain opset: several tensors per update, run-time learning rate and step count."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(5)
NP_TO_ONNX = {np.dtype(np.float32): TP.FLOAT, np.dtype(np.float64): TP.DOUBLE, np.dtype(np.int64): TP.INT64}


def model(node, feeds, domain, version):
    ins = [h.make_tensor_value_info(k, NP_TO_ONNX[v.dtype], list(v.shape)) for k, v in feeds.items()]
    outs = [h.make_tensor_value_info(o, TP.FLOAT, None) for o in node.output]  # every test is float32
    m = h.make_model(h.make_graph([node], "g", ins, outs), opset_imports=[h.make_opsetid(domain, version)])
    m.ir_version = 10
    return m


def kiln_run(m, feeds):
    mod, _ = from_onnx(m)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    out = vm["main"](*feeds.values())
    return [o.numpy() for o in (out if isinstance(out, (list, tuple)) else [out])]


def compare(got, want, rtol, atol):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def check_ort(node, feeds, rtol=1e-6, atol=1e-6):
    m = model(node, feeds, "ai.onnx.ml", 5)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    compare(kiln_run(m, feeds), want, rtol, atol)


def test_binarizer():
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    check_ort(h.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.25), {"x": x})


def test_array_feature_extractor():
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    idx = np.array([4, 0, 4, 2], np.int64)
    check_ort(h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml"), {"x": x, "i": idx})


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_two_trees(aggregate):
    # tree 0: x0 <= 0.5 ? (x1 < -0.2 ? leaf0 : leaf1) : leaf2 ; tree 1: x1 > 0.1 ? leaf3 : leaf4
    node = h.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", n_targets=2, aggregate_function=aggregate,
        tree_roots=[0, 2], nodes_featureids=[0, 1, 1], nodes_modes=nh.from_array(np.array([0, 1, 3], np.uint8)),
        nodes_splits=nh.from_array(np.array([0.5, -0.2, 0.1], np.float32)),
        nodes_truenodeids=[1, 0, 3], nodes_trueleafs=[0, 1, 1], nodes_falsenodeids=[2, 1, 4],
        nodes_falseleafs=[1, 1, 1], leaf_targetids=[0, 1, 1, 0, 1],
        leaf_weights=nh.from_array(np.array([1.5, -2.0, 0.25, 3.0, -1.0], np.float32)))
    x = RNG.standard_normal((16, 2)).astype(np.float32)
    check_ort(node, {"x": x})


def check_reference(node, feeds, rtol=1e-5, atol=1e-6):
    m = model(node, feeds, "ai.onnx.preview.training", 1)
    compare(kiln_run(m, feeds), ReferenceEvaluator(m).run(None, feeds), rtol, atol)


def optimizer_feeds(kinds, t, shapes=((3,), (2, 2))):
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
    for kind in kinds:
        for i, s in enumerate(shapes):
            a = RNG.standard_normal(s).astype(np.float32)
            feeds[f"{kind}{i}"] = np.abs(a) if kind == "H" else a
    return feeds


def outputs(kinds, n=2):
    return [f"{k}{i}_new" for k in kinds for i in range(n)]


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad(t):
    feeds = optimizer_feeds("XGH", t)
    node = h.make_node("Adagrad", list(feeds), outputs("XH"), domain="ai.onnx.preview.training",
                       decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.01)
    check_reference(node, feeds)


@pytest.mark.parametrize("t", [0, 3])
def test_adam(t):
    feeds = optimizer_feeds("XGVH", t)
    node = h.make_node("Adam", list(feeds), outputs("XVH"), domain="ai.onnx.preview.training",
                       alpha=0.9, beta=0.99, epsilon=1e-6, norm_coefficient=0.01, norm_coefficient_post=0.02)
    check_reference(node, feeds)


@pytest.mark.parametrize("mode,t", [("standard", 0), ("standard", 2), ("nesterov", 2)])
def test_momentum(mode, t):
    feeds = optimizer_feeds("XGV", t)
    node = h.make_node("Momentum", list(feeds), outputs("XV"), domain="ai.onnx.preview.training",
                       alpha=0.9, beta=0.5, mode=mode, norm_coefficient=0.01)
    check_reference(node, feeds)


@pytest.mark.parametrize("version,attrs,x", [
    (2, dict(keys_int64s=[3, 1, 7], values_floats=[0.5, -2.0, np.inf], default_float=9.0),
     np.array([[1, 2, 3], [7, 7, 0]], np.int64)),
    (2, dict(keys_floats=[0.5, 3.0, -1.0], values_int64s=[10, 20, 30], default_int64=-5),
     np.array([0.5, np.nan, 2.0, -1.0], np.float32)),
    (4, dict(keys_tensor=nh.from_array(np.array([4, 5], np.int64)),
             values_tensor=nh.from_array(np.array([40, 50], np.int64)),
             default_tensor=nh.from_array(np.array([0], np.int64))), np.array([5, 4, 6], np.int64)),
])
def test_label_encoder_numeric(version, attrs, x):
    out_elem = TP.FLOAT if "values_floats" in attrs else TP.INT64
    node = h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", NP_TO_ONNX[x.dtype], list(x.shape))],
                                  [h.make_tensor_value_info("y", out_elem, None)]),
                     opset_imports=[h.make_opsetid("ai.onnx.ml", version), h.make_opsetid("", 18)])
    m.ir_version = 10
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    compare(kiln_run(m, {"x": x}), want, 0, 0)


def test_label_encoder_nan_key_and_repeated_key():
    # the spec: a NaN key matches any NaN input, and a repeated key's last value wins
    # (onnxruntime and onnx's reference evaluator match no NaN), so the expectation is written out
    x = np.array([np.nan, 2.0, 1.0, -np.nan], np.float32)
    node = h.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_floats=[1.0, np.nan, 1.0],
                       values_int64s=[7, 8, 9], default_int64=0)
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [4])],
                                  [h.make_tensor_value_info("y", TP.INT64, None)]),
                     opset_imports=[h.make_opsetid("ai.onnx.ml", 2)])
    compare(kiln_run(m, {"x": x}), [np.array([8, 0, 9, 8], np.int64)], 0, 0)
