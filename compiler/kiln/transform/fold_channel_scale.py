"""``fold_channel_scale``: a squeeze-and-excitation gate scales the 1x1 conv's weight, not the
activation it reads::

    y = R.multiply(x, s)                    # x [1, C/b, H, W, b], s [1, C/b, 1, 1, b]: a gate
    z = R.conv2d_nchwc(y, Wp)               # 1x1, Wp [O/b', 1, 1, C, b'] constant
  ->
    s_c = R.reshape(s, (1, 1, 1, C, 1))     # one value per input channel, in Wp's order
    z = R.conv2d_nchwc(x, R.multiply(Wp, s_c))

``conv(x * s, W) = conv(x, W * s)`` for a scale per input channel. The gate depends on the
whole of ``x`` (its global pool), so the multiply could not be fused into the kernel that makes
``x``, and ran as a kernel of its own: EfficientNet-B0's took 0.8 ms of 11 at one thread, the
early ones over 112 x 112 and 56 x 56 pixels. Scaling the weight instead costs ``O x C``
multiplies a call against ``C x H x W``: done where the conv has fewer output channels than
``x`` has pixels (the late 7 x 7 layers keep their multiply). Batch 1 only (a gate per image
would need a weight per image). Runs after ``convert_layout_nchwc``, on its blocked operators.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphExpr, GraphVar, TensorType
from .graph_util import graph_functions, is_op_call, rewrite_function, use_counts
from .infra import Pass, PassContext


def fold_channel_scale(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring). It has no options: ``ctx`` is taken like every pass's."""

    def run(mod: IRModule) -> IRModule:
        out = mod
        for name, func in graph_functions(mod):
            uses = use_counts(func)
            producers = {b.var: b.value for block in func.blocks for b in block.bindings}
            scaled: Dict[GraphVar, Tuple[GraphExpr, GraphExpr]] = {}   # y -> (x, s)
            for block in func.blocks:
                for b in block.bindings:
                    found = _scaled_input(b.value, uses, producers)
                    if found is not None:
                        y, x, s = found
                        scaled[y] = (x, s)
            if not scaled:
                continue

            def visit(b: Binding, em, _block):
                if b.var in scaled:
                    return          # the activation is not scaled: its one reader scales W
                v = b.value
                if is_op_call(v) and v.op == "conv2d_nchwc" and v.args[0] in scaled:
                    x, s = scaled[v.args[0]]
                    w = v.args[1]
                    c = w.ty.static_shape()[3]
                    s_c = em.emit(_bind("gate", ops.call("reshape", s, shape=(1, 1, 1, c, 1))))
                    w2 = em.emit(_bind("scaled_weight", ops.call("multiply", w, s_c)))
                    em.emit(Binding(b.var, ops.call("conv2d_nchwc", x, w2, **dict(v.attrs))))
                    return
                em.emit(b)
            out = out.with_function(name, rewrite_function(func, visit))
        return out
    return Pass("fold_channel_scale", run)


def _bind(name: str, value: Call) -> Binding:
    return Binding(GraphVar(name, value.ty), value)


def _scaled_input(value, uses, producers) -> Optional[Tuple[GraphVar, GraphExpr, GraphExpr]]:
    """(y, x, s) when ``value`` is a 1x1 ``conv2d_nchwc`` with a constant weight reading
    ``y = multiply(x, s)`` (its only use) with ``s`` one value per channel of ``x``, at batch 1,
    and fewer output channels than ``x`` has pixels."""
    if not (is_op_call(value) and value.op == "conv2d_nchwc"):
        return None
    y, w = value.args
    attrs = dict(value.attrs)
    if not isinstance(y, GraphVar) or uses[y] != 1 or not isinstance(w, Constant) \
            or attrs.get("groups", 1) != 1:
        return None
    ws = w.ty.static_shape()
    if ws is None or tuple(ws[1:3]) != (1, 1):
        return None
    x, s = _gate_operands(producers.get(y))
    if x is None:
        return None
    xs = x.ty.static_shape()
    if xs is None or len(xs) != 5 or xs[0] != 1 or xs[1] * xs[4] != ws[3] \
            or ws[0] * ws[4] >= xs[2] * xs[3]:
        return None
    return y, x, s


def _gate_operands(call: Call):
    """(x, s) of ``multiply(x, s)`` or ``multiply(s, x)`` with ``s`` [1, C/b, 1, 1, b] computed at
    run time and ``x`` [1, C/b, H, W, b]; else (None, None)."""
    if not (is_op_call(call) and call.op == "multiply" and len(call.args) == 2):
        return None, None
    for x, s in (call.args, call.args[::-1]):
        if isinstance(s, Constant) or not isinstance(x.ty, TensorType) \
                or not isinstance(s.ty, TensorType) or x.ty.dtype != s.ty.dtype:
            continue
        xs, ss = x.ty.static_shape(), s.ty.static_shape()
        if xs is not None and ss is not None and len(xs) == 5 \
                and tuple(ss) == (1, xs[1], 1, 1, xs[4]) and call.ty.static_shape() == xs:
            return x, s
    return None, None

