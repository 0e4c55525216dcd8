"""The optimizers of the ai.onnx.preview.training domain: Adagrad, Adam, Momentum (standard and
Nesterov), elementwise updates composed from the operator library.

Each takes the learning rate R and the update count T (scalars, usually run-time inputs) and
then n tensors to optimise followed by their gradients and states, grouped by kind
(X1..Xn, G1..Gn, H1..Hn); outputs are grouped the same way (X1_new..Xn_new, H1_new..).
The formulas are the ONNX spec's (and its reference implementation's), computed in each X's
dtype.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype

DOMAIN = "ai.onnx.preview.training"


def _groups(ins, kinds: int, op: str):
    """(R, T, [[X1, G1, ...], [X2, G2, ...], ...]) from R, T, X1..Xn, G1..Gn, ..."""
    r, t, rest = ins[0], ins[1], list(ins[2:])
    if r is None or t is None or not rest or len(rest) % kinds or None in rest:
        raise Unsupported(f"{op} takes R, T and {kinds} groups of n tensors, got {len(ins)} inputs")
    n = len(rest) // kinds
    return r, t, [[rest[k * n + i] for k in range(kinds)] for i in range(n)]


class _Math:
    """Scalar constants and casts in the dtype of one optimised tensor."""

    def __init__(self, ctx, like):
        self.ctx, self.dtype = ctx, dtype(like)
        if self.dtype not in ("float16", "float32", "float64"):
            raise Unsupported(f"the optimised tensors must be float, got {self.dtype}")

    def c(self, v):
        return self.ctx.const(np.array(v, dt.to_numpy(self.dtype)))

    def cast(self, e):
        return e if dtype(e) == self.dtype else self.ctx.op("cast", e, dtype=self.dtype)

    def __getattr__(self, name):  # m.add(a, b) -> ctx.op("add", a, b)
        return lambda *args: self.ctx.op(name, *args)


def _regularized(m, x, g, norm):
    """The gradient of loss + norm / 2 * ||x||^2: norm * x + g."""
    return m.add(m.multiply(m.c(norm), x), g) if norm else g


@converter(f"{DOMAIN}:Adagrad", since=1)
def adagrad(ctx, node, ins, attrs):
    """r = R / (1 + T * decay_factor); H' = H + g^2; X' = X - r * g / (sqrt(H') + epsilon), with
    g = norm_coefficient * X + G."""
    r, t, groups = _groups(ins, 3, "Adagrad")
    decay, eps = attrs.get("decay_factor", 0.0), attrs.get("epsilon", 0.0)
    norm = attrs.get("norm_coefficient", 0.0)
    xs, hs = [], []
    for x, g, h in groups:
        m = _Math(ctx, x)
        rate = m.divide(m.cast(r), m.add(m.c(1), m.multiply(m.cast(t), m.c(decay))))
        g = _regularized(m, x, g, norm)
        h_new = m.add(h, m.multiply(g, g))
        step = m.divide(m.multiply(rate, g), m.add(m.sqrt(h_new), m.c(eps)))
        xs.append(m.subtract(x, step))
        hs.append(h_new)
    return xs + hs


@converter(f"{DOMAIN}:Adam", since=1)
def adam(ctx, node, ins, attrs):
    """V' = alpha V + (1 - alpha) g; H' = beta H + (1 - beta) g^2; the rate bias-corrected by
    sqrt(1 - beta^T) / (1 - alpha^T) when T > 0; X' = (1 - norm_coefficient_post) *
    (X - rate * V' / (sqrt(H') + epsilon)), with g = norm_coefficient * X + G."""
    r, t, groups = _groups(ins, 4, "Adam")
    alpha, beta = attrs.get("alpha", 0.9), attrs.get("beta", 0.999)
    eps, norm = attrs.get("epsilon", 0.0), attrs.get("norm_coefficient", 0.0)
    post = attrs.get("norm_coefficient_post", 0.0)
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        m = _Math(ctx, x)
        g = _regularized(m, x, g, norm)
        v_new = m.add(m.multiply(m.c(alpha), v), m.multiply(m.c(1 - alpha), g))
        h_new = m.add(m.multiply(m.c(beta), h), m.multiply(m.c(1 - beta), m.multiply(g, g)))
        tf, rate = m.cast(t), m.cast(r)
        corrected = m.divide(m.multiply(rate, m.sqrt(m.subtract(m.c(1), m.power(m.c(beta), tf)))),
                             m.subtract(m.c(1), m.power(m.c(alpha), tf)))
        rate = ctx.op("where", ctx.op("greater", t, ctx.const(np.array(0, dt.to_numpy(dtype(t))))),
                      corrected, rate)
        x_new = m.subtract(x, m.multiply(rate, m.divide(v_new, m.add(m.sqrt(h_new), m.c(eps)))))
        if post:
            x_new = m.multiply(m.c(1 - post), x_new)
        xs.append(x_new)
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs


@converter(f"{DOMAIN}:Momentum", since=1)
def momentum(ctx, node, ins, attrs):
    """V' = alpha V + beta' g (beta' = beta, or 1 at T = 0); X' = X - R V' (standard) or
    X - R (g + alpha V') (nesterov), with g = norm_coefficient * X + G."""
    r, t, groups = _groups(ins, 3, "Momentum")
    alpha, beta = attrs["alpha"], attrs["beta"]
    mode, norm = attrs.get("mode", "standard"), attrs.get("norm_coefficient", 0.0)
    if mode not in ("standard", "nesterov"):
        raise Unsupported(f"mode={mode!r} is not standard or nesterov")
    xs, vs = [], []
    for x, g, v in groups:
        m = _Math(ctx, x)
        g = _regularized(m, x, g, norm)
        later = ctx.op("greater", t, ctx.const(np.array(0, dt.to_numpy(dtype(t)))))
        b = ctx.op("where", later, m.c(beta), m.c(1))
        v_new = m.add(m.multiply(m.c(alpha), v), m.multiply(b, g))
        step = v_new if mode == "standard" else m.add(g, m.multiply(m.c(alpha), v_new))
        xs.append(m.subtract(x, m.multiply(m.cast(r), step)))
        vs.append(v_new)
    return xs + vs
