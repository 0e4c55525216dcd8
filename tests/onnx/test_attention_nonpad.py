"""ONNX Attention with nonpad_kv_seqlen (an external KV cache whose valid keys end at a per-batch,
run-time length) through Kiln against onnxruntime: the padding mask alone, and with the causal
mask and a sliding window whose frontier moves with each batch's length. One compiled model
runs two sets of lengths, so the masks are computed at run time, not frozen at import."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"is_causal": 1, "left_window_size": 2}])
def test_attention_nonpad_kv_seqlen(attrs):
    b, qh, kvh, s, kv, d = 3, 4, 2, 2, 6, 8
    q, k, v = (RNG.standard_normal(sh).astype(np.float32)
               for sh in ((b, qh, s, d), (b, kvh, kv, d), (b, kvh, kv, d)))
    node = h.make_node("Attention", ["q", "k", "v", "", "", "", "n"], ["y"], **attrs)
    ins = [h.make_tensor_value_info(nm, TP.FLOAT, list(a.shape)) for nm, a in zip("qkv", (q, k, v))]
    ins.append(h.make_tensor_value_info("n", TP.INT64, [b]))
    m = h.make_model(h.make_graph([node], "g", ins, [h.make_tensor_value_info("y", TP.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 25 if "left_window_size" in attrs else 24)])
    m.ir_version = 10
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    mod, _ = from_onnx(m)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    for lengths in ([6, 3, 4], [2, 5, 6]):
        n = np.array(lengths, np.int64)
        want = sess.run(None, {"q": q, "k": k, "v": v, "n": n})[0]
        got = vm["main"](q, k, v, n).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
