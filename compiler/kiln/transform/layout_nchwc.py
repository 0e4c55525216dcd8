"""``convert_layout_nchwc``: channel-blocked (NCHW[b]c) activations from conv to conv.

A channel-blocked conv (``conv_blocked.py``) reads NCHW and writes NCHW: each output pixel's
``b`` channels are scattered across ``b`` channel planes, and a depthwise conv, vectorized
along the width, needs shuffles at stride 2. This pass keeps the activations between convs
blocked, ``[N, C/b, H, W, b]`` (``ops/nchwc.py``), so that every conv's write-back stores whole
vectors and every depthwise tap is one contiguous vector load:

- a ``conv2d`` with a constant weight, groups = 1 (or groups of a multiple of 8 channels,
  ``conv_blocked.group_width``; its input read blocked when a group's channels and the input's
  blocks nest) and a multiple of 8 output channels becomes
  ``conv2d_nchwc``, its weight packed here (``[O/b, KH, KW, I, b]``, the block ``b`` of its
  output from the target: ``conv_blocked.conv_tile``); it reads its input blocked when the
  producer is, else NCHW (so the first conv of a region absorbs the layout change: no
  separate repack of the graph's input);
- a depthwise ``conv2d`` (groups = C = O) of a blocked input becomes
  ``depthwise_conv2d_nchwc`` (block of its input, weight ``[C/b, KH, KW, b]``); one of an
  NCHW input does too, its input re-laid out in front of it (``_depthwise_entry``);
- ``max_pool2d`` / ``avg_pool2d`` of a blocked input become their ``_nchwc`` operators, and a
  ``resize2d`` (upsampling) reads and writes it blocked, each output pixel's channels one
  vector from its source pixels' (in NCHW every output vector gathered its inputs);
- a ``concat`` along the channels whose parts are each a whole number of blocks concatenates
  the blocked parts along the channel-block axis (a part that arrives in NCHW is re-laid out);
  ``mean`` / ``sum`` / ``max`` / ``min`` over the spatial axes (global pooling; an
  ``adaptive_avg_pool2d`` to 1 x 1 becomes such a ``mean``), a ``batch_norm`` with constant
  parameters (as a multiply and an add) and elementwise
  / broadcast operators (bias, batch-norm scale and shift, relu, clip, residual add) with a
  blocked operand run on the 5-D tensors as they are, their constant operands (a bias
  ``[1, C, 1, 1]``) re-laid out here as ``[1, C/b, 1, 1, b]``;
- everything else (flatten, reshape, linear, Winograd transforms, narrow grouped convs, channel
  counts not a multiple of 8, other concats) reads NCHW: a ``layout_transform`` back to NCHW
  is bound to the original variable right after the blocked value, once, for all of them.

Before (``lv3 = relu(conv2d(lv1) + b)`` feeding another conv)::

    lv0 = R.conv2d(x, W0, padding=(1, 1))            # [1, 64, 56, 56]
    lv1 = R.relu(R.add(lv0, b0))
    lv2 = R.conv2d(lv1, W1, padding=(1, 1))
    gv = R.add(lv2, b1)

After (block 32)::

    lv0_c = R.conv2d_nchwc(x, W0p, padding=(1, 1), out_layout="NCHW32c")   # [1, 2, 56, 56, 32]
    lv1_c = R.relu(R.add(lv0_c, b0p))                                      # b0p [1, 2, 1, 1, 32]
    lv2_c = R.conv2d_nchwc(lv1_c, W1p, padding=(1, 1), out_layout="NCHW32c")
    gv_c = R.add(lv2_c, b1p)
    gv = R.layout_transform(gv_c, src="NCHW32c", dst="NCHW")

Which regions: values are blocked where the graph gains from it. A conv's output is blocked
only when a blocked consumer wants it (a conv, depthwise conv, pool or spatial reduction,
possibly through elementwise operators), else it writes NCHW itself (``out_layout="NCHW"``).
A connected region of blocked values with fewer than ``MIN_CONVS`` convolutions is left as it
was: one conv gains nothing from a blocked output that must be transformed back.

Run it after ``conv_winograd`` (whose operators read and write NCHW, so the regions stop at
them) and before ``fuse_ops``, which folds the elementwise operators into the blocked convs'
write-backs. ``PassContext(nchwc_layout=False)`` leaves it out of the default pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import numpy as np

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, Function, GraphVar, TensorType
from ..ops.common import normalize_axes
from ..ops.nchwc import layout_name, pack_conv_weight, pack_depthwise_weight
from . import conv_blocked
from .graph_util import graph_functions, is_op_call, rewrite_function, vars_in
from .infra import Pass, PassContext, context

# A blocked region with fewer convolutions (regular, depthwise or Winograd) is left in NCHW.
MIN_CONVS = 2
# Multiply-adds from which a depthwise conv of an NCHW value runs blocked (``_depthwise_entry``).
ENTRY_MACS = 1 << 20
# Elementwise / broadcast operators whose result does not depend on where the channel axis is
# (their attributes name no axis or shape).
_NOT_ELEMENTWISE = ("batch_norm", "broadcast_to")
_REDUCTIONS = ("mean", "sum", "max", "min")
_POOLS = {"max_pool2d": "max_pool2d_nchwc", "avg_pool2d": "avg_pool2d_nchwc"}
_HEAVY = ("conv", "depthwise", "pool", "resize", "reduce", "winograd_input")
# Nodes that make a blocked value from operands that have no layout (like a conv's output),
# and nodes whose result has no layout (a sink of blocked values).
_PRODUCERS = ("conv", "winograd_output")
_SINKS = ("winograd_input",)


def convert_layout_nchwc(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        out = mod
        for name, func in graph_functions(mod):
            new = _convert(func, ctx)
            if new is not func:
                out = out.with_function(name, new)
        return out
    return Pass("convert_layout_nchwc", run)


@dataclass
class _Node:
    """A binding that may run channel-blocked: its kind, the block of its blocked result."""
    var: GraphVar
    call: Call
    kind: str                    # "conv", "depthwise", "pool", "resize", "reduce", "elementwise",
    #                              "batch_norm", "winograd_input" or "winograd_output"
    block: int
    inputs: List[GraphVar] = field(default_factory=list)   # var arguments that arrive blocked
    demanded: bool = False       # a blocked consumer reads its result
    # Another node of the same computation (a Winograd output's input transform): one region.
    link: Optional[GraphVar] = None
    # A depthwise conv of an NCHW value, blocked all the same (``_depthwise_entry``).
    entry: bool = False


# ---- which bindings ---------------------------------------------------------------------------

def _static_f32(*types) -> bool:
    return all(isinstance(t, TensorType) and t.dtype == "float32" and t.static_shape() is not None
               for t in types)


def _pair(value, default) -> Tuple[int, ...]:
    if value is None:
        return default
    v = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    return v * 2 if len(v) == 1 else v


def conv_kind(call: Call, ctx: PassContext) -> Optional[str]:
    """"conv" (a regular conv this pass blocks), "depthwise", or None."""
    if call.op != "conv2d" or len(call.args) != 2 or not isinstance(call.args[1], Constant):
        return None
    if not (ctx.conv_blocking and ctx.prepack_weights):
        return None
    x, w = call.args
    if not _static_f32(x.ty, w.ty, call.ty) or len(w.ty.static_shape()) != 4:
        return None
    groups = conv_blocked.conv_groups(call)
    o, cg = w.ty.static_shape()[:2]
    if cg == 1 and groups == o == x.ty.static_shape()[1]:
        return "depthwise"
    width = conv_blocked.group_width(call)     # a regular conv, or groups of 8+ channels
    if width is None:
        return None
    out = call.ty.static_shape()
    return "conv" if conv_blocked.conv_tile(width, out[2], out[3], ctx) is not None else None


def _channel_axis_size(shape, channels: int) -> Optional[int]:
    """The size (1 or ``channels``) of the channel axis of an operand of ``shape`` broadcast
    against an NCHW result of ``channels`` channels; None when it is neither or the operand has
    more than 4 dims."""
    if len(shape) > 4:
        return None
    full = (1,) * (4 - len(shape)) + tuple(shape)
    return full[1] if full[1] in (1, channels) else None


def elementwise(call: Call) -> bool:
    """An elementwise or broadcast operator whose attributes name no axis or shape, so it may
    run on its operands in another layout."""
    if not is_op_call(call) or call.op in _NOT_ELEMENTWISE:
        return False
    try:
        op = ops.get(call.op)
    except ops.OpError:
        return False
    return op.pattern in ("elemwise", "broadcast") and op.compute is not None and \
        not any(k in ("axis", "axes", "shape") for k, _ in call.attrs)


def _spatial_reduction(call: Call) -> bool:
    """A reduction over the spatial axes (a global pool): ``mean`` / ``sum`` / ``max`` / ``min``
    over axes (2, 3), or ``adaptive_avg_pool2d`` to 1 x 1 (run as ``mean``)."""
    if call.op == "adaptive_avg_pool2d" and _static_f32(call.args[0].ty, call.ty):
        return tuple(call.ty.static_shape()[2:]) == (1, 1)
    if call.op not in _REDUCTIONS or not _static_f32(call.args[0].ty):
        return False
    shape = call.args[0].ty.static_shape()
    if len(shape) != 4:
        return False
    attrs = dict(call.attrs)
    try:
        axes = normalize_axes(call.op, attrs.get("axis"), 4, shape)
    except ops.OpError:
        return False
    return tuple(sorted(axes)) == (2, 3) and set(attrs) <= {"axis", "keepdims"}


def _candidates(func: Function, ctx: PassContext) -> Dict[GraphVar, _Node]:
    """Forward: the bindings (of dataflow blocks) that can run blocked if every blocked-capable
    producer does."""
    nodes: Dict[GraphVar, _Node] = {}
    calls: Dict[GraphVar, Call] = {}
    for block in func.blocks:
        if not block.dataflow:
            continue
        for b in block.bindings:
            call = b.value
            if not isinstance(call, Call) or not is_op_call(call) or \
                    not isinstance(call.ty, TensorType):
                continue
            calls[b.var] = call
            node = _candidate(b.var, call, nodes, ctx)
            if node is not None:
                if node.kind == "winograd_output":
                    node.link = _winograd_input_of(call, calls)
                nodes[b.var] = node
    return nodes


def _winograd_input_of(call: Call, calls: Dict[GraphVar, Call]) -> Optional[GraphVar]:
    """The ``winograd_input`` variable whose transform ``call`` (a ``winograd_output``) ends:
    ``winograd_output(winograd_gemm(winograd_input(x), u))``."""
    gemm = calls.get(call.args[0])
    if gemm is None or gemm.op != "winograd_gemm" or gemm.args[0] not in calls:
        return None
    return gemm.args[0] if calls[gemm.args[0]].op == "winograd_input" else None


def _candidate(var: GraphVar, call: Call, nodes, ctx: PassContext) -> Optional[_Node]:
    arg0 = call.args[0] if call.args else None
    src = nodes.get(arg0) if isinstance(arg0, GraphVar) else None
    kind = conv_kind(call, ctx)
    if kind == "conv":
        block = conv_blocked.conv_block(call, ctx)
        # A grouped conv reads its input blocked when a group's channels and the blocks nest.
        cg = call.args[1].ty.static_shape()[1]
        nests = conv_blocked.conv_groups(call) == 1 or \
            (src is not None and (cg % src.block == 0 or src.block % cg == 0))
        return _Node(var, call, "conv", block, [arg0] if src is not None and nests else [])
    if call.op == "winograd_output" and _static_f32(call.ty) and \
            "layout" not in dict(call.attrs):
        o = call.ty.static_shape()[1]
        blocks = conv_blocked.channel_blocks(o, ctx)
        return _Node(var, call, "winograd_output", blocks[0]) if blocks else None
    if elementwise(call):
        if not any(isinstance(a, GraphVar) and a in nodes for a in call.args):
            return None
        return _elementwise_candidate(var, call, nodes)
    if call.op == "concat":
        return _concat_candidate(var, call, nodes, ctx)
    if src is None:
        return _depthwise_entry(var, call, ctx) if kind == "depthwise" else None
    if call.op == "winograd_input":
        return _Node(var, call, "winograd_input", src.block, [arg0])
    if kind == "depthwise":
        return _Node(var, call, "depthwise", src.block, [arg0])
    if call.op in _POOLS and _static_f32(call.ty) and len(call.ty.static_shape()) == 4:
        return _Node(var, call, "pool", src.block, [arg0])
    if call.op == "resize2d" and _static_f32(call.ty) and len(call.ty.static_shape()) == 4:
        return _Node(var, call, "resize", src.block, [arg0])
    if _spatial_reduction(call):
        return _Node(var, call, "reduce", src.block, [arg0])
    if _constant_batch_norm(call):
        return _Node(var, call, "batch_norm", src.block, [arg0])
    return None


def _depthwise_entry(var: GraphVar, call: Call, ctx: PassContext) -> Optional[_Node]:
    """A depthwise conv of an NCHW value (ConvNeXt's first stage, whose blocks begin with one
    after a layer norm done in NHWC) is blocked even alone, its input re-laid out in front of
    it and its result behind it (a region of its own; ``_regions`` keeps it): in NCHW it is a
    contraction with nothing to unroll but the width, a one-vector tile with one accumulator.
    ConvNeXt-T's 7x7 96-channel convs at 56 x 56: 0.66 ms each in NCHW, 0.25 ms blocked plus
    0.10 ms of re-layout in front (the one behind is fused into the permute after it). Only
    at stride 1 and from ``ENTRY_MACS`` multiply-adds: a small one (a 3x3 at stride 2 on
    9 x 9) runs faster in NCHW than its re-layouts take."""
    _, c, h, w = call.ty.static_shape()
    kh, kw = call.args[1].ty.static_shape()[2:]
    if _pair(dict(call.attrs).get("strides", 1), 1) != (1, 1) or h * w * c * kh * kw < ENTRY_MACS:
        return None
    blocks = conv_blocked.channel_blocks(c, ctx)
    return _Node(var, call, "depthwise", blocks[0], entry=True) if blocks else None


def _constant_batch_norm(call: Call) -> bool:
    """An inference ``batch_norm`` over the channels of an NCHW tensor with constant statistics
    and affine parameters (run as a multiply and an add on blocked activations)."""
    if call.op != "batch_norm" or not _static_f32(call.ty) or len(call.ty.static_shape()) != 4:
        return False
    try:
        axis = normalize_axes("batch_norm", dict(call.attrs).get("axis", 1), 4)
    except ops.OpError:
        return False
    return axis == (1,) and all(isinstance(a, Constant) for a in call.args[1:])


def _elementwise_candidate(var: GraphVar, call: Call, nodes) -> Optional[_Node]:
    out = call.ty.static_shape()
    if out is None or len(out) != 4 or not _static_f32(call.ty):
        return None
    blocked = [a for a in call.args if isinstance(a, GraphVar) and a in nodes]
    block = nodes[blocked[0]].block
    if out[1] % block:
        return None
    for a in call.args:
        shape = a.ty.static_shape() if isinstance(a.ty, TensorType) else None
        if shape is None:
            return None
        if isinstance(a, Constant):
            if _channel_axis_size(shape, out[1]) is None:
                return None
        elif a not in nodes and (len(shape) != 4 or shape[1] != out[1]):
            return None        # a run-time operand that has no blocked form here
    return _Node(var, call, "elementwise", block, list(dict.fromkeys(blocked)))


def _concat_candidate(var: GraphVar, call: Call, nodes, ctx: PassContext) -> Optional[_Node]:
    """A concat along the channels of 4-D values, one of them blocked, each a whole number of
    blocks: the blocked values concatenated along the channel-block axis are the blocked
    result (DenseNet's and SqueezeNet's concats; the others are re-laid out once).

    The result takes the block of its first part that does not come from a Winograd output (a
    conv's block, chosen for its tile), and a part that does (through its bias and activation,
    ``_winograd_chain``) is written in that block too where its channels allow: a Winograd
    output can write any. Otherwise that part is re-laid out: SqueezeNet on AVX2, whose 3x3
    expand convs (Winograd) wrote 16-channel blocks and its 1x1 ones 8, re-laid out every fire
    module's 3x3 half (0.63 ms of 9)."""
    out = call.ty.static_shape()
    if out is None or len(out) != 4 or not _static_f32(call.ty) or \
            normalize_axes("concat", dict(call.attrs).get("axis", 0), 4) != (1,):
        return None
    blocked = list(dict.fromkeys(a for a in call.args if isinstance(a, GraphVar) and a in nodes))
    if not blocked:
        return None
    chains = {a: _winograd_chain(a, nodes) for a in blocked}
    block = nodes[next((a for a in blocked if not chains[a]), blocked[0])].block
    for a in call.args:
        shape = a.ty.static_shape() if isinstance(a.ty, TensorType) else None
        if not isinstance(a, GraphVar) or shape is None or len(shape) != 4 or shape[1] % block:
            return None
    for a in blocked:
        if chains[a] and nodes[a].block != block \
                and block in conv_blocked.channel_blocks(a.ty.static_shape()[1], ctx):
            for v in chains[a]:
                nodes[v].block = block
    return _Node(var, call, "concat", block, blocked)


