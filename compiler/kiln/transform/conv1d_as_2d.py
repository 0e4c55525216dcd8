"""``conv1d_as_2d``: a 1-D convolution with a constant weight runs as a 2-D one of height 1, so
that it gets what 2-D convolutions get: the channel-blocked conv (``conv_blocked.py``) and,
from conv to conv, channel-blocked activations (``layout_nchwc.py``)::

    y = R.conv1d(x, W, strides=(2,), padding=(1, 1))          # x [N, C, L], W [O, C, K]
    z = R.gelu(R.add(y, b))                                   # b [1, O, 1]
    w = R.conv1d(z, W2)
  ->
    x4 = R.expand_dims(x, axis=(2,))                          # [N, C, 1, L]
    y4 = R.conv2d(x4, W4, strides=(1, 2), padding=(0, 1, 0, 1))   # W4 [O, C, 1, K]
    z4 = R.gelu(R.add(y4, b4))                                # b4 [1, O, 1, 1]
    w4 = R.conv2d(z4, W24)
    w = R.squeeze(w4, axis=(2,))

The elementwise operators between the convs run on the 4-D values (their other operands get
the unit axis too), so the layout pass sees one region of convs; a value something else reads
in 3-D is squeezed back for it.

Left alone, a conv1d is a contraction vectorized along its output's length: at stride 2 or
more each vector of input is a gather, and a length that no vector width divides (199) runs
scalar. A wav2vec-style front end (a 10-wide stride-5 conv, then stride-2 convs over 64
channels, 16,000 samples) took 1.9 ms against onnxruntime's 1.2 (bench/RESULTS.md, "Session
15"). Blocked, the weight is packed and read as vectors of output channels and the input
broadcast one sample at a time, at any stride.

Only convs with a constant weight and static float32 shapes, as ``conv_blocked`` blocks;
``PassContext(conv_blocking=False)`` leaves them (and every conv2d) unblocked, so this pass
then does nothing.
"""
from __future__ import annotations

from typing import Dict, Optional

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphExpr, GraphVar, TensorType
from ..ops.nn import _padding, _tuple
from .dead_code_elimination import remove_dead_bindings
from .graph_util import graph_functions, rewrite_function
from .infra import Pass, PassContext, context
from .layout_nchwc import elementwise


def conv1d_as_2d(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        if not (ctx.conv_blocking and ctx.prepack_weights):
            return mod
        out = mod
        for name, func in graph_functions(mod):
            lifted: Dict[GraphVar, GraphVar] = {}     # a 3-D value -> its 4-D twin
            expanded: Dict[GraphVar, GraphVar] = {}   # an operand -> its expand_dims, made once

            def visit(b: Binding, em, _block):
                em.emit(b if not isinstance(b.value, Call) else _lift(b, em, lifted, expanded))
            new = rewrite_function(func, visit)
            if lifted:
                out = out.with_function(name, remove_dead_bindings(new))
        return out
    return Pass("conv1d_as_2d", run)


def _lift(b: Binding, em, lifted, expanded) -> Binding:
    """Emit the 4-D form of ``b`` when it is a conv1d or an elementwise call of a lifted value
    (recording the twin); return the binding of ``b``'s own variable."""
    call = b.value
    if _convertible(call):
        x, w = call.args
        attrs = dict(call.attrs)
        (stride,) = _tuple("conv1d", "strides", attrs.get("strides", 1), 1)
        (dilation,) = _tuple("conv1d", "dilation", attrs.get("dilation", 1), 1)
        (left,), (right,) = _padding("conv1d", attrs.get("padding", 0), 1)
        y4 = ops.call("conv2d", _four_d(x, em, lifted, expanded), Constant(w.data[:, :, None, :]),
                      strides=(1, stride), padding=(0, left, 0, right), dilation=(1, dilation),
                      groups=attrs.get("groups", 1))
    elif elementwise(call) and any(a in lifted for a in call.args) and _rank(call) == 3:
        y4 = ops.call(call.op, *[_four_d(a, em, lifted, expanded) for a in call.args],
                      **dict(call.attrs))
    else:
        return b
    twin = em.emit(Binding(GraphVar(f"{b.var.name}_2d", y4.ty), y4))
    lifted[b.var] = twin
    return Binding(b.var, ops.call("squeeze", twin, axis=(2,)))


def _four_d(e: GraphExpr, em, lifted, expanded) -> GraphExpr:
    """Operand ``e`` of a 3-D (N, C, L) result as an operand of the 4-D (N, C, 1, L) one: its
    twin, or ``e`` with a unit axis before its last when it has two or three axes (a scalar or
    a row of L broadcasts as it is)."""
    if e in lifted:
        return lifted[e]
    rank = _rank(e)
    if rank is None or rank < 2:
        return e
    if isinstance(e, Constant):
        return Constant(e.data.reshape(e.data.shape[:-1] + (1,) + e.data.shape[-1:]))
    if e not in expanded:
        c = ops.call("expand_dims", e, axis=(rank - 1,))
        expanded[e] = em.emit(Binding(GraphVar(f"{getattr(e, 'name', 'x')}_2d", c.ty), c))
    return expanded[e]


def _rank(e) -> Optional[int]:
    ty = getattr(e, "ty", None)
    return len(ty.shape) if isinstance(ty, TensorType) else None


def _convertible(call: Call) -> bool:
    if call.op != "conv1d" or len(call.args) != 2:
        return False
    x, w = call.args
    return isinstance(w, Constant) and all(
        isinstance(t, TensorType) and t.dtype == "float32" and t.static_shape() is not None
        for t in (x.ty, w.ty, call.ty))

