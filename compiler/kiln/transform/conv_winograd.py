"""``conv_winograd``: 3x3 stride-1 convolutions as Winograd F(4x4, 3x3), where it is faster.

A ``conv2d`` call that is

- float32 NCHW with static shapes, a 3x3 kernel, stride 1, dilation 1, groups 1 (any
  padding), and whose weight is a ``Constant`` (and ``PassContext.prepack_weights``, which
  allows transforming weights at compile time),

becomes the three operators of ``ops/winograd.py``, with the weight transformed
(``U = G g G^T``, in float64) and packed into panels of ``PassContext.pack_lanes`` output
channels here, at compile time::

    lv = R.conv2d(x, R.const(w), padding=(1, 1, 1, 1))
  ->
    lv_v = R.winograd_input(x, padding=(1, 1, 1, 1), tile=4)        # [6, 6, T, C]
    lv_m = R.winograd_gemm(lv_v, R.const(u), out_channels=O)         # [6, 6, T, O]
    lv = R.winograd_output(lv_m, out_size=(OH, OW), tile=4)          # [N, O, OH, OW]

Everything that used the conv's result uses ``winograd_output``'s, so ``fuse_ops`` folds the
conv's epilogue (bias, batch norm, relu, residual add) into the output transform. Run it
after the first ``fold_constant`` (weights are constants by then) and before ``fuse_ops``;
``default_schedule`` schedules the transform kernels (``schedule_winograd.RULES``).

Which layers: ``conv_plan`` estimates the direct conv and each tile size from the shapes, and
``ConvPlan.choice()`` picks (the cost rule, docs/winograd.md); ``choose(call, plan) -> tile or
None`` overrides it, e.g. ``decided(...)``, which asks a ``Decisions`` per conv (a tuner's
sampler, a record). F(4x4, 3x3) does 36 multiplies per 16 outputs per channel pair where the
direct conv does 144, but pays for the transforms (V and M are 36/16 of the input and output
each), for a transformed weight 4x the weight (streamed from memory when the image has few
tiles), and for partial tiles on small images (a 7x7 output takes 2x2 tiles of 4x4).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Tuple

from ..codegen.machine import DEFAULT_STREAM_RATE
from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphVar, TensorType
from ..ops import call as op_call
from ..ops import winograd
from .graph_util import graph_functions, rewrite_function
from .infra import Pass, PassContext, context

if TYPE_CHECKING:
    from ..schedule.decisions import Decisions

TILES = (4, 2)


@dataclass(frozen=True)
class WinogradCost:
    """Estimated run time of one conv2d as Winograd F(tile x tile, 3 x 3), in nanoseconds on
    one core (``winograd_cost``): the contraction and the two transforms."""
    tile: int
    gemm: float
    transforms: float
    tiles: int            # T = N * TH * TW

    @property
    def total(self) -> float:
        return self.gemm + self.transforms


@dataclass(frozen=True)
class ConvPlan:
    """The estimates for one eligible conv2d: ``direct`` (ns) and one ``WinogradCost`` per
    tile size tried. ``choice()`` is the default decision: the fastest Winograd tile when it
    is estimated at least ``MIN_GAIN`` times faster than the direct conv, else None."""
    direct: float
    options: Tuple[WinogradCost, ...]
    fused: Tuple[int, ...] = ()    # the tile sizes whose stages fuse_winograd would fuse

    def best(self) -> WinogradCost:
        return min(self.options, key=lambda c: c.total)

    def speedup(self, tile: Optional[int] = None) -> float:
        """Estimated direct / Winograd time (for ``tile``, or the best one)."""
        opt = self.best() if tile is None else next(c for c in self.options if c.tile == tile)
        return self.direct / opt.total

    def choice(self) -> Optional[int]:
        best = self.best()
        gain = MIN_GAIN_FUSED if best.tile in self.fused else MIN_GAIN
        return best.tile if self.direct >= gain * best.total else None


# The cost model's rates, fitted to one-thread measurements (bench/winograd_layers.py, ResNet-18's
# layers on a Xeon with AVX-512 (Sapphire Rapids); docs/winograd.md has the table):
# multiply-adds per ns of the direct channel-blocked conv and of the Winograd contraction when it
# is compute bound; the contraction streams the transformed weight (alpha^2 / 9 times the
# weight, too big for L2 from 128 channels on) at WEIGHT_BYTES_PER_NS, and overlaps that with
# its multiply-adds only partly (OVERLAP of the smaller of the two is added to the larger); the
# transforms cost per element of V (the input transform, the padded NHWC copy included) and of
# M (the output transform with its strided NCHW stores and the fused epilogue).
# WEIGHT_BYTES_PER_NS is the rate inside a whole model, where the previous layers have pushed
# this one's weight out of the caches: ResNet-18's 14x14 contraction, profiled in the model on
# a Xeon (family 6 model 167, one thread), took 1.21 ms with F(4x4) (9.4 MB of weight) and
# 0.85 ms with F(2x2) (4.2 MB), both fitting 10 bytes/ns; alone, with the weight left in L3 by
# the previous call, the same layer streams at ~20 (and F(2x2) was still as fast, docs/winograd.md).
# That is one core's memory stream, which depends on the CPU: with a ``PassContext`` the rule
# takes its target's (``Machine.stream_bytes_per_ns``; an AMD Zen 4 core streams about 30,
# and there ResNet-18's 7x7 layers run 1.6x faster with F(2x2) inside the model, its 14x14
# layers faster with F(4x4) than F(2x2): the model 1.20x / 1.14x at one / two threads).
MACS_PER_NS_DIRECT = 78.0
MACS_PER_NS_GEMM = 80.0
WEIGHT_BYTES_PER_NS = DEFAULT_STREAM_RATE
OVERLAP = 0.5
NS_PER_V = 0.35
NS_PER_M = 0.30
# Estimated gain below which the direct conv is kept. The estimates match the layers measured
# alone to ~15% (the model underestimates Winograd on small layers, whose V and M stay in
# cache); within a whole model a layer that streams its transformed weight from memory gains
# less than alone (ResNet-18's 512-channel 7x7 layers: 1.15x alone with F(2x2), nothing in the
# model, estimated 1.10x).
MIN_GAIN = 1.2
# The same for a conv whose stages ``fuse_winograd`` runs as one kernel (its transformed weight
# fits in L2, so it never streams from memory): ESPCN's last conv (32 -> 16 channels at
# 224 x 224), estimated 1.17x, measured 1.17x / 1.22x at one / two threads fused.
MIN_GAIN_FUSED = 1.1


def winograd_cost(n: int, c: int, o: int, out_h: int, out_w: int, tile: int = 4,
                  bytes_per_ns: float = WEIGHT_BYTES_PER_NS) -> WinogradCost:
    """Estimated time of a 3x3 stride-1 conv (N, C, O, output size) as Winograd F(tile, 3),
    its transformed weight streamed from memory at ``bytes_per_ns``."""
    alpha = tile + 2
    th, tw = winograd.tiles(out_h, out_w, tile)
    t = n * th * tw
    compute = alpha * alpha * t * c * o / MACS_PER_NS_GEMM
    weight = alpha * alpha * c * o * 4 / bytes_per_ns
    gemm = max(compute, weight) + OVERLAP * min(compute, weight)
    transforms = alpha * alpha * t * (c * NS_PER_V + o * NS_PER_M)
    return WinogradCost(tile, gemm, transforms, t)


def direct_cost(n: int, c: int, o: int, out_h: int, out_w: int) -> float:
    """Estimated time (ns) of the direct conv: its multiply-adds at the direct conv's rate."""
    return n * o * out_h * out_w * c * 9 / MACS_PER_NS_DIRECT