def _winograd_chain(var: GraphVar, nodes) -> List[GraphVar]:
    """The blocked values from a Winograd output to ``var`` through elementwise nodes (its bias
    and activation) of one blocked input each, none read by any node yet: their block is free
    to change together. Empty when ``var`` is not at the end of such a chain."""
    chain: List[GraphVar] = []
    while True:
        node = nodes[var]
        # Read by no node, or (inside the chain) only by the next value of the chain.
        if any(var in n.inputs and (not chain or n.var is not chain[-1]) for n in nodes.values()):
            return []
        chain.append(var)
        if node.kind == "winograd_output":
            return chain
        if node.kind != "elementwise" or len(node.inputs) != 1:
            return []
        var = node.inputs[0]


# ---- which regions ----------------------------------------------------------------------------

def _consumers(nodes: Dict[GraphVar, _Node]) -> Dict[GraphVar, List[_Node]]:
    out: Dict[GraphVar, List[_Node]] = {v: [] for v in nodes}
    for n in nodes.values():
        for i in n.inputs:
            out[i].append(n)
    return out


def _regions(nodes: Dict[GraphVar, _Node]) -> Dict[GraphVar, _Node]:
    """``nodes`` without the regions (connected through blocked inputs) that hold fewer than
    ``MIN_CONVS`` convolutions."""
    parent = {v: v for v in nodes}

    def root(v):
        while parent[v] is not v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v
    for n in nodes.values():
        for i in n.inputs + ([n.link] if n.link in nodes else []):
            parent[root(i)] = root(n.var)
    convs: Dict[GraphVar, int] = {}
    for n in nodes.values():
        if n.kind in ("conv", "depthwise", "winograd_output"):
            # A depthwise entry is worth its re-layouts alone (``_depthwise_entry``).
            convs[root(n.var)] = convs.get(root(n.var), 0) + (MIN_CONVS if n.entry else 1)
    return {v: n for v, n in nodes.items() if convs.get(root(v), 0) >= MIN_CONVS}


