"""ONNX Attention (opset 23+) composed from matmul / softmax / where (no fused kernel)."""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dim, dtype, ndim, static_shape


def _heads_first(ctx, x, heads):
    b, s, hd = static_shape(x)
    t = ctx.op("reshape", x, shape=(b, s, heads, hd // heads))
    return ctx.op("permute_dims", t, axes=(0, 2, 1, 3))


@converter("Attention", since=23)
def attention(ctx, node, ins, attrs):
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v, mask, past_k, past_v, nonpad = ins[:7]
    if nonpad is not None and past_k is not None:
        raise Unsupported("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    if (past_k is None) != (past_v is None):
        raise Unsupported("past_key and past_value must be given together")
    npdt = dt.to_numpy(dtype(q))
    rank3 = ndim(q) == 3
    if rank3:
        qh, kvh = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if qh is None or kvh is None:
            raise Unsupported("3-D inputs need q_num_heads and kv_num_heads")
        q = _heads_first(ctx, q, qh)
        k = _heads_first(ctx, k, kvh)
        v = _heads_first(ctx, v, kvh)
    B, QH, S, D = static_shape(q)
    if past_k is not None:
        k = ctx.op("concat", past_k, k, axis=2)
        v = ctx.op("concat", past_v, v, axis=2)
    present_k, present_v = k, v
    L = static_shape(k)[2]
    KH = static_shape(k)[1]
    past_len = static_shape(past_k)[2] if past_k is not None else 0
    scale = attrs.get("scale")
    if scale is None:
        scale = 1 / np.sqrt(D)
    sq = npdt.type(np.sqrt(scale))
    ninf = npdt.type(-np.inf)
    zero = npdt.type(0)

    # the additive bias (None: no bias)
    bias = None
    if mask is not None:
        pad = L - dim(mask.ty.shape[-1])
        if pad > 0:
            pw = tuple([(0, 0)] * (ndim(mask) - 1) + [(0, pad)])
            mask = ctx.op("pad", mask, pad_width=pw,
                          pad_value=False if dtype(mask) == "bool" else float("-inf"))
        if dtype(mask) == "bool":
            mask = ctx.op("where", mask, ctx.const(np.array(zero)), ctx.const(np.array(ninf)))
        bias = mask
    # Masks over (query i, key j): query i sits at position i + offset among the keys, where
    # offset is past_len, or per batch nonpad_kv_seqlen[b] - S (an external cache whose valid
    # keys end at nonpad_kv_seqlen[b]; a run-time value, so these masks are computed in the graph)
    zero_c, ninf_c = ctx.const(np.array(zero)), ctx.const(np.array(ninf))
    jj = ctx.const(np.arange(L, dtype=np.int64)[None, :])
    if nonpad is not None:
        valid = ctx.op("reshape", ctx.op("cast", nonpad, dtype="int64"), shape=(B, 1, 1, 1))
        off = ctx.op("subtract", valid, ctx.const(np.array(S, np.int64)))
    else:
        off = ctx.const(np.array(past_len, np.int64))
    pos = ctx.op("add", ctx.const(np.arange(S, dtype=np.int64)[:, None]), off)  # (S, 1) or (B, 1, S, 1)

    def add_bias(bias, allowed):
        term = ctx.op("where", allowed, zero_c, ninf_c)
        return term if bias is None else ctx.op("add", bias, term)
    if attrs.get("is_causal", 0):
        bias = add_bias(bias, ctx.op("less_equal", jj, pos))
    lw, rw = attrs.get("left_window_size", -1), attrs.get("right_window_size", -1)
    if lw >= 0 or rw >= 0:
        diff = ctx.op("subtract", pos, jj)
        ok = None
        if lw >= 0:
            ok = ctx.op("less_equal", diff, ctx.const(np.array(lw, np.int64)))
        if rw >= 0:
            r_ok = ctx.op("greater_equal", diff, ctx.const(np.array(-rw, np.int64)))
            ok = r_ok if ok is None else ctx.op("logical_and", ok, r_ok)
        bias = add_bias(bias, ok)
    if nonpad is not None:  # keys past each batch's nonpad_kv_seqlen are padding
        bias = add_bias(bias, ctx.op("less", ctx.op("reshape", jj, shape=(1, 1, 1, L)), valid))

    if QH != KH:
        if QH % KH:
            raise Unsupported(f"q heads {QH} is not a multiple of kv heads {KH}")
        r = QH // KH
        def rep(t):
            b, h, l, d = static_shape(t)
            t = ctx.op("expand_dims", t, axis=2)
            t = ctx.op("broadcast_to", t, shape=(b, h, r, l, d))
            return ctx.op("reshape", t, shape=(b, h * r, l, d))
        k, v = rep(k), rep(v)
    qs = ctx.op("multiply", q, ctx.const(np.array(sq)))
    ks = ctx.op("multiply", ctx.op("permute_dims", k, axes=(0, 1, 3, 2)), ctx.const(np.array(sq)))
    qk = ctx.op("matmul", qs, ks)
    softcap = attrs.get("softcap")
    if softcap is not None and softcap > 0:
        sc = ctx.const(np.array(npdt.type(softcap)))
        qk = ctx.op("multiply", ctx.op("tanh", ctx.op("divide", qk, sc)), sc)
    qk_out = qk
    biased = qk if bias is None else ctx.op("add", qk, bias)
    mode = attrs.get("qk_matmul_output_mode", 0)
    if mode == 2:
        qk_out = biased
    p = ctx.op("softmax", biased, axis=-1)
    if bias is not None:
        bmax = ctx.op("max", bias, axis=-1, keepdims=True)
        dead = ctx.op("equal", bmax, ctx.const(np.array(ninf)))
        p = ctx.op("where", dead, ctx.const(np.array(zero)), p)
    if mode == 3:
        qk_out = p
    y = ctx.op("matmul", p, v)
    if rank3:
        y = ctx.op("permute_dims", y, axes=(0, 2, 1, 3))
        b, s, h, d = static_shape(y)
        y = ctx.op("reshape", y, shape=(b, s, h * d))
    outs = [y, present_k, present_v, qk_out]
    return outs[:len(node.output)]


@converter("RotaryEmbedding", since=23)
def rotary_embedding(ctx, node, ins, attrs):
    ins = list(ins) + [None] * (4 - len(ins))
    x, cos, sin, pos = ins[:4]
    rank4 = ndim(x) == 4
    if rank4:
        t = ctx.op("permute_dims", x, axes=(0, 2, 1, 3))
    else:
        nh = attrs.get("num_heads")
        if not nh:
            raise Unsupported("3-D input needs num_heads")
        b, s, hd = static_shape(x)
        t = ctx.op("reshape", x, shape=(b, s, nh, hd // nh))
    B, S, H, D = static_shape(t)
    rd = attrs.get("rotary_embedding_dim", 0) or D
    half = rd // 2
    if pos is not None:
        cos = ctx.op("take", cos, pos, axis=0)
        sin = ctx.op("take", sin, pos, axis=0)
    cos = ctx.op("expand_dims", cos, axis=2)
    sin = ctx.op("expand_dims", sin, axis=2)
    xr = ctx.op("strided_slice", t, begin=(0,), end=(rd,), axes=(3,)) if rd < D else t
    if attrs.get("interleaved", 0):
        x1 = ctx.op("strided_slice", xr, begin=(0,), end=(rd,), strides=(2,), axes=(3,))
        x2 = ctx.op("strided_slice", xr, begin=(1,), end=(rd,), strides=(2,), axes=(3,))
    else:
        x1 = ctx.op("strided_slice", xr, begin=(0,), end=(half,), axes=(3,))
        x2 = ctx.op("strided_slice", xr, begin=(half,), end=(rd,), axes=(3,))
    real = ctx.op("subtract", ctx.op("multiply", cos, x1), ctx.op("multiply", sin, x2))
    imag = ctx.op("add", ctx.op("multiply", sin, x1), ctx.op("multiply", cos, x2))
    if attrs.get("interleaved", 0):
        r = ctx.op("concat", ctx.op("expand_dims", real, axis=4), ctx.op("expand_dims", imag, axis=4), axis=4)
        rot = ctx.op("reshape", r, shape=(B, S, H, rd))
    else:
        rot = ctx.op("concat", real, imag, axis=3)
    if rd < D:
        rot = ctx.op("concat", rot, ctx.op("strided_slice", t, begin=(rd,), end=(D,), axes=(3,)), axis=3)
    if rank4:
        return ctx.op("permute_dims", rot, axes=(0, 2, 1, 3))
    return ctx.op("reshape", rot, shape=static_shape(x))
