"""Normalisations: layer_norm, rms_norm, group_norm (pattern ``reduce``) and batch_norm
(inference mode; pattern ``broadcast``).

Patterns, as chosen here:

- ``layer_norm``, ``group_norm``, ``rms_norm`` are ``reduce``: reduction blocks for the
  statistics, then one elementwise block over the output (``<op>``). Their last block is
  elementwise over the output's shape, so elementwise consumers can fuse after it; elementwise
  producers fused before it must be inlined into every block that reads the input.
- ``batch_norm`` (inference) uses the stored moving statistics, so it is one elementwise block
  broadcasting per-channel vectors: pattern ``broadcast``.

Statistics are two-pass (mean, then the mean of squared deviations), which is more accurate
than E[x^2] - E[x]^2. float16 inputs compute their statistics in float32.

Blocks: ``layer_norm_sum``, ``layer_norm_var``, ``layer_norm``; ``rms_norm_sqsum``,
``rms_norm``; ``group_norm_sum``, ``group_norm_var``, ``group_norm``; ``batch_norm``.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..ir.expr import IntImm
from ..ir.graph import TensorType
from .common import (FLOAT_DTYPES, check_dtype, check_same_dtype, const_dim, error, get_attrs,
                     literal, normalize_axes, normalize_axis, prod, same_shape, shape_str,
                     tensor_args)
from .reduction import acc_dtype, reduce_index, reduced_shape
from .registry import register


def _eps(op, a):
    eps = a["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise error(op, f"eps={eps!r} must be a non-negative number")
    return float(eps)


def _inv_count(dims, dtype):
    """1 / prod(dims) as a ``dtype`` expression (a literal when the dims are constant)."""
    n = prod(dims)
    if isinstance(n, IntImm):
        return literal(1.0 / n.value, dtype)
    return literal(1.0, dtype) / n.astype(dtype)


def _check_param(op, name, ty, want_shape):
    if not same_shape(ty.shape, want_shape):
        raise error(op, f"{name} must have shape {shape_str(want_shape)}, got {shape_str(ty.shape)}")


def _normalized_axes(op, x, axes):
    if x.ndim == 0:
        raise error(op, "needs an input of at least 1 dimension, got shape ()")
    if isinstance(axes, (list, tuple)) and len(axes) == 0:
        raise error(op, "axes=() is empty; give the axes to normalise over")
    return normalize_axes(op, axes, x.ndim, x.shape, what="axes")


# ---- layer_norm / rms_norm ----------------------------------------------------------------

def _layer_norm_infer(types, attrs):
    x, g, b = tensor_args("layer_norm", types, names=("x", "gamma", "beta"), count=3)
    a = get_attrs("layer_norm", attrs, axes=(-1,), eps=1e-5)
    _eps("layer_norm", a)
    check_dtype("layer_norm", check_same_dtype("layer_norm", [x, g, b], ("x", "gamma", "beta")),
                FLOAT_DTYPES)
    axes = _normalized_axes("layer_norm", x, a["axes"])
    want = tuple(x.shape[k] for k in axes)
    _check_param("layer_norm", "gamma", g, want)
    _check_param("layer_norm", "beta", b, want)
    return TensorType(x.shape, x.dtype)


def _stats(op, x, axes, acc, centered):
    """Reduction blocks over ``axes``: the sum (``centered``: and the sum of squared deviations
    from the mean; else only the sum of squares). Returns (first, second or None, inv_count)."""
    shape = reduced_shape(x.shape, axes, False)
    inv_n = _inv_count([x.shape[k] for k in axes], acc)

    def axes_for(prefix):
        return {k: te.reduce_axis(x.shape[k], name=f"{prefix}{k}") for k in axes}

    def load(i, rv):
        return x[reduce_index(i, rv, x.ndim, False)].astype(acc)
    r1 = axes_for("k")
    if not centered:
        sq = te.compute(shape, lambda *i: te.sum(load(i, r1) * load(i, r1), axis=list(r1.values())),
                        name=f"{op}_sqsum")
        return sq, None, inv_n
    s1 = te.compute(shape, lambda *i: te.sum(load(i, r1), axis=list(r1.values())), name=f"{op}_sum")
    r2 = axes_for("k")

    def dev2(i):
        d = load(i, r2) - s1[i] * inv_n
        return te.sum(d * d, axis=list(r2.values()))
    s2 = te.compute(shape, lambda *i: dev2(i), name=f"{op}_var")
    return s1, s2, inv_n


def _layer_norm_compute(args, attrs):
    x, g, b = args
    a = get_attrs("layer_norm", attrs, axes=(-1,), eps=1e-5)
    axes = _normalized_axes("layer_norm", x, a["axes"])
    acc = acc_dtype(x.dtype)
    s1, s2, inv_n = _stats("layer_norm", x, axes, acc, centered=True)
    eps = literal(a["eps"], acc)

    def out(*i):
        r = tuple(v for k, v in enumerate(i) if k not in axes)
        p = tuple(i[k] for k in axes)
        y = (x[i].astype(acc) - s1[r] * inv_n) * te.rsqrt(s2[r] * inv_n + eps)
        return (y * g[p].astype(acc) + b[p].astype(acc)).astype(x.dtype)
    return te.compute(x.shape, out, name="layer_norm")


def _layer_norm_ref(x, gamma, beta, axes=(-1,), eps=1e-5):
    axes = tuple(a % x.ndim for a in axes)
    x64 = x.astype("float64")
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    shape = [x.shape[k] if k in axes else 1 for k in range(x.ndim)]
    y = (x64 - mean) / np.sqrt(var + eps)
    return (y * gamma.astype("float64").reshape(shape) + beta.astype("float64").reshape(shape)).astype(x.dtype)


register("layer_norm", infer=_layer_norm_infer, compute=_layer_norm_compute,
         reference=_layer_norm_ref, pattern="reduce", num_args=3,
         doc="layer_norm(x, gamma, beta, axes=(-1,), eps=1e-5): (x - mean) / sqrt(var + eps) * "
             "gamma + beta, mean and (biased) var over axes; gamma and beta have the shape of "
             "x's normalised dims.")


def _rms_norm_infer(types, attrs):
    x, w = tensor_args("rms_norm", types, names=("x", "weight"), count=2)
    a = get_attrs("rms_norm", attrs, axes=(-1,), eps=1e-5)
    _eps("rms_norm", a)
    check_dtype("rms_norm", check_same_dtype("rms_norm", [x, w], ("x", "weight")), FLOAT_DTYPES)
    axes = _normalized_axes("rms_norm", x, a["axes"])
    _check_param("rms_norm", "weight", w, tuple(x.shape[k] for k in axes))
    return TensorType(x.shape, x.dtype)


def _rms_norm_compute(args, attrs):
    x, w = args
    a = get_attrs("rms_norm", attrs, axes=(-1,), eps=1e-5)
    axes = _normalized_axes("rms_norm", x, a["axes"])
    acc = acc_dtype(x.dtype)
    sq, _, inv_n = _stats("rms_norm", x, axes, acc, centered=False)
    eps = literal(a["eps"], acc)

    def out(*i):
        r = tuple(v for k, v in enumerate(i) if k not in axes)
        p = tuple(i[k] for k in axes)
        return (x[i].astype(acc) * te.rsqrt(sq[r] * inv_n + eps) * w[p].astype(acc)).astype(x.dtype)
    return te.compute(x.shape, out, name="rms_norm")


def _rms_norm_ref(x, weight, axes=(-1,), eps=1e-5):
    axes = tuple(a % x.ndim for a in axes)
    x64 = x.astype("float64")
    ms = (x64 ** 2).mean(axis=axes, keepdims=True)
    shape = [x.shape[k] if k in axes else 1 for k in range(x.ndim)]
    return (x64 / np.sqrt(ms + eps) * weight.astype("float64").reshape(shape)).astype(x.dtype)


register("rms_norm", infer=_rms_norm_infer, compute=_rms_norm_compute, reference=_rms_norm_ref,
         pattern="reduce", num_args=2,
         doc="rms_norm(x, weight, axes=(-1,), eps=1e-5): x / sqrt(mean(x^2) + eps) * weight, the "
             "mean over axes; weight has the shape of x's normalised dims.")


# ---- group_norm --------------------------------------------------------------------------

def _group_norm_attrs(attrs):
    return get_attrs("group_norm", attrs, num_groups=None, eps=1e-5)


def _group_norm_infer(types, attrs):
    x, g, b = tensor_args("group_norm", types, names=("x", "gamma", "beta"), count=3)
    a = _group_norm_attrs(attrs)
    _eps("group_norm", a)
    check_dtype("group_norm", check_same_dtype("group_norm", [x, g, b], ("x", "gamma", "beta")),
                FLOAT_DTYPES)
    G = a["num_groups"]
    if isinstance(G, bool) or not isinstance(G, int) or G <= 0:
        raise error("group_norm", f"num_groups={G!r} must be a positive int")
    if x.ndim < 2:
        raise error("group_norm", f"x must be (N, C, ...) with at least 2 dimensions, got shape "
                                  f"{shape_str(x.shape)}")
    C = const_dim(x.shape[1])
    if C is None:
        raise error("group_norm", f"the channel dimension of x {shape_str(x.shape)} must be a constant")
    if C % G:
        raise error("group_norm", f"{C} channels of x {shape_str(x.shape)} do not split into "
                                  f"num_groups={G} groups")
    _check_param("group_norm", "gamma", g, (x.shape[1],))
    _check_param("group_norm", "beta", b, (x.shape[1],))
    return TensorType(x.shape, x.dtype)


def _group_norm_compute(args, attrs):
    x, g, b = args
    a = _group_norm_attrs(attrs)
    G = a["num_groups"]
    C = const_dim(x.shape[1])
    cg = C // G
    acc = acc_dtype(x.dtype)
    stat_shape = (x.shape[0], G)
    inv_n = _inv_count([cg] + list(x.shape[2:]), acc)

    def reduce_vars():
        rc = te.reduce_axis(cg, name="kc")
        rs = [te.reduce_axis(x.shape[d], name=f"k{d}") for d in range(2, x.ndim)]
        return rc, rs

    def load(n, grp, rc, rs):
        return x[(n, grp * cg + rc) + tuple(rs)].astype(acc)
    rc1, rs1 = reduce_vars()
    s1 = te.compute(stat_shape, lambda n, grp: te.sum(load(n, grp, rc1, rs1), axis=[rc1] + rs1),
                    name="group_norm_sum")
    rc2, rs2 = reduce_vars()

    def dev2(n, grp):
        d = load(n, grp, rc2, rs2) - s1[n, grp] * inv_n
        return te.sum(d * d, axis=[rc2] + rs2)
    s2 = te.compute(stat_shape, dev2, name="group_norm_var")
    eps = literal(a["eps"], acc)

    def out(n, c, *s):
        grp = c // cg
        y = (x[(n, c) + s].astype(acc) - s1[n, grp] * inv_n) * te.rsqrt(s2[n, grp] * inv_n + eps)
        return (y * g[c].astype(acc) + b[c].astype(acc)).astype(x.dtype)
    return te.compute(x.shape, out, name="group_norm")


def _group_norm_ref(x, gamma, beta, num_groups=None, eps=1e-5):
    N, C = x.shape[:2]
    x64 = x.astype("float64").reshape((N, num_groups, -1))
    mean = x64.mean(axis=2, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((x64 - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, C) + (1,) * (x.ndim - 2)
    return (y * gamma.astype("float64").reshape(shape) + beta.astype("float64").reshape(shape)).astype(x.dtype)


register("group_norm", infer=_group_norm_infer, compute=_group_norm_compute,
         reference=_group_norm_ref, pattern="reduce", num_args=3,
         doc="group_norm(x, gamma, beta, num_groups=G, eps=1e-5): x (N, C, ...) with C split "
             "into G groups of C/G channels; each (sample, group) is normalised over its channels "
             "and spatial dims, then scaled by gamma[c] and shifted by beta[c] (both (C,)).")


# ---- batch_norm (inference) ------------------------------------------------------------------

_BN_NAMES = ("x", "gamma", "beta", "moving_mean", "moving_var")


def _batch_norm_infer(types, attrs):
    x, *params = tensor_args("batch_norm", types, names=_BN_NAMES, count=5)
    a = get_attrs("batch_norm", attrs, axis=1, eps=1e-5)
    _eps("batch_norm", a)
    check_dtype("batch_norm", check_same_dtype("batch_norm", [x] + params, _BN_NAMES), FLOAT_DTYPES)
    if x.ndim == 0:
        raise error("batch_norm", "needs an input of at least 1 dimension, got shape ()")
    axis = normalize_axis("batch_norm", a["axis"], x.ndim, x.shape)
    for name, p in zip(_BN_NAMES[1:], params):
        _check_param("batch_norm", name, p, (x.shape[axis],))
    return TensorType(x.shape, x.dtype)


def _batch_norm_compute(args, attrs):
    x, gamma, beta, mean, var = args
    a = get_attrs("batch_norm", attrs, axis=1, eps=1e-5)
    axis = normalize_axis("batch_norm", a["axis"], x.ndim, x.shape)
    eps = literal(a["eps"], x.dtype)

    def out(*i):
        c = i[axis]
        return (x[i] - mean[c]) * te.rsqrt(var[c] + eps) * gamma[c] + beta[c]
    return te.compute(x.shape, out, name="batch_norm")


def _batch_norm_ref(x, gamma, beta, moving_mean, moving_var, axis=1, eps=1e-5):
    shape = [1] * x.ndim
    shape[axis % x.ndim] = x.shape[axis % x.ndim]

    def r(v):
        return v.astype("float64").reshape(shape)
    y = (x.astype("float64") - r(moving_mean)) / np.sqrt(r(moving_var) + eps) * r(gamma) + r(beta)
    return y.astype(x.dtype)


register("batch_norm", infer=_batch_norm_infer, compute=_batch_norm_compute,
         reference=_batch_norm_ref, pattern="broadcast", num_args=5,
         doc="batch_norm(x, gamma, beta, moving_mean, moving_var, axis=1, eps=1e-5): inference "
             "mode, (x - moving_mean[c]) / sqrt(moving_var[c] + eps) * gamma[c] + beta[c] with c "
             "the index along axis; returns the normalised tensor only (no updated statistics).")
