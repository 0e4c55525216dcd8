"""Scaled dot-product attention as one operator (pattern ``opaque``): what the graph pass
``fuse_attention`` makes of ``softmax(q @ kt * scale + mask) @ v``, so the whole of it runs as
one kernel per block of rows, with the scores of those rows living in the cache
(``transform/schedule_attention.py``) instead of a (heads, M, N) tensor written out and read
back three times.

``attention(q, kt, v[, mask], scale=1.0)``, for batch dims ``b...`` (heads included) equal
in ``q``, ``kt`` and ``v``::

    q (b..., M, D)   kt (b..., D, N)   v (b..., N, Dv)   mask broadcasting to (b..., M, N)
    out (b..., M, Dv) = softmax(q @ kt * scale + mask, axis=-1) @ v

``kt`` is the keys already transposed, as ONNX exporters write attention
(``MatMul(Q, Transpose(K))``); a float mask is added (``-inf`` or a large negative number hides
a key), a bool mask keeps the scores where it is True and puts ``mask_fill`` (default: float32's
lowest) elsewhere, as ``where(mask, scores, fill)`` (PyTorch's boolean ``attn_mask``). Blocks,
in order::

    attention_score[b, i, j]  = sum_k q[b, i, k] * kt[b, k, j]
    attention_logit[b, i, j]  = attention_score * scale + mask          (inlined by the rule;
                                or mask ? attention_score * scale : mask_fill)
    attention_max[b, i]       = max_j attention_logit
    attention_exp[b, i, j]    = exp(attention_logit - attention_max)
    attention_sum[b, i]       = sum_j attention_exp
    attention_pv[b, i, d]     = sum_j attention_exp[b, i, j] * v[b, j, d]
    attention[b, i, d]        = attention_pv / attention_sum

Normalising after ``@ v`` (one divide per output instead of one per score) is the only
change of order against the unfused graph; float32 only (the scores of float16 inputs would
want a float32 accumulator, which the unfused graph keeps).

**Heads packed in the last axis** (``heads=H``, H > 0): the layout a projection writes and the
next one reads, so no kernel splits the heads out before attention or merges them after::

    q (b..., M, H*D)   k (b..., N, H*D)   v (b..., N, H*Dv)   mask broadcasting to (b..., H, M, N)
    out (b..., M, H*Dv): head h's output in columns [h*Dv, (h+1)*Dv)

the keys not transposed. It equals ``heads=0`` on ``q.reshape(b, M, H, D).transpose(0, 2, 1, 3)``,
``kt = k.reshape(b, N, H, D).transpose(0, 2, 3, 1)`` and the same for v, with the output
transposed and reshaped back: what exporters write around attention, which ``fuse_attention``
folds into the call. One more block comes first, a head's keys transposed into a scratch
buffer (``attention_kt[b, h, k, j] = k[b, j, h*D + k]``) so that the score tile loads keys as
vectors; the others keep their names, over (b..., H, M, ...), and the last writes
``attention[b, i, h*Dv + d]``.

**q, k and v in one tensor** (``heads=H, qkv=True``): ``attention(qkv[, mask])`` with qkv
(b..., M, 3*H*D) the output of one QKV projection, q its first third of columns, k the second,
v the last (Dv = D, N = M): what ONNX Runtime's packed-QKV attention and FlashAttention's
``qkvpacked`` take. No kernel splits the projection's output into three.

**Heads in groups** (``qkv=True, groups=G``): qkv's columns are G groups of H/G heads each,
a group's q, k and v one after the other (head h's q starts at column
``(h // (H/G)) * 3*(H/G)*D + (h % (H/G)) * D``, its k ``(H/G)*D`` later, its v ``2*(H/G)*D``
later). ``fuse_attention`` permutes the QKV projection's weight columns so on a target with G
cores: the projection splits its columns among the cores, the attention kernel its heads,
and each core then finds the q, k and v of its heads in its own cache.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..ir.graph import TensorType
from .common import (broadcast_indices, broadcast_shapes, const_dim, dims_equal, error, get_attrs,
                     literal, shape_str, tensor_args)
from .registry import OpError, register

NAME = "attention"


def _shapes(types, heads: int = 0, qkv: bool = False):
    """(batch shape, M, D, N, Dv) of an attention call (with ``heads``, of one head, the batch
    shape ending in the heads); raises OpError naming the shapes."""
    if qkv:
        return _packed_shapes(_qkv_types(types), heads)
    if len(types) not in (3, 4):
        raise error(NAME, f"expected 3 or 4 arguments (q, kt, v[, mask]), got {len(types)}")
    if heads:
        return _packed_shapes(types, heads)
    args = _float_args(types, ("q", "kt", "v", "mask"))
    q, kt, v = args[:3]
    if q.ndim < 2 or kt.ndim != q.ndim or v.ndim != q.ndim:
        raise error(NAME, f"q, kt and v must have the same rank >= 2, got q {shape_str(q.shape)}, "
                          f"kt {shape_str(kt.shape)}, v {shape_str(v.shape)}")
    batch = q.shape[:-2]
    all3 = f"q {shape_str(q.shape)}, kt {shape_str(kt.shape)}, v {shape_str(v.shape)}"
    for name, t in (("kt", kt), ("v", v)):
        if len(t.shape[:-2]) != len(batch) or not all(
                dims_equal(a, b) is True for a, b in zip(t.shape[:-2], batch)):
            raise error(NAME, f"the batch dims of {name} differ from q's ({all3})")
    m, d = q.shape[-2:]
    if dims_equal(kt.shape[-2], d) is not True:
        raise error(NAME, f"kt's dim -2 must equal q's last dim ({all3})")
    n, dv = v.shape[-2:]
    if dims_equal(kt.shape[-1], n) is not True:
        raise error(NAME, f"kt's last dim must equal v's dim -2 ({all3})")
    if len(args) == 4:
        _check_mask(args[3], tuple(batch) + (m, n))
    return batch, m, d, n, dv


def _check_mask(mask, scores) -> None:
    try:
        out = broadcast_shapes(NAME, mask.shape, scores)
    except OpError:
        out = None
    if out is None or len(out) != len(scores) or not all(
            dims_equal(a, b) is True for a, b in zip(out, scores)):
        raise error(NAME, f"mask {shape_str(mask.shape)} does not broadcast to the scores "
                          f"{shape_str(scores)}")


def _qkv_types(types):
    """The types of q, k, v (and the mask) of a ``qkv=True`` call: thirds of its first."""
    if len(types) not in (1, 2):
        raise error(NAME, f"with qkv=True, expected 1 or 2 arguments (qkv[, mask]), got {len(types)}")
    (x,) = tensor_args(NAME, types[:1], names=("qkv",), count=1)
    width = const_dim(x.shape[-1]) if x.ndim >= 2 else None
    if width is None or width % 3:
        raise error(NAME, f"qkv's last dim must be a multiple of 3, got qkv {shape_str(x.shape)}")
    third = TensorType(tuple(x.shape[:-1]) + (width // 3,), x.dtype)
    return [third] * 3 + list(types[1:])


def _float_args(types, names):
    """The tensor arguments, checked float32 (the mask: or bool)."""
    names = names[:len(types)]
    args = tensor_args(NAME, types, names=names, count=len(types))
    for name, t in zip(names, args):
        if t.dtype != "float32" and not (name == "mask" and t.dtype == "bool"):
            raise error(NAME, f"{name} must be float32{' or bool' if name == 'mask' else ''}, "
                              f"got {t.dtype}")
    return args


def _packed_shapes(types, heads: int):
    """``_shapes`` for heads packed in the last axis (module docstring)."""
    args = _float_args(types, ("q", "k", "v", "mask"))
    q, k, v = args[:3]
    all3 = f"q {shape_str(q.shape)}, k {shape_str(k.shape)}, v {shape_str(v.shape)}"
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise error(NAME, f"q, k and v must have the same rank >= 2, got {all3}")
    batch = q.shape[:-2]
    for name, t in (("k", k), ("v", v)):
        if not all(dims_equal(a, b) is True for a, b in zip(t.shape[:-2], batch)):
            raise error(NAME, f"the batch dims of {name} differ from q's ({all3})")
    m, n = q.shape[-2], k.shape[-2]
    if dims_equal(v.shape[-2], n) is not True:
        raise error(NAME, f"k and v must have as many rows (keys) ({all3})")
    widths = []
    for name, t in (("q", q), ("k", k), ("v", v)):
        w = const_dim(t.shape[-1])
        if w is None or w % heads:
            raise error(NAME, f"{name}'s last dim must be a multiple of heads={heads} ({all3})")
        widths.append(w // heads)
    d, dk, dv = widths
    if d != dk:
        raise error(NAME, f"q and k must have the same last dim ({all3})")
    batch = tuple(batch) + (heads,)
    if len(args) == 4:
        _check_mask(args[3], batch + (m, n))
    return batch, m, d, n, dv


LOWEST = float(np.finfo(np.float32).min)


def _attrs(attrs):
    """(scale, mask_fill, heads, qkv, groups) of a call, checked."""
    a = get_attrs(NAME, attrs, scale=1.0, mask_fill=LOWEST, heads=0, qkv=False, groups=1)
    heads = a["heads"]
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 0:
        raise error(NAME, f"heads={heads!r} must be a non-negative int (0: heads are batch dims)")
    if not isinstance(a["qkv"], bool) or (a["qkv"] and not heads):
        raise error(NAME, f"qkv={a['qkv']!r} must be a bool, and qkv=True needs heads > 0")
    groups = a["groups"]
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or \
            (groups > 1 and (not a["qkv"] or heads % groups)):
        raise error(NAME, f"groups={groups!r} must be a positive int; more than 1 needs "
                          f"qkv=True and a divisor of heads={heads}")
    for key in ("scale", "mask_fill"):
        v = a[key]
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        # (a fill of -inf is allowed: a row masked everywhere is then NaN, as unfused)
        if not number or not (np.isfinite(v) or (key == "mask_fill" and v == -np.inf)):
            raise error(NAME, f"{key}={v!r} must be a finite number"
                              f"{' or -inf' if key == 'mask_fill' else ''}")
    return float(a["scale"]), float(a["mask_fill"]), heads, a["qkv"], groups


def _infer(types, attrs):
    _, _, heads, qkv, _ = _attrs(attrs)
    batch, m, _, _, dv = _shapes(types, heads, qkv)
    if heads:
        return TensorType(tuple(batch[:-1]) + (m, heads * dv), "float32")
    return TensorType(tuple(batch) + (m, dv), "float32")


def _compute(args, attrs):
    scale_value, fill_value, heads, qkv, groups = _attrs(attrs)
    batch, m, d, n, dv = _shapes([TensorType(t.shape, t.dtype) for t in args], heads, qkv)
    if qkv:     # q, k, v: the column thirds of args[0] (of each group's columns)
        per = heads // groups
        (q, kt, v), mask = [args[0]] * 3, (args[1:] or [None])[0]

        def column(part, h):    # the first column of head h's q (part 0), k (1) or v (2)
            if groups == 1:     # the general form's h // per is 0: keep the index affine
                return part * heads * d + h * d
            return (h // per) * 3 * per * d + part * per * d + (h % per) * d
    else:
        q, kt, v = args[:3]
        mask = args[3] if len(args) == 4 else None

        def column(part, h):
            return h * (dv if part == 2 else d)
    scale = literal(scale_value, "float32")
    nb = len(batch)
    if heads:
        # (b..., h) indexes the batch dims b... and the column block of head h
        q_in, k_in, v_in = q, kt, v
        kt = te.compute(tuple(batch) + (d, n),
                        lambda *i: k_in[i[:nb - 1] + (i[nb + 1], column(1, i[nb - 1]) + i[nb])],
                        name="attention_kt")

        def q_at(b, i, k):
            return q_in[b[:-1] + (i, column(0, b[-1]) + k)]

        def v_at(b, j, c):
            return v_in[b[:-1] + (j, column(2, b[-1]) + c)]
    else:
        def q_at(b, i, k):
            return q[b + (i, k)]

        def v_at(b, j, c):
            return v[b + (j, c)]
    k = te.reduce_axis(d, name="k")
    score = te.compute(tuple(batch) + (m, n),
                       lambda *i: te.sum(q_at(i[:nb], i[nb], k) * kt[i[:nb] + (k, i[nb + 1])], axis=k),
                       name="attention_score")

    def logit(*i):
        s = score[i] * scale
        if mask is None:
            return s
        mv = mask[broadcast_indices(i, mask.shape, tuple(batch) + (m, n))]
        if mask.dtype == "bool":
            return te.if_then_else(mv, s, literal(fill_value, "float32"))
        return s + mv
    lg = te.compute(tuple(batch) + (m, n), logit, name="attention_logit")
    j1 = te.reduce_axis(n, name="j")
    mx = te.compute(tuple(batch) + (m,), lambda *r: te.max(lg[r + (j1,)], axis=j1), name="attention_max")
    ex = te.compute(tuple(batch) + (m, n), lambda *i: te.exp(lg[i] - mx[i[:-1]]), name="attention_exp")
    j2 = te.reduce_axis(n, name="j")
    sm = te.compute(tuple(batch) + (m,), lambda *r: te.sum(ex[r + (j2,)], axis=j2), name="attention_sum")
    j3 = te.reduce_axis(n, name="j")
    pv = te.compute(tuple(batch) + (m, dv),
                    lambda *i: te.sum(ex[i[:-1] + (j3,)] * v_at(i[:nb], j3, i[-1]), axis=j3),
                    name="attention_pv")
    if heads:
        # out[b..., i, h*Dv + c]: iterated (b..., i, h*Dv + c); schedule_attention splits the
        # last axis back into (h, c)
        def out(*i):
            b, row, col = i[:nb - 1], i[nb - 1], i[nb]
            h, c = col // dv, col % dv
            return pv[b + (h, row, c)] / sm[b + (h, row)]
        return te.compute(tuple(batch[:-1]) + (m, heads * dv), out, name=NAME)
    return te.compute(tuple(batch) + (m, dv), lambda *i: pv[i] / sm[i[:-1]], name=NAME)


def attention_reference(q, kt=None, v=None, mask=None, scale=1.0, mask_fill=LOWEST, heads=0,
                        qkv=False, groups=1):
    """numpy: ``softmax(q @ kt * scale + mask, axis=-1) @ v`` (a bool mask: ``where(mask,
    q @ kt * scale, mask_fill)``) in float64, cast back. With ``heads``, the packed layout of
    the module docstring (``kt`` is then the keys, not transposed); with ``qkv``, the call's
    arguments are (qkv[, mask]): ``q`` holds all three, in ``groups``, and ``kt`` is the mask."""
    if qkv:
        g = q.reshape(q.shape[:-1] + (groups, 3, q.shape[-1] // (3 * groups)))
        q, k, v = (g[..., p, :].reshape(q.shape[:-1] + (-1,)) for p in range(3))
        return attention_reference(q, k, v, kt, scale, mask_fill, heads)
    if heads:
        def split(x):    # (b..., rows, H*w) -> (b..., H, rows, w)
            x = x.reshape(x.shape[:-1] + (heads, x.shape[-1] // heads))
            return np.moveaxis(x, -2, -3)
        o = attention_reference(split(q), np.swapaxes(split(kt), -1, -2), split(v), mask,
                                scale, mask_fill)
        o = np.moveaxis(o, -3, -2)
        return np.ascontiguousarray(o.reshape(o.shape[:-2] + (-1,)))
    s = np.matmul(q.astype("float64"), kt.astype("float64")) * scale
    if mask is not None and mask.dtype == np.bool_:
        s = np.where(mask, s, np.float64(mask_fill))
    elif mask is not None:
        s = s + mask.astype("float64")
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    p = s / s.sum(axis=-1, keepdims=True)
    return np.matmul(p, v.astype("float64")).astype(q.dtype)


register(NAME, infer=_infer, compute=_compute, reference=attention_reference, pattern="opaque",
         doc="attention(q, kt, v[, mask], scale=1.0, mask_fill=lowest, heads=0): softmax(q @ kt * "
             "scale + mask, axis=-1) @ v for q (b..., M, D), kt (b..., D, N), v (b..., N, Dv), "
             "float32; the mask broadcasts to (b..., M, N); a bool mask keeps the scores where True "
             "and puts mask_fill elsewhere. heads=H: q (b..., M, H*D), k (b..., N, H*D) not "
             "transposed, v (b..., N, H*Dv), out (b..., M, H*Dv), the mask over (b..., H, M, N). "
             "heads=H, qkv=True: attention(qkv[, mask]), q, k, v the column thirds of qkv "
             "(groups=G: of each of G column groups of H/G heads). "
             "One kernel (see ops/attention.py); made by fuse_attention.")
