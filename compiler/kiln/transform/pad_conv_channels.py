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
conv is blocked in whole vectors.

The elementwise operators right after the conv whose other operands are constants with one
value per channel or none (its bias, a batch norm's scale and shift, the activation) run on the
padded channels too, their constants padded with zeros, so that they stay fused into the conv's
kernel, and the slice comes after them. A slice of the leading channels of a batch-1 tensor is a
view of it (``executable/views.py``): no copy remains. (Before, the slice came first and was
fused with the bias and activation: ShuffleNetV2's 1x1 convs before its depthwise convs wrote
64 channels, then a kernel read them back for 58. Now 1-2% faster at one thread, 4% at two;
RegNetY-400MF 2-3% at two.)

A count that 8 does not divide is padded even where that doubles it: such a conv is otherwise
not blocked at all, or in blocks of 4 channels (4 accumulators). ESPCN's 32 -> 9 channel conv
over 224 x 224 (before its pixel shuffle) took 6.0 ms unblocked; padded to 16 the model went
26.8 -> 21.0 ms at one thread, 11.8 -> 10.3 at two. Alone, one thread, after a blocked conv at
112 x 112 (AVX-512): 9 -> 16 channels 0.88 of the time, 20 -> 32 0.82, 12 -> 16 1.09 (0.92 at
224 x 224); 3 or 5 channels (more than double) stay as they are (padded: 1.11, 1.07).

Otherwise only where that costs at most an eighth more channels. Always only for a conv2d with a
constant weight, groups 1 and static float32 shapes whose result flows into no conv or pool that
the layout pass keeps channel-blocked (the slice would cut a blocked chain from conv to conv); a
grouped conv, or one over a channel count 8 does not divide, reads NCHW anyway, and so does a
concat with a part that 8 does not divide (ShuffleNetV2's branches: 12% faster at one thread, 9%
at two, once the last conv of each branch is padded too). RegNetY-400MF (104 and 440 channels
before its grouped convs) 3% faster at one thread, ShuffleNetV2 (116 before depthwise convs) 4%.
``PassContext(conv_blocking=False)`` leaves every conv unblocked, and this pass then does
nothing.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphVar, TensorType
from ..ops.common import normalize_axes
from . import conv_blocked
from .graph_util import graph_functions, rewrite_function, use_counts
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
            readers, uses = _readers(func), use_counts(func)
            changed = []
            in_chain: Dict[GraphVar, int] = {}       # an op after a padded conv -> padded count
            chain_end: Dict[GraphVar, int] = {}      # the last such op -> the real count
            twins: Dict[GraphVar, GraphVar] = {}     # the padded value of each original one

            def visit(b: Binding, em, _block):
                if b.var in in_chain:                # run on the padded channels
                    call, channels = b.value, chain_end.get(b.var)
                    args = [twins[a] if isinstance(a, GraphVar) else _pad_constant(a, in_chain[b.var])
                            for a in call.args]
                    y = ops.call(call.op, *args, **dict(call.attrs))
                    twins[b.var] = em.emit(Binding(GraphVar(f"{b.var.name}_padded", y.ty), y))
                    if channels is not None:
                        em.emit(Binding(b.var, _slice(twins[b.var], channels)))
                    return
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
                chain = _channel_chain(b.var, readers, uses)
                if chain:
                    # The bias and activation after the conv run on the padded channels too
                    # (fused into the conv's kernel), and the slice comes last: a prefix of
                    # the channels, which the memory plan makes a view (executable/views.py).
                    twins[b.var] = twin
                    in_chain.update((v, padded) for v in chain)
                    chain_end[chain[-1]] = w.data.shape[0]
                else:
                    em.emit(Binding(b.var, _slice(twin, w.data.shape[0])))
                changed.append(b.var)
            new = rewrite_function(func, visit)
            if changed:
                out = out.with_function(name, new)
        return out
    return Pass("pad_conv_channels", run)


def _slice(var: GraphVar, channels: int) -> Call:
    return ops.call("strided_slice", var, begin=(0,), end=(channels,), axes=(1,))


def _channel_chain(var: GraphVar, readers, uses) -> List[GraphVar]:
    """The elementwise operators after the conv ``var`` that can run on its padded channels:
    each the only reader of the one before (used nowhere else), with constants of one value
    per channel or none as its other operands (a bias, a scale; an activation)."""
    chain: List[GraphVar] = []
    shape = var.ty.static_shape()
    while uses[var] == 1 and len(readers.get(var, ())) == 1:
        out, call = readers[var][0]
        if not elementwise(call) or not isinstance(out.ty, TensorType) \
                or out.ty.static_shape() != shape or out.ty.dtype != var.ty.dtype \
                or sum(a is var for a in call.args) != 1 \
                or not all(a is var or _per_channel_constant(a, shape) for a in call.args):
            break
        chain.append(out)
        var = out
    return chain


def _per_channel_constant(a, shape) -> bool:
    """A constant that broadcasts against ``shape`` (N, C, H, W) along its channel axis."""
    if not isinstance(a, Constant) or not isinstance(a.ty, TensorType):
        return False
    dims = np.shape(a.data)
    if len(dims) > len(shape):
        return False
    if len(dims) >= 3 and dims[-3] not in (1, shape[1]):
        return False
    return all(d in (1, s) for d, s in zip(dims[::-1], shape[::-1]))


def _pad_constant(a: Constant, padded: int) -> Constant:
    """``a`` with its channel axis (the third from the end) padded with zeros to ``padded``
    (a constant with no channel axis is the same for every channel)."""
    dims = np.shape(a.data)
    if len(dims) < 3 or dims[-3] == 1:
        return a
    width = [(0, 0)] * len(dims)
    width[-3] = (0, padded - dims[-3])
    return Constant(np.pad(a.data, width))


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
    if not o % lanes:
        return None
    if padded - o <= o // 8 or (o % 8 and padded <= 2 * o):
        return padded
    return None


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


def _unblocked_concat(call: Call) -> bool:
    """A concat that the layout pass leaves NCHW: not along the channels of 4-D values, or with
    a part whose channels 8 does not divide (ShuffleNet's 116 + 116 before its channel
    shuffle). Padding the convs before it costs nothing there: ShuffleNetV2's last 1x1 conv of
    each branch, 116 -> 116 channels, ran in blocks of 4 output channels (4 accumulators); padded
    to 128 it is blocked in whole vectors, and the model is 12% faster at one thread, 9% at two."""
    if call.op != "concat":
        return False
    shapes = [a.ty.static_shape() if isinstance(a.ty, TensorType) else None for a in call.args]
    if any(s is None or len(s) != 4 for s in shapes):
        return True
    return normalize_axes("concat", dict(call.attrs).get("axis", 0), 4) != (1,) or \
        any(s[1] % 8 for s in shapes)


def _feeds_blocked(var: GraphVar, readers) -> bool:
    """Whether ``var`` flows, through elementwise operators, into an operator that the layout
    pass keeps channel-blocked."""
    seen, todo = set(), [var]
    while todo:
        v = todo.pop()
        for out, call in readers.get(v, ()):
            if call.op in _BLOCKED_CONSUMERS and not _unblocked_conv(call) \
                    and not _unblocked_concat(call):
                return True
            if elementwise(call) and out not in seen:
                seen.add(out)
                todo.append(out)
    return False
