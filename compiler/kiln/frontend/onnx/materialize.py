"""Symbolic values as run-time tensors: ``Range`` over symbolic bounds, and any shape
computation that a run-time op consumes (a ``Shape`` cast to float, returned, or fed to an op
``symbolic.eval_op`` does not compute at import time).

Kiln keeps shape arithmetic at compile time (symbolic.py) as long as it can; where a tensor is
needed at run time, the values are computed by a kernel from the symbolic dims: the
``shape_values`` and ``arange`` operators (``kiln.ops.shape_values``), which take graph inputs
as *witnesses*, tensors whose shapes hold those dims (the kernel binds them from there).
"""
from __future__ import annotations

import numpy as np

from ...ir.expr import IntImm, Max, PrimExpr, Var
from ...ir.functor import collect
from .common import Unsupported


def witnesses(ctx, exprs) -> list:
    """Graph inputs whose shapes hold every symbolic dim used by ``exprs`` (PrimExprs)."""
    need = {v for e in exprs if isinstance(e, PrimExpr) for v in collect(e, Var)}
    out = []
    for v in sorted(need, key=lambda v: v.name):
        w = next((x for x in ctx.inputs if any(d is v for d in (x.ty.shape or ()))), None)
        if w is None:
            raise Unsupported(f"a run-time value uses the symbolic dim {v.name}, which no graph input "
                              "has in its shape")
        if w not in out:
            out.append(w)
    return out


def materialize(ctx, e):
    """``e`` as a run-time tensor: a symbolic value becomes a ``shape_values`` call; anything
    else is returned as it is."""
    if not ctx.is_symbolic(e):
        return e
    arr = ctx.sym[e]
    values = tuple(x if isinstance(x, PrimExpr) else IntImm(int(x), "int64") for x in arr.reshape(-1))
    return ctx.emit("shape_values", *witnesses(ctx, values), values=values, shape=tuple(arr.shape),
                    dtype=e.ty.dtype)


def range_op(ctx, start, limit, delta, dtype: str):
    """ONNX Range with symbolic bounds: ``arange`` of length max(ceil((limit - start) / delta), 0)."""
    from .symbolic import as_expr, simplify
    if not isinstance(delta, IntImm) or delta.value == 0:
        raise Unsupported("Range over symbolic bounds needs a constant, non-zero delta")
    d = int(delta.value)
    s, lim = as_expr(start), as_expr(limit)
    span = lim - s if d > 0 else s - lim
    length = simplify(Max((span + (abs(d) - 1)) // abs(d), IntImm(0, "int64")))
    return ctx.emit("arange", *witnesses(ctx, (s, length)), start=simplify(s), step=d, length=length,
                    dtype=dtype)


def scalar(ctx, e):
    """The one element of a 0-d or 1-element value, as a PrimExpr (symbolic or constant)."""
    from .symbolic import elements
    arr = elements(ctx, e)
    if arr is None or np.size(arr) != 1:
        return None
    return arr.reshape(-1)[0]
