"""``fuse_winograd``: a Winograd conv's three stages as one operator where V and M would not fit
in the cache.

``conv_winograd`` writes a conv as ``winograd_input`` -> ``winograd_gemm`` -> ``winograd_output``;
as three kernels, V (``alpha^2 / m^2`` times the input) and M (the same of the output) go
through memory between them. For an image with many tiles and few channels that traffic is
the conv's cost: ESPCN's 64 -> 32 channel conv at 224 x 224 (F(4x4)) streamed 29 MB of V and
14.5 MB of M, 15.7 ms of its 20 ms at one thread, memory bound on a host with ~9 GB/s a core.

This pass (after ``convert_layout_nchwc``, which gives the stages their channel-blocked
forms, and before ``fuse_ops``) rewrites such a chain, each stage used only by the next, into::

    lv = R.winograd_conv(x, R.const(u), padding=..., tile=4, out_channels=O, layout=...)

whose kernel (``schedule_winograd``, anchor ``winograd_conv``) runs the three stages per
block of tiles of one tile row, V and M in scratch blocks that stay in L2. Every block reads
all of the transformed weight U, so the chain is fused only when U takes at most
``U_L2_SHARE`` of L2, and only when V and M together would not fit in L2 anyway (a small
image's stages already run in cache, and the separate contraction, one GEMM over every tile,
uses its register tiles better). ``fuse_ops`` then folds the conv's epilogue into it as it
did into ``winograd_output``.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphVar
from ..ops import call as op_call
from .graph_util import graph_functions, rewrite_calls, use_counts
from .infra import Pass, PassContext, context

# The most of L2 the transformed weight may take (it is read once per block of tiles, while
# the blocks' input rows, V, M and output stream past it). One conv alone, one / two threads,
# fused against three kernels (Xeon, AVX-512, 2 MiB L2): 32 -> 32 at 224 x 224 (U 147 KB)
# 0.75 / 0.84; 64 -> 64 at 112 x 112 (590 KB) 0.93 / 0.89, at 56 x 56 1.02 / 0.92;
# 128 -> 128 at 28 x 28 (2.4 MB) 2.7 / 2.1.
U_L2_SHARE = 0.5


def worth_fusing(alpha: int, tiles: int, channels: int, out_channels: int,
                 ctx: PassContext) -> bool:
    """The rule: U (``alpha^2 x C x O`` floats) within ``U_L2_SHARE`` of L2, and V plus M
    (``alpha^2 x T x (C + O)``) more than L2.

    >>> ctx = PassContext(target="llvm -mcpu=sapphirerapids")
    >>> worth_fusing(6, 56 * 56, 64, 32, ctx)     # ESPCN at 224 x 224: 295 KB of U, 43 MB of V + M
    True
    >>> worth_fusing(6, 7 * 7, 128, 128, ctx)     # ResNet-18's 28 x 28 layer: 2.4 MB of U
    False
    """
    l2 = ctx.machine.l2_bytes
    u_bytes = alpha * alpha * channels * out_channels * 4
    vm_bytes = alpha * alpha * tiles * (channels + out_channels) * 4
    return u_bytes <= U_L2_SHARE * l2 and vm_bytes > l2


def fusable(alpha: int, tiles: int, channels: int, out_channels: int, panel: int,
            ctx: PassContext) -> bool:
    """Whether the pass fuses such a chain by its rule: U in whole panels of ``panel`` output
    channels (the kernel's register tile takes whole panels) and ``worth_fusing``. The cost
    rule asks the same (``conv_winograd.conv_plan``)."""
    return out_channels % panel == 0 and worth_fusing(alpha, tiles, channels, out_channels, ctx)


def fuse_winograd(ctx: Optional[PassContext] = None,
                  choose: Optional[Callable[[Call], bool]] = None) -> Pass:
    """The pass (module docstring). For each ``winograd_output`` whose chain may fuse (its
    ``winograd_gemm`` with a constant U and its ``winograd_input``, each used only by the next
    stage): ``choose(output_call)`` when given, else the call's ``fuse`` attribute when set
    (``conv_winograd`` sets it from a tuning record: the layer decision ``winograd`` = ``-m``
    for F(m) fused, ``m`` for three kernels), else the rule ``worth_fusing``."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        producers: Dict[GraphVar, Call] = {}
        uses = {}
        for _, func in graph_functions(mod):
            uses.update(use_counts(func))
            for block in func.blocks:
                producers.update((b.var, b.value) for b in block.bindings
                                 if isinstance(b.value, Call))

        def stage(var, op: str) -> Optional[Call]:
            call = producers.get(var) if isinstance(var, GraphVar) else None
            return call if call is not None and call.op == op and uses[var] == 1 else None

        def replace(b: Binding, em) -> Optional[Call]:
            out = b.value
            if out.op != "winograd_output":
                return None
            gemm = stage(out.args[0], "winograd_gemm")
            inp = stage(gemm.args[0], "winograd_input") if gemm is not None else None
            if inp is None or not isinstance(gemm.args[1], Constant):
                return None
            alpha, _, tiles, channels = inp.ty.static_shape()
            o, panel = gemm.ty.static_shape()[3], gemm.args[1].ty.static_shape()[4]
            if o % panel:
                return None     # (the kernel's register tile takes whole panels of U)
            a_in, a_gemm, a_out = dict(inp.attrs), dict(gemm.attrs), dict(out.attrs)
            if choose is not None:
                fuse = choose(out)
            elif a_out.get("fuse") is not None:     # a tuning record's choice (conv_winograd)
                fuse = a_out["fuse"]
            else:
                fuse = fusable(alpha, tiles, channels, o, panel, ctx)
            if not fuse:
                return None
            if tuple(a_out.get("out_size", ())) != _conv_size(inp):
                return None    # (an output cropped otherwise than the conv's: not this chain)
            return op_call("winograd_conv", inp.args[0], gemm.args[1],
                           padding=a_in.get("padding", (0, 0, 0, 0)), tile=a_in.get("tile", 4),
                           out_channels=a_gemm.get("out_channels", o),
                           layout=a_out.get("layout", "NCHW"))

        out = rewrite_calls(mod, replace)
        if out is mod:
            return mod
        from .dead_code_elimination import dead_code_elimination
        return dead_code_elimination()(out)     # the stages the fused calls replaced
    return Pass("fuse_winograd", run)


def _conv_size(inp: Call):
    from ..ops.winograd import _input_geometry
    return tuple(_input_geometry("winograd_input", inp.args[0].ty, dict(inp.attrs))[6])