def conv_plan(call: Call, tiles: Sequence[int] = TILES,
              ctx: Optional[PassContext] = None) -> ConvPlan:
    """The estimates (``ConvPlan``) of an eligible conv2d call; with ``ctx``, at its target's
    memory stream rate (else ``WEIGHT_BYTES_PER_NS``), and which tile sizes ``fuse_winograd``
    would run as one kernel on its target."""
    n, c = call.args[0].ty.static_shape()[:2]
    _, o, oh, ow = call.ty.static_shape()
    rate = context(ctx).machine.stream_bytes_per_ns if ctx is not None else WEIGHT_BYTES_PER_NS
    options = tuple(winograd_cost(n, c, o, oh, ow, m, rate) for m in tiles)
    fused = ()
    if ctx is not None and ctx.winograd:
        from .fuse_winograd import fusable
        ctx = context(ctx)
        fused = tuple(w.tile for w in options
                      if fusable(w.tile + 2, w.tiles, c, o, panel_lanes(o, ctx), ctx))
    return ConvPlan(direct_cost(n, c, o, oh, ow), options, fused)


def _pair(value, default):
    if value is None:
        return default
    v = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    return v * 2 if len(v) == 1 else v


def ineligible(call: Call) -> Optional[str]:
    """Why ``call`` cannot be computed with Winograd F(m, 3), or None when it can."""
    if not isinstance(call, Call) or call.op != "conv2d" or len(call.args) != 2:
        return "not a conv2d"
    x, w = call.args
    if not isinstance(w, Constant):
        return "the weight is not a constant"
    types = (x.ty, w.ty, call.ty)
    if not all(isinstance(t, TensorType) and t.dtype == "float32" and t.static_shape() is not None
               for t in types):
        return "not float32 with static shapes"
    attrs = dict(call.attrs)
    if tuple(w.ty.static_shape()[2:]) != (3, 3):
        return "not a 3x3 kernel"
    if _pair(attrs.get("strides"), (1, 1)) != (1, 1):
        return "strided"
    if _pair(attrs.get("dilation"), (1, 1)) != (1, 1):
        return "dilated"
    groups = attrs.get("groups", 1)
    if (groups[0] if isinstance(groups, (list, tuple)) else groups) != 1:
        return "grouped"
    return None


