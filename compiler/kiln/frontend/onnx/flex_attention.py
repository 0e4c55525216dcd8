"""ai.onnx.preview FlexAttention: scaled dot-product attention whose scores and probabilities
pass through user subgraphs (``score_mod``, ``prob_mod``), which are imported inline.

Scores are (Q sqrt(scale)) (K sqrt(scale))^T in the inputs' dtype, then softmax, the modifiers
and the product with V run in the softmax precision (float32 for float16 inputs, otherwise
the inputs' dtype, or ``softmax_precision``), as in the ONNX reference.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, kiln_dtype, ndim, static_shape


def _modifier(ctx, graph, x, what):
    """``graph`` (one rank-4 input, one output of its shape) applied to ``x``, inline."""
    from .loop import run_body
    if graph is None:
        return x
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise Unsupported(f"{what} must take one input and give one output")
    (y,) = run_body(ctx, graph, [x])
    if static_shape(y, what) != static_shape(x) or dtype(y) != dtype(x):
        raise Unsupported(f"{what} changes the shape or dtype of its input")
    return y


@converter("ai.onnx.preview:FlexAttention", since=1)
def flex_attention(ctx, node, ins, attrs):
    """softmax(score_mod(Q K^T * scale)) -> prob_mod -> @ V, with GQA (query head h reads kv
    head h // (Hq / Hkv))."""
    q, k, v = ins[:3]
    if not ndim(q) == ndim(k) == ndim(v) == 4:
        raise Unsupported("Q, K and V must be rank 4")
    b, hq, _, e = static_shape(q, "Q")
    hkv = static_shape(k, "K")[1]
    if hq % hkv:
        raise Unsupported(f"q heads {hq} is not a multiple of kv heads {hkv}")
    if hq != hkv:  # interleave-repeat each kv head over its group of query heads
        def rep(t):
            _, h, s, d = static_shape(t)
            t = ctx.op("broadcast_to", ctx.op("expand_dims", t, axis=2), shape=(b, h, hq // h, s, d))
            return ctx.op("reshape", t, shape=(b, hq, s, d))
        k, v = rep(k), rep(v)
    in_dt = dtype(q)
    if attrs.get("softmax_precision") is not None:
        sm_dt = kiln_dtype(attrs["softmax_precision"], "softmax_precision: ")
    else:
        sm_dt = "float32" if in_dt in ("float16", "bfloat16") else in_dt
    scale = attrs.get("scale")
    if scale is None:
        scale = 1.0 / np.sqrt(e)
    root = ctx.const(np.array(np.sqrt(np.float32(scale)), dt.to_numpy(in_dt)))
    kt = ctx.op("permute_dims", ctx.op("multiply", k, root), axes=(0, 1, 3, 2))
    scores = ctx.op("matmul", ctx.op("multiply", q, root), kt)
    if sm_dt != in_dt:
        scores = ctx.op("cast", scores, dtype=sm_dt)
        v = ctx.op("cast", v, dtype=sm_dt)
    scores = _modifier(ctx, attrs.get("score_mod"), scores, "score_mod")
    probs = _modifier(ctx, attrs.get("prob_mod"), ctx.op("softmax", scores, axis=-1), "prob_mod")
    y = ctx.op("matmul", probs, v)
    return y if dtype(y) == dtype(ins[2]) else ctx.op("cast", y, dtype=dtype(ins[2]))
