"""Loss ops composed from Kiln ops: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss."""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dim, dtype, ndim


def _nll(ctx, x, target, weight, reduction, ignore_index):
    n = ndim(x)
    c = dim(x.ty.shape[1])
    if not isinstance(c, int):
        raise Unsupported("the class dim C must be static")
    tdt = dtype(target)
    iota = np.arange(c, dtype=dt.to_numpy(tdt)).reshape([c if i == 1 else 1 for i in range(n)])
    hit = ctx.op("equal", ctx.op("expand_dims", target, axis=1), ctx.const(iota))
    picked = ctx.op("sum", ctx.op("multiply", x, ctx.op("cast", hit, dtype=dtype(x))), axis=1)
    if ignore_index is not None:
        ign = ctx.const(np.array(ignore_index, dtype=dt.to_numpy(tdt)))
        valid = ctx.op("not_equal", target, ign)
        safe_t = ctx.op("where", valid, target, ctx.const(np.zeros((), dt.to_numpy(tdt))))
    else:
        valid, safe_t = None, target
    if weight is not None:
        w = ctx.op("take", weight, safe_t, axis=0)
    else:
        w = ctx.op("broadcast_to", ctx.const(np.ones((), dt.to_numpy(dtype(x)))),
                   shape=tuple(dim(s) for s in target.ty.shape))
    if valid is not None:
        w = ctx.op("multiply", w, ctx.op("cast", valid, dtype=dtype(x)))
    loss = ctx.op("neg", ctx.op("multiply", picked, w))
    if reduction == "none":
        return loss
    total = ctx.op("sum", loss)
    if reduction == "sum":
        return total
    if reduction == "mean":
        return ctx.op("divide", total, ctx.op("sum", w))
    raise Unsupported(f"reduction={reduction} is not supported")


@converter("NegativeLogLikelihoodLoss", since=12)
def nll_loss(ctx, node, ins, attrs):
    x, target = ins[0], ins[1]
    weight = ins[2] if len(ins) > 2 else None
    return _nll(ctx, x, target, weight, attrs.get("reduction", "mean"), attrs.get("ignore_index"))


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_ce_loss(ctx, node, ins, attrs):
    x, target = ins[0], ins[1]
    weight = ins[2] if len(ins) > 2 else None
    logp = ctx.op("log_softmax", x, axis=1)
    loss = _nll(ctx, logp, target, weight, attrs.get("reduction", "mean"), attrs.get("ignore_index"))
    return [loss, logp] if len(node.output) > 1 else loss