def conv_winograd(ctx: Optional[PassContext] = None,
                  choose: Optional[Callable[[Call, ConvPlan], Optional[int]]] = None,
                  tiles: Sequence[int] = TILES) -> Pass:
    """The pass (module docstring). For each eligible conv2d, ``choose(call, plan)`` returns
    the tile size m of F(m x m, 3 x 3) to compute it with (``-m``: and its stages fused into
    one kernel by ``fuse_winograd``), or None to keep the direct conv
    (default: with ``ctx.tuning_db``, the layer's best tuning record (``tune/layers.py``),
    else ``plan.choice()``, the cost rule); ``tiles`` are the sizes the plan estimates."""
    ctx = context(ctx)
    decide = _layer_choice(ctx, choose)
    rewritten = []

    def visit(b: Binding, em, _block) -> None:
        call = b.value
        eligible = ctx.prepack_weights and ineligible(call) is None
        tile, fuse = decide(call, conv_plan(call, tiles, ctx)) if eligible else (None, None)
        if tile is None:
            em.emit(b)
            return
        x, w = call.args
        o = w.ty.static_shape()[0]
        _, _, oh, ow = call.ty.static_shape()
        u = winograd.transform_weight(w.data, tile, panel_lanes(o, ctx))
        v_call = op_call("winograd_input", x, padding=_padding(call), tile=tile)
        v = em.emit_value(GraphVar(f"{b.var.name}_v", v_call.ty), v_call)
        m_call = op_call("winograd_gemm", v, Constant(u), out_channels=o)
        m = em.emit_value(GraphVar(f"{b.var.name}_m", m_call.ty), m_call)
        em.emit_value(b.var, op_call("winograd_output", m, out_size=(oh, ow), tile=tile,
                                     **({} if fuse is None else {"fuse": fuse})))
        rewritten.append(b.var)

    def run(mod: IRModule) -> IRModule:
        out = mod
        for name, func in graph_functions(mod):
            rewritten.clear()
            new = rewrite_function(func, visit)
            if rewritten:
                out = out.with_function(name, new)
        return out
    return Pass("conv_winograd", run)


def layer_options(plan: ConvPlan) -> Tuple[list, int]:
    """The options of the layer decision ``winograd`` (``tune/layers.py``) and the cost rule's
    pick among them: 0 (direct), each tile size m (three kernels) and ``-m`` for each that
    ``fuse_winograd`` would fuse (one kernel); the pick is ``-m`` where the rule fuses."""
    choice = plan.choice() or 0
    return ([0] + [c.tile for c in plan.options] + [-t for t in plan.fused],
            -choice if choice in plan.fused else choice)


def _layer_choice(ctx: PassContext, choose: Optional[Callable[[Call, ConvPlan], Optional[int]]]
                  ) -> Callable[[Call, ConvPlan], Tuple[Optional[int], Optional[bool]]]:
    """Per conv, (the tile size or None for the direct conv, ``winograd_output``'s ``fuse``):
    ``choose``'s answer when given (``-m``: fused), else the layer's tuning record (``m``
    measured as three kernels, ``-m`` as one), else the cost rule (``fuse`` left to
    ``fuse_winograd``'s rule)."""
    def decide(call: Call, plan: ConvPlan) -> Tuple[Optional[int], Optional[bool]]:
        fuse = None
        if choose is not None:
            option = choose(call, plan)
        else:
            option = None
            if ctx.tuning_db:
                from ..tune.layers import WINOGRAD, recorded_choice
                option = recorded_choice(call, ctx, WINOGRAD, layer_options(plan)[0])
                fuse = None if option is None else option < 0
            if option is None:
                option = plan.choice()
        if not option:
            return None, None
        return abs(option), (True if option < 0 else fuse)
    return decide