def _demand(nodes: Dict[GraphVar, _Node]) -> None:
    """Backward: a node's result is demanded blocked when a consumer reads it blocked and that
    consumer is a conv, pool or reduction, or is itself demanded."""
    consumers = _consumers(nodes)
    for n in reversed(list(nodes.values())):
        n.demanded = any(c.kind in _HEAVY or c.demanded for c in consumers[n.var])


def _settle(nodes: Dict[GraphVar, _Node]) -> Dict[GraphVar, _Node]:
    """Forward: the nodes that run blocked, given that a conv whose result no blocked consumer
    wants writes NCHW (and so its elementwise consumers run NCHW unless another operand is
    blocked). A conv kept here may read blocked and write NCHW. An elementwise node whose
    result no blocked consumer wants runs blocked only when all its run-time operands are
    (else it runs NCHW: the blocked ones are transformed back, which they must be anyway)."""
    out: Dict[GraphVar, _Node] = {}
    stored: Set[GraphVar] = set()        # values held blocked
    for v, n in nodes.items():
        n.inputs = [i for i in n.inputs if i in stored]
        if n.kind in _PRODUCERS:
            if n.demanded:
                stored.add(v)
            if n.demanded or n.inputs:
                out[v] = n
            continue
        if not n.inputs and not n.entry:
            continue                     # no blocked input after all: stays NCHW
        if n.kind in ("elementwise", "concat") and not n.demanded and any(
                isinstance(a, GraphVar) and a not in stored for a in n.call.args):
            continue     # it would re-lay out an NCHW operand for a result wanted in NCHW
        out[v] = n
        if n.kind not in _SINKS:
            stored.add(v)
    return out


