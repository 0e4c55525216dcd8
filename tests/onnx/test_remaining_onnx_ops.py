"""ONNX operators of the last backend-test gaps, each against onnxruntime where it has a kernel
(else onnx's reference evaluator): BatchNormalization in training mode, Dropout in training mode
with ratio 0."""
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
