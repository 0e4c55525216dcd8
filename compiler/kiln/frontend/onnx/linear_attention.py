"""ONNX LinearAttention and CausalConvWithState (opset 27): the recurrent-state blocks of linear
attention models (Gated DeltaNet, Mamba, RWKV), composed from the operator library.

LinearAttention runs its recurrence token by token, as the spec defines it: the importer
unrolls the (static) sequence length into matmuls over the (B, H_kv, d_k, d_v) state, computed
in float32 as the ONNX reference does, then cast back to the inputs' dtype.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, ndim, static_shape

_RULES = ("linear", "gated", "delta", "gated_delta")


def _f32(ctx, x):
    return x if dtype(x) == "float32" else ctx.op("cast", x, dtype="float32")


def _heads(ctx, x, heads, what):
    """(B, T, H*D) -> (B, H, T, D) in float32."""
    if ndim(x) != 3:
        raise Unsupported(f"{what} must be rank 3 (B, T, H*D), got rank {ndim(x)}")
    b, t, hd = static_shape(x, what)
    if hd % heads:
        raise Unsupported(f"{what}: last dim {hd} is not a multiple of {heads} heads")
    x = ctx.op("reshape", _f32(ctx, x), shape=(b, t, heads, hd // heads))
    return ctx.op("permute_dims", x, axes=(0, 2, 1, 3))


def _step(ctx, x, i):
    """Token ``i`` of a (B, H, T, D) tensor as (B, H, 1, D)."""
    return ctx.op("strided_slice", x, begin=(i,), end=(i + 1,), axes=(2,))


@converter("LinearAttention", since=27)
def linear_attention(ctx, node, ins, attrs):
    """S_t = exp(g_t) S_{t-1} + beta_t k_t (x) (v_t - exp(g_t) S_{t-1}^T k_t), o_t = scale q_t^T S_t
    (gating and the delta correction by ``update_rule``), with GQA sharing each kv head's state
    between q_num_heads / kv_num_heads query heads."""
    ins = list(ins) + [None] * (6 - len(ins))
    q, k, v, past, decay, beta = ins[:6]
    rule = attrs.get("update_rule", "gated_delta")
    if rule not in _RULES:
        raise Unsupported(f"update_rule={rule!r} is not one of {', '.join(_RULES)}")
    qh, kvh = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if not qh or not kvh or qh % kvh:
        raise Unsupported(f"q_num_heads ({qh}) must be a positive multiple of kv_num_heads ({kvh})")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None):
        raise Unsupported(f"update_rule={rule!r} {'needs' if gating else 'forbids'} the decay input")
    if delta != (beta is not None):
        raise Unsupported(f"update_rule={rule!r} {'needs' if delta else 'forbids'} the beta input")
    out_dt = dtype(q)
    b, t, _ = static_shape(q, "query")
    q4, k4, v4 = _heads(ctx, q, qh, "query"), _heads(ctx, k, kvh, "key"), _heads(ctx, v, kvh, "value")
    dk, dv = static_shape(q4)[3], static_shape(v4)[3]
    g = qh // kvh
    if decay is not None:
        last = static_shape(decay, "decay")[-1]
        if last not in (kvh, kvh * dk):
            raise Unsupported(f"decay: last dim {last} must be kv_num_heads ({kvh}) or "
                              f"kv_num_heads * d_k ({kvh * dk})")
        # exp(g) per (B, H, T, d_k or 1), then a trailing 1 to broadcast over d_v
        decay4 = ctx.op("exp", _heads(ctx, decay, kvh, "decay"))
    if beta is not None:
        last = static_shape(beta, "beta")[-1]
        if last not in (kvh, 1):
            raise Unsupported(f"beta: last dim {last} must be kv_num_heads ({kvh}) or 1")
        beta4 = _heads(ctx, beta, last, "beta")  # (B, H or 1, T, 1)
    if past is not None:
        if static_shape(past, "past_state") != (b, kvh, dk, dv):
            raise Unsupported(f"past_state shape {static_shape(past)} is not {(b, kvh, dk, dv)}")
        state_dt = dtype(past)
        state = _f32(ctx, past)
    else:
        state_dt = out_dt
        state = ctx.const(np.zeros((b, kvh, dk, dv), np.float32))
    scale = attrs.get("scale") or 1.0 / np.sqrt(dk)
    scale_c = ctx.const(np.array(scale, np.float32))
    q4 = ctx.op("multiply", q4, scale_c)
    # query heads grouped by the kv head they read: (B, H_kv, G, T, d_k)
    qg = ctx.op("reshape", q4, shape=(b, kvh, g, t, dk))
    outs = []
    for i in range(t):
        k_t = _step(ctx, k4, i)                                            # (B, H, 1, d_k)
        v_t = _step(ctx, v4, i)                                            # (B, H, 1, d_v)
        if gating:
            e = ctx.op("permute_dims", _step(ctx, decay4, i), axes=(0, 1, 3, 2))  # (B, H, d_k|1, 1)
            state = ctx.op("multiply", state, e)
        if delta:
            retrieved = ctx.op("matmul", k_t, state)                       # (B, H, 1, d_v)
            v_t = ctx.op("multiply", _step(ctx, beta4, i), ctx.op("subtract", v_t, retrieved))
        outer = ctx.op("multiply", ctx.op("permute_dims", k_t, axes=(0, 1, 3, 2)), v_t)
        state = ctx.op("add", state, outer)
        q_t = ctx.op("reshape", ctx.op("strided_slice", qg, begin=(i,), end=(i + 1,), axes=(3,)),
                     shape=(b, kvh, g, dk))
        outs.append(ctx.op("reshape", ctx.op("matmul", q_t, state), shape=(b, 1, qh * dv)))
    y = outs[0] if t == 1 else ctx.op("concat", *outs, axis=1)
    if out_dt != "float32":
        y = ctx.op("cast", y, dtype=out_dt)
    if state_dt != "float32":
        state = ctx.op("cast", state, dtype=state_dt)
    return [y, state][:len(node.output)]


@converter("CausalConvWithState", since=27)
def causal_conv_with_state(ctx, node, ins, attrs):
    """Depthwise causal conv1d over concat(past_state or zeros, input) along the length, with
    optional bias and fused SiLU; present_state is the last k - 1 positions of that sequence."""
    ins = list(ins) + [None] * (4 - len(ins))
    x, w, bias, past = ins[:4]
    act = attrs.get("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise Unsupported(f"activation={act!r} is not one of none, silu, swish")
    n, c, length = static_shape(x, "input")
    cw, one, k = static_shape(w, "weight")
    if cw != c or one != 1:
        raise Unsupported(f"weight shape {(cw, one, k)} is not (channels={c}, 1, k)")
    if past is None:
        past = ctx.const(np.zeros((n, c, k - 1), dt.to_numpy(dtype(x))))
    elif static_shape(past, "past_state") != (n, c, k - 1):
        raise Unsupported(f"past_state shape {static_shape(past)} is not {(n, c, k - 1)}")
    full = ctx.op("concat", past, x, axis=2) if k > 1 else x
    y = ctx.op("conv1d", full, w, strides=(1,), padding=(0, 0), dilation=(1,), groups=c)
    if bias is not None:
        y = ctx.op("add", y, ctx.op("reshape", bias, shape=(1, c, 1)))
    if act != "none":
        y = ctx.op("silu", y)
    total = length + k - 1
    present = ctx.op("strided_slice", full, begin=(total - (k - 1),), end=(total,), axes=(2,))
    return [y, present][:len(node.output)]
