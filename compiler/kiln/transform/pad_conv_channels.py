"""``pad_conv_channels``: a conv whose output channels no vector width divides computes a few
zero channels more, in whole vectors, and drops them after::

    y = R.conv2d(x, W)                           # W [1000, 512, 1, 1]: 1000 = 62.5 x 16
  ->
    y_padded = R.conv2d(x, Wp)                   # Wp [1008, 512, 1, 1], rows 1000.. zero
    y = R.strided_slice(y_padded, begin=[0], end=[1000], axes=[1])

The channel-blocked conv (``conv_blocked.py``) computes its output channels in blocks of the
vector width, or of 8 channels where the width does not divide them: on an AVX-512 core a
block of 8 is half a vector, so the conv runs at half speed (SqueezeNet's classifier, 512 ->
1000 channels over 13 x 13 pixels: 69 GFLOP/s, onnxruntime 139, which pads to 1008 too), and
a count that 8 does not divide (a detection head's 255) is not blocked at all. Padded, the
conv is blocked in whole vectors; the slice copies its output once.

Only where that costs at most an eighth more channels, for a conv2d with a constant weight,
groups 1 and static float32 shapes whose result flows into no conv or pool that the layout
pass keeps channel-blocked (the slice would cut a blocked chain from conv to conv); a grouped
conv, or one over a channel count 8 does not divide, reads NCHW anyway. RegNetY-400MF (104 and
440 channels before its grouped convs) 3% faster at one thread, ShuffleNetV2 (116 before
depthwise convs) 4%.
``PassContext(conv_blocking=False)`` leaves every conv unblocked, and this pass then does
nothing.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphVar, TensorType
from . import conv_blocked
from .graph_util import graph_functions, rewrite_function
from .infra import Pass, PassContext, context
from .layout_nchwc import elementwise

# What a conv's output may flow into, through elementwise operators, for the padding to stop
# before it: operators that the layout pass would keep in the channel-blocked layout.
_BLOCKED_CONSUMERS = ("conv2d", "max_pool2d", "avg_pool2d", "resize2d", "concat")


def pad_conv_channels(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        if not (ctx.conv_blocking and ctx.prepack_weights):
            return mod
        out = mod
        for name, func in graph_functions(mod):
            readers = _readers(func)
            changed = []

            def visit(b: Binding, em, _block):
                padded = _padded_channels(b.value, ctx.simd_lanes) if isinstance(b.value, Call) \
                    else None
                if padded is None or _feeds_blocked(b.var, readers):
                    em.emit(b)
                    return
                call = b.value
                x, w = call.args
                data = np.concatenate([w.data, np.zeros((padded - w.data.shape[0],) + w.data.shape[1:],
                                                        w.data.dtype)])
                y = ops.call("conv2d", x, Constant(data), **dict(call.attrs))
                twin = em.emit(Binding(GraphVar(f"{b.var.name}_padded", y.ty), y))
                em.emit(Binding(b.var, ops.call("strided_slice", twin, begin=(0,),
                                                end=(w.data.shape[0],), axes=(1,))))
                changed.append(b.var)
            new = rewrite_function(func, visit)
            if changed:
                out = out.with_function(name, new)
        return out
    return Pass("pad_conv_channels", run)


def _padded_channels(call: Call, lanes: int) -> Optional[int]:
    """The padded output channel count for a conv this pass rewrites, else None."""
    if call.op != "conv2d" or len(call.args) != 2 or dict(call.attrs).get("groups", 1) != 1:
        return None
    x, w = call.args
    if not isinstance(w, Constant) or not all(
            isinstance(t, TensorType) and t.dtype == "float32" and t.static_shape() is not None
            for t in (x.ty, call.ty)) or w.data.dtype != np.float32:
        return None
    o = w.data.shape[0]
    padded = -(-o // lanes) * lanes
    return padded if o % lanes and padded - o <= o // 8 else None


def _readers(func) -> Dict[GraphVar, List[Tuple[GraphVar, Call]]]:
    """The calls that read each variable, with the variables they are bound to."""
    out: Dict[GraphVar, List[Tuple[GraphVar, Call]]] = {}
    for block in func.blocks:
        for b in block.bindings:
            if isinstance(b.value, Call):
                for a in b.value.args:
                    if isinstance(a, GraphVar):
                        out.setdefault(a, []).append((b.var, b.value))
    return out


def _unblocked_conv(call: Call) -> bool:
    """A conv2d that reads NCHW anyway, or may as well: grouped but not depthwise, or with a
    channel count that 8 does not divide (RegNet's grouped convs, ShuffleNet's depthwise convs
    over 116 channels). (A grouped conv in groups of 8+ channels can read its input blocked,
    ``layout_nchwc``, but RegNetY-400MF ran 2.5-7.6% faster with the conv before it padded to
    whole vectors, 104 -> 112 channels, than with that conv blocked in 8-channel blocks.)"""
    if call.op != "conv2d" or not isinstance(call.ty, TensorType) or call.ty.static_shape() is None:
        return False
    groups = conv_blocked.conv_groups(call)
    channels = call.args[0].ty.static_shape()[1]
    return (groups != 1 and groups != channels) or call.ty.static_shape()[1] % 8 != 0


def _feeds_blocked(var: GraphVar, readers) -> bool:
    """Whether ``var`` flows, through elementwise operators, into an operator that the layout
    pass keeps channel-blocked."""
    seen, todo = set(), [var]
    while todo:
        v = todo.pop()
        for out, call in readers.get(v, ()):
            if call.op in _BLOCKED_CONSUMERS and not _unblocked_conv(call):
                return True
            if elementwise(call) and out not in seen:
                seen.add(out)
                todo.append(out)
    return False