# ---- the rewrite ------------------------------------------------------------------------------

def _convert(func: Function, ctx: PassContext) -> Function:
    nodes = _candidates(func, ctx)
    nodes = _regions(nodes)
    if not nodes:
        return func
    _demand(nodes)
    nodes = _settle(nodes)
    if not nodes:
        return func
    return rewrite_function(func, _Rewriter(func, nodes).visit)


class _Rewriter:
    """Emits each node's blocked call, its arguments' layout changes (each once) and, when a
    use reads it in NCHW, the ``layout_transform`` back bound to the original variable."""

    def __init__(self, func: Function, nodes: Dict[GraphVar, _Node]):
        self.nodes = nodes
        self.blocked_reads = {i for n in nodes.values() for i in n.inputs}
        self.nchw_uses = _nchw_uses(func, nodes)
        self.blocked_of: Dict[GraphVar, Tuple[GraphVar, int]] = {}   # var -> (blocked, block)
        self.converted: Dict[Tuple[GraphVar, int], GraphVar] = {}

    def as_blocked(self, em, var: GraphVar, block: int) -> GraphVar:
        """``var`` in NCHW[block]c: its blocked value, or a layout_transform of it (once)."""
        have = self.blocked_of.get(var)
        if have is not None and have[1] == block:
            return have[0]
        key = (var, block)
        if key not in self.converted:
            src, src_layout = (have[0], layout_name(have[1])) if have else (var, "NCHW")
            call = ops.call("layout_transform", src, src=src_layout, dst=layout_name(block))
            name = f"{var.name}_{layout_name(block)}"
            self.converted[key] = em.emit_value(GraphVar(name, call.ty), call)
        return self.converted[key]

    def visit(self, b: Binding, em, _block) -> None:
        node = self.nodes.get(b.var)
        if node is None:
            em.emit(b)
            return
        call = self.blocked_call(node, b.value, em)
        if node.kind in _SINKS or (node.kind == "conv" and not node.demanded):
            em.emit_value(b.var, call)       # a conv reading blocked, writing NCHW
            return
        bvar = em.emit_value(GraphVar(f"{b.var.name}_{layout_name(node.block)}", call.ty), call)
        if node.kind == "reduce" and len(call.ty.static_shape()) == 3:
            # mean(..., keepdims=False): [N, C/b, b] is [N, C] in memory order
            em.emit_value(b.var, ops.call("reshape", bvar, shape=tuple(b.var.ty.static_shape())))
            return
        self.blocked_of[b.var] = (bvar, node.block)
        if b.var in self.nchw_uses or b.var not in self.blocked_reads:
            em.emit_value(b.var, ops.call("layout_transform", bvar,
                                          src=layout_name(node.block), dst="NCHW"))

    def blocked_call(self, node: _Node, call: Call, em) -> Call:
        """The blocked operator call computing ``node`` (arguments re-laid out as needed)."""
        attrs = dict(call.attrs)
        x = call.args[0]
        conv = {k: attrs[k] for k in ("strides", "padding", "dilation") if k in attrs}
        if node.kind == "conv":
            src = self.blocked_of[x][0] if node.inputs else x
            out_layout = layout_name(node.block) if node.demanded else "NCHW"
            weight = pack_conv_weight(call.args[1].data, node.block)
            groups = conv_blocked.conv_groups(call)
            return ops.call("conv2d_nchwc", src, Constant(weight), out_layout=out_layout,
                            **conv, **({"groups": groups} if groups != 1 else {}))
        if node.kind == "winograd_output":
            return ops.call(call.op, x, layout=layout_name(node.block), **attrs)
        if node.kind == "elementwise":
            channels = call.ty.static_shape()[1]
            args = [_blocked_constant(a, channels, node.block) if isinstance(a, Constant)
                    else self.as_blocked(em, a, node.block) for a in call.args]
            return ops.call(call.op, *args, **attrs)
        xb = self.as_blocked(em, x, node.block)
        if node.kind == "winograd_input":
            return ops.call(call.op, xb, **attrs)
        if node.kind == "depthwise":
            weight = pack_depthwise_weight(call.args[1].data, node.block)
            return ops.call("depthwise_conv2d_nchwc", xb, Constant(weight), **conv)
        if node.kind == "pool":
            return ops.call(_POOLS[call.op], xb, **attrs)
        if node.kind == "resize":
            return ops.call("resize2d", xb, **attrs)
        if node.kind == "concat":
            return ops.call("concat", *[self.as_blocked(em, a, node.block) for a in call.args],
                            axis=1)
        if node.kind == "batch_norm":
            # x * scale + shift, scale = gamma / sqrt(var + eps), shift = beta - mean * scale
            gamma, beta, mean, var = (a.data.astype(np.float64) for a in call.args[1:])
            scale = gamma / np.sqrt(var + attrs.get("eps", 1e-5))
            shift = beta - mean * scale
            c = call.ty.static_shape()[1]
            scaled = ops.call("multiply", xb, _blocked_constant(
                Constant(scale.astype("float32").reshape(c, 1, 1)), c, node.block))
            xs = em.emit_value(GraphVar(f"{x.name}_scaled", scaled.ty), scaled)
            return ops.call("add", xs, _blocked_constant(
                Constant(shift.astype("float32").reshape(c, 1, 1)), c, node.block))
        assert node.kind == "reduce", node.kind
        if call.op == "adaptive_avg_pool2d":
            return ops.call("mean", xb, axis=(2, 3), keepdims=True)
        attrs["axis"] = (2, 3)
        return ops.call(call.op, xb, **attrs)


