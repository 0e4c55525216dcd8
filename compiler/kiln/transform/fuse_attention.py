"""``fuse_attention``: scaled dot-product attention written as separate operators becomes one
``attention`` call (``ops/attention.py``), so it runs as one kernel per block of query rows
(``schedule_attention.py``)::

    lv15 = R.matmul(q, kt)                 # (b..., M, D) @ (b..., D, N)
    lv16 = R.multiply(lv15, R.const(0.125))          # optional: a scalar scale (or divide)
    lv17 = R.add(lv16, mask)                         # optional: an additive mask, or
                                                     # R.where(bool_mask, lv16, R.const(fill))
    lv18 = R.softmax(lv17, axis=-1)
    lv19 = R.matmul(lv18, v)               # (b..., M, N) @ (b..., N, Dv)
  ->
    lv19 = R.attention(q, kt, v, mask, scale=0.125)

This is how exporters write attention (PyTorch's ``q @ k.transpose(-2, -1) * scale + mask``,
then softmax, then ``@ v``). Each intermediate must have no other use (else it is computed
anyway and nothing is saved), the batch dims of q, kt and v must be equal (no broadcasting),
the dtype float32. Run it before ``fuse_ops``; ``PassContext(fuse_attention=False)`` leaves
the graph alone.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphExpr, GraphVar, TensorType
from ..ops import OpError
from ..ops import call as op_call
from ..ops.common import same_shape
from .graph_util import graph_functions, rewrite_function, use_counts
from .infra import Pass, PassContext, context


def _scalar(e: GraphExpr) -> Optional[float]:
    """The value of a constant holding one number, else None."""
    if isinstance(e, Constant) and e.data.size == 1 and e.data.dtype.kind == "f":
        return float(e.data.reshape(()))
    return None


def _single_use(e: GraphExpr, defs, uses, op: str) -> Optional[Call]:
    """The call defining variable ``e`` when it is a call of ``op`` used once, else None."""
    if not isinstance(e, GraphVar) or uses[e] != 1:
        return None
    value = defs.get(e)
    return value if isinstance(value, Call) and value.op == op else None


def match_attention(call: Call, defs: Dict[GraphVar, GraphExpr], uses
                    ) -> Optional[Tuple[tuple, dict, list]]:
    """For ``call`` = ``matmul(softmax(...), v)`` of the attention pattern (module docstring):
    (the attention call's arguments, its attributes, the variables the fused call replaces),
    else None."""
    if call.op != "matmul" or len(call.args) != 2:
        return None
    probs, v = call.args
    sm = _single_use(probs, defs, uses, "softmax")
    if sm is None or dict(sm.attrs).get("axis", -1) not in (-1, sm.ty.ndim - 1):
        return None
    replaced = [probs]
    x, mask, scale, fill = sm.args[0], None, 1.0, None
    add = _single_use(x, defs, uses, "add")
    where = _single_use(x, defs, uses, "where")
    if where is not None and where.args[0].ty.dtype == "bool" \
            and _scalar(where.args[2]) is not None:
        # PyTorch's boolean attn_mask: where(mask, scores, lowest)
        replaced.append(x)
        mask, fill, x = where.args[0], _scalar(where.args[2]), where.args[1]
    elif add is not None:
        for score_side, mask_side in ((0, 1), (1, 0)):
            inner = add.args[score_side]
            if _single_use(inner, defs, uses, "multiply") or _single_use(inner, defs, uses, "divide") \
                    or _single_use(inner, defs, uses, "matmul"):
                replaced.append(x)
                x, mask = inner, add.args[mask_side]
                break
    for op in ("multiply", "divide"):
        scaled = _single_use(x, defs, uses, op)
        if scaled is None:
            continue
        sides = ((0, 1), (1, 0)) if op == "multiply" else ((0, 1),)
        for t_side, c_side in sides:
            c = _scalar(scaled.args[c_side])
            if c is not None and c != 0.0:
                replaced.append(x)
                x, scale = scaled.args[t_side], (c if op == "multiply" else 1.0 / c)
                break
        break
    qk = _single_use(x, defs, uses, "matmul")
    if qk is None:
        return None
    replaced.append(x)
    q, kt = qk.args
    args = (q, kt, v) + ((mask,) if mask is not None else ())
    attrs = {"scale": scale, **({"mask_fill": fill} if fill is not None else {})}
    if not all(isinstance(a.ty, TensorType) for a in args) or not np.isfinite(scale):
        return None
    try:
        fused = op_call("attention", *args, **attrs)
    except OpError:          # batch dims that broadcast, another dtype, a mask of another shape
        return None
    if not same_shape(fused.ty.shape, call.ty.shape):
        return None
    return args, attrs, replaced


def fuse_attention(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        if not ctx.fuse_attention:
            return mod
        out = mod
        for name, func in graph_functions(mod):
            defs = {b.var: b.value for blk in func.blocks for b in blk.bindings}
            uses = use_counts(func)
            fused: Dict[GraphVar, Call] = {}
            dropped = set()
            for blk in func.blocks:
                for b in blk.bindings:
                    if isinstance(b.value, Call):
                        m = match_attention(b.value, defs, uses)
                        if m is not None:
                            args, attrs, replaced = m
                            fused[b.var] = op_call("attention", *args, **attrs)
                            dropped.update(replaced)
            if not fused:
                continue

            def visit(b: Binding, em, _block):
                if b.var in dropped:
                    return
                em.emit(Binding(b.var, fused[b.var]) if b.var in fused else b)
            out = out.with_function(name, rewrite_function(func, visit))
        return out
    return Pass("fuse_attention", run)
