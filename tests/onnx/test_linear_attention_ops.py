"""ONNX LinearAttention and CausalConvWithState (opset 27) through Kiln against onnxruntime, on
shapes and options the backend node tests do not combine: GQA with a per-key-dim decay and a
past state over 5 tokens, the plain delta rule with a shared beta, a causal conv with bias,
past state and SiLU."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def check(node, feeds, rtol=1e-4, atol=1e-5):
    """One-node opset-27 model: Kiln's outputs equal onnxruntime's."""
    ins = [h.make_tensor_value_info(k, TP.FLOAT, list(v.shape)) for k, v in feeds.items()]
    outs = [h.make_tensor_value_info(o, TP.FLOAT, None) for o in node.output]
    m = h.make_model(h.make_graph([node], "g", ins, outs), opset_imports=[h.make_opsetid("", 27)])
    m.ir_version = 11
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    mod, _ = from_onnx(m)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    got = vm["main"](*feeds.values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_linear_attention_gated_delta_gqa_with_past():
    b, t, qh, kvh, dk, dv = 2, 5, 4, 2, 3, 4
    k = rand(b, t, kvh, dk)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # the delta rule expects L2-normalised keys
    feeds = {"q": rand(b, t, qh * dk), "k": k.reshape(b, t, kvh * dk), "v": rand(b, t, kvh * dv),
             "past": rand(b, kvh, dk, dv), "decay": -np.abs(rand(b, t, kvh * dk, scale=0.3)),
             "beta": 1 / (1 + np.exp(-rand(b, t, kvh)))}
    node = h.make_node("LinearAttention", list(feeds), ["y", "state"], q_num_heads=qh,
                       kv_num_heads=kvh, update_rule="gated_delta")
    check(node, feeds)


def test_linear_attention_delta_shared_beta_scale():
    b, t, hh, dk, dv = 1, 3, 2, 4, 2
    feeds = {"q": rand(b, t, hh * dk), "k": rand(b, t, hh * dk, scale=0.5), "v": rand(b, t, hh * dv),
             "beta": 1 / (1 + np.exp(-rand(b, t, 1)))}
    node = h.make_node("LinearAttention", ["q", "k", "v", "", "", "beta"], ["y", "state"], q_num_heads=hh,
                       kv_num_heads=hh, update_rule="delta", scale=0.25)
    check(node, feeds)


def test_causal_conv_bias_past_silu():
    n, c, length, k = 2, 3, 6, 4
    feeds = {"x": rand(n, c, length), "w": rand(c, 1, k), "b": rand(c), "past": rand(n, c, k - 1)}
    node = h.make_node("CausalConvWithState", list(feeds), ["y", "state"], activation="silu")
    check(node, feeds)


def test_causal_conv_input_shorter_than_state():
    # two new positions, a state of four: the present state keeps two of the past ones
    feeds = {"x": rand(1, 2, 2), "w": rand(2, 1, 5), "past": rand(1, 2, 4)}
    node = h.make_node("CausalConvWithState", ["x", "w", "", "past"], ["y", "state"])
    check(node, feeds)