def _nchw_uses(func: Function, nodes: Dict[GraphVar, _Node]) -> Set[GraphVar]:
    """The variables some use reads in NCHW: any use but as a blocked input of a node."""
    out: Set[GraphVar] = set()
    for b in func.bindings():
        node = nodes.get(b.var)
        blocked = set(node.inputs) if node is not None else set()
        args = b.value.args if isinstance(b.value, Call) and is_op_call(b.value) else None
        if args is None:
            out.update(vars_in(b.value))
            continue
        for a in args:
            if a not in blocked:
                out.update(vars_in(a))
    out.update(vars_in(func.body))
    return out


def _blocked_constant(c: Constant, channels: int, block: int) -> Constant:
    """A constant operand of an elementwise operator on NCHW values, for the same operator on
    NCHW[block]c values: a per-channel axis split into ``[C/block, ..., block]``."""
    data = c.data
    if data.ndim == 0 or data.size == 1:
        return c
    full = data.reshape((1,) * (4 - data.ndim) + data.shape)
    n, ch, h, w = full.shape
    if ch == 1:
        return Constant(np.ascontiguousarray(full.reshape(n, 1, h, w, 1)))
    return Constant(np.ascontiguousarray(
        full.reshape(n, channels // block, block, h, w).transpose(0, 1, 3, 4, 2)))
