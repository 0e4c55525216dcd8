"""ai.onnx.preview FlexAttention through Kiln against onnx's reference evaluator (onnxruntime has
no kernel for the preview domain): GQA with a score_mod subgraph that masks causally through its
own initializer and a prob_mod that rescales, in float32 and in float16 (softmax in float32)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("np_dtype,elem,tol", [(np.float32, TP.FLOAT, 1e-5), (np.float16, TP.FLOAT16, 2e-3)])
def test_flex_attention_gqa_score_and_prob_mod(np_dtype, elem, tol):
    b, hq, hkv, lq, s, d = 2, 4, 2, 3, 5, 8
    mask = np.where(np.arange(s)[None, :] <= np.arange(lq)[:, None] + (s - lq), 0, -np.inf).astype(np.float32)
    score_mod = h.make_graph([h.make_node("Add", ["scores", "mask"], ["out"])], "score_mod",
                             [h.make_tensor_value_info("scores", TP.FLOAT, None)],
                             [h.make_tensor_value_info("out", TP.FLOAT, None)], [nh.from_array(mask, "mask")])
    prob_mod = h.make_graph([h.make_node("Mul", ["p", "half"], ["out"])], "prob_mod",
                            [h.make_tensor_value_info("p", TP.FLOAT, None)],
                            [h.make_tensor_value_info("out", TP.FLOAT, None)],
                            [nh.from_array(np.array(0.5, np.float32), "half")])
    node = h.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                       score_mod=score_mod, prob_mod=prob_mod, scale=0.3)
    feeds = {"q": RNG.standard_normal((b, hq, lq, d)).astype(np_dtype),
             "k": RNG.standard_normal((b, hkv, s, d)).astype(np_dtype),
             "v": RNG.standard_normal((b, hkv, s, d)).astype(np_dtype)}
    ins = [h.make_tensor_value_info(n, elem, list(a.shape)) for n, a in feeds.items()]
    m = h.make_model(h.make_graph([node], "g", ins, [h.make_tensor_value_info("y", elem, None)]),
                     opset_imports=[h.make_opsetid("", 26), h.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 11
    (want,) = ReferenceEvaluator(m).run(None, feeds)
    mod, _ = from_onnx(m)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    got = vm["main"](*feeds.values()).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)
