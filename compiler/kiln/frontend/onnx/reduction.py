"""ReduceX ops (axes as attribute or, from the op's newer versions, as input)."""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ...ir.expr import IntImm
from .common import Unsupported, converter, ndim, scalar_like

# op -> opset from which axes is an input
_AXES_INPUT = {"ReduceSum": 13}
_DEFAULT_AXES_INPUT = 18


def _axes(ctx, node, ins, attrs):
    since = _AXES_INPUT.get(node.op_type, _DEFAULT_AXES_INPUT)
    if ctx.opset >= since:
        if len(ins) > 1 and ins[1] is not None:
            return [int(a) for a in np.asarray(ctx.need_value(ins[1], "axes")).reshape(-1)]
        return None
    a = attrs.get("axes")
    return None if a is None else list(a)


def _reduce(build):
    def fn(ctx, node, ins, attrs):
        x = ins[0]
        axes = _axes(ctx, node, ins, attrs)
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return x
            axis = None
            if keep:
                axis = tuple(range(ndim(x)))
        else:
            axis = tuple(axes)
        n = ndim(x)
        red = range(n) if axis is None else [a + n if a < 0 else a for a in axis]
        shape = [s.value if isinstance(s, IntImm) else None for s in x.ty.shape]
        if any(shape[a] == 0 for a in red) and all(s is not None for s in shape):
            # a reduction over an empty set is its identity (computed here: no kernel runs)
            ident = _EMPTY.get(node.op_type)
            if ident is None:
                raise Unsupported("reducing an empty set has no identity for this op")
            out = [1 if a in red else d for a, d in enumerate(shape)] if keep else \
                [d for a, d in enumerate(shape) if a not in red]
            npd = dt.to_numpy(x.ty.dtype)
            val = ident if np.dtype(npd).kind == "f" else (
                True if ident == np.inf and npd == np.bool_ else False if ident == -np.inf and npd == np.bool_ else
                (np.iinfo(npd).max if ident == np.inf else np.iinfo(npd).min if ident == -np.inf else ident))
            return ctx.const(np.full(out, val, dtype=npd))
        return build(ctx, x, axis, keep)
    return fn


_EMPTY = {"ReduceSum": 0, "ReduceSumSquare": 0, "ReduceL1": 0, "ReduceL2": 0, "ReduceProd": 1,
          "ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceLogSum": -np.inf,
          "ReduceLogSumExp": -np.inf}


def _simple(kop):
    def build(ctx, x, axis, keep):
        if x.ty.dtype == "bool" and kop in ("max", "min"):  # any / all
            y = ctx.op(kop, ctx.op("cast", x, dtype="uint8"), axis=axis, keepdims=keep)
            return ctx.op("cast", y, dtype="bool")
        return ctx.op(kop, x, axis=axis, keepdims=keep)
    return build


converter("ReduceSum")(_reduce(_simple("sum")))
converter("ReduceMean")(_reduce(_simple("mean")))
converter("ReduceMax")(_reduce(_simple("max")))
converter("ReduceMin")(_reduce(_simple("min")))
converter("ReduceProd")(_reduce(_simple("prod")))
converter("ReduceSumSquare")(_reduce(
    lambda ctx, x, axis, keep: ctx.op("sum", ctx.op("multiply", x, x), axis=axis, keepdims=keep)))
converter("ReduceL1")(_reduce(
    lambda ctx, x, axis, keep: ctx.op("sum", ctx.op("abs", x), axis=axis, keepdims=keep)))
converter("ReduceL2")(_reduce(
    lambda ctx, x, axis, keep: ctx.op("sqrt", ctx.op("sum", ctx.op("multiply", x, x), axis=axis, keepdims=keep))))
converter("ReduceLogSum")(_reduce(
    lambda ctx, x, axis, keep: ctx.op("log", ctx.op("sum", x, axis=axis, keepdims=keep))))


def _logsumexp(ctx, x, axis, keep):
    m = ctx.op("max", x, axis=axis, keepdims=True)
    s = ctx.op("sum", ctx.op("exp", ctx.op("subtract", x, m)), axis=axis, keepdims=keep)
    mk = m if keep else ctx.op("squeeze", m, axis=axis if axis is not None else None)
    if axis is None and not keep:
        mk = ctx.op("reshape", m, shape=())
    return ctx.op("add", ctx.op("log", s), mk)


converter("ReduceLogSumExp")(_reduce(_logsumexp))