def decided(decisions_for: Callable[[Call], "Decisions"]
            ) -> Callable[[Call, ConvPlan], Optional[int]]:
    """A ``choose`` for ``conv_winograd`` that states each conv's choice as the named decision
    ``winograd`` (``kiln.schedule.decisions``): 0 (the direct conv) or a tile size, the cost
    rule's pick by default. ``decisions_for(call)`` gives the ``Decisions`` of that conv (a
    record's fixed values, a tuner's sampler), e.g. keyed by its shapes."""
    def choose(call: Call, plan: ConvPlan) -> Optional[int]:
        options = [0] + [c.tile for c in plan.options]
        return decisions_for(call).choose("winograd", options, default=plan.choice() or 0) or None
    return choose


def panel_lanes(out_channels: int, ctx: PassContext) -> int:
    """Output channels per panel of the packed transformed weight: ``ctx.pack_lanes``, halved
    (down to one vector) until it divides the channels, so that no panel is partial; for a
    count that no vector width divides, the power of two (at least 4, at most
    ``pack_lanes``) that holds them, or a multiple of 8 dividing them that fills as many of
    its vectors' lanes. Inception-V3's 35 x 35 layers of 96 output channels in
    panels of 32 instead of 64 and a half-empty one: 2.4x / 2.3x (64 -> 96) and 2.8x / 2.5x
    (96 -> 96) faster at one / two threads (the partial panel's guarded stores kept its
    register tile out of registers)."""
    lanes = ctx.pack_lanes
    p = lanes
    while p > ctx.simd_lanes and out_channels % p:
        p //= 2
    if out_channels % p == 0:
        return p
    padded = 4
    while padded < out_channels:
        padded *= 2
    padded = min(padded, lanes)
    # Or the widest multiple of 8 lanes that divides them (24 channels: a vector and a half),
    # when its vector lanes do as much useful work as the padded panels': its panels have no
    # lanes to guard. EfficientNetV2-S's 24 -> 24 conv at 112 x 112 in one panel of 32 had
    # every tile guarded (its GEMM at 39 GFLOP/s); in one of 24 it is fused, 1.03 -> 0.59 ms.
    exact = [q for q in range(8, lanes + 1, 8) if out_channels % q == 0]
    if exact and _lanes_used(out_channels, max(exact), ctx) >= \
            _lanes_used(out_channels, padded, ctx):
        return max(exact)
    return padded


def _lanes_used(channels: int, panel: int, ctx: PassContext) -> float:
    """The share of the vector lanes that panels of ``panel`` lanes fill with ``channels``."""
    vectors = -(-channels // panel) * -(-panel // ctx.simd_lanes)
    return channels / (vectors * ctx.simd_lanes)


def _padding(call: Call):
    from ..ops.nn import _padding as conv_padding
    before, after = conv_padding("conv2d", dict(call.attrs).get("padding", (0, 0, 0, 0)), 2)
    return tuple(before) + tuple(after)


def with_winograd(pipeline, ctx: Optional[PassContext] = None,
                  choose: Optional[Callable[[Call, ConvPlan], Optional[int]]] = None,
                  tiles: Sequence[int] = TILES):
    """``pipeline`` (a ``Sequential`` such as ``kiln.get_pipeline("default")``) with its
    ``conv_winograd`` pass made with ``choose`` and ``tiles`` (e.g. a forced tile size, for
    measuring), or with one inserted where the default pipeline runs it (before
    ``convert_layout_nchwc``, or ``fuse_ops``) when the pipeline has none. The transform
    kernels need nothing more: ``default_schedule`` schedules them."""
    from .infra import Sequential
    ctx = context(ctx if ctx is not None else getattr(pipeline, "ctx", None))
    mine = conv_winograd(ctx, choose, tiles)
    names = [p.name for p in pipeline]
    if "conv_winograd" in names:
        passes = [mine if p.name == "conv_winograd" else p for p in pipeline]
    else:
        before = "convert_layout_nchwc" if "convert_layout_nchwc" in names else "fuse_ops"
        passes = []
        for p in pipeline:
            if p.name == before:
                passes.append(mine)
            passes.append(p)
    return Sequential(passes, name=f"{pipeline.name}+winograd", ctx=ctx)
