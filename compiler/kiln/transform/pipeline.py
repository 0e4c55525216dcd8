"""Named pipelines: ``kiln.get_pipeline(name, ctx=None)`` returns a ``Sequential``.

``"zero"`` — the minimum that makes a module compilable, and nothing that changes the graph:

    legalize -> default_schedule

  (weights are never pre-packed here: that needs fold_constant, which "zero" leaves out.)

``"default"`` — everything, in this order (and why):

    fold_constant            operators on constants (bound weights, shapes) via numpy
                             references, before anything else sees them
    simplify_power           power by a constant 2, 3, -1 or 0.5 -> multiplies, divide, sqrt (a
                             kernel's constants are parameters: pow(x, c1) is libm's powf)
    eliminate_common_subexpr merge identical calls ...
    dead_code_elimination    ... and drop what is left unused, so fusion sees true use counts
    conv1d_as_2d             a conv1d with a constant weight becomes a conv2d of height 1,
                             channel-blocked like one (PassContext(conv_blocking=False): off)
    conv_live_taps           a conv computes only the taps that read its input, not its
                             padding: dead taps dropped, a mostly-padding dilated conv split
                             into bands of live taps (DeepLabV3's ASPP)
    pad_conv_channels        a conv whose output channels no vector width divides (1000)
                             computes them padded to whole vectors, then slices
    conv_winograd            3x3 stride-1 convs with a constant weight that the cost rule
                             says are faster as Winograd F(4x4, 3x3) become its three
                             operators (docs/winograd.md; PassContext(winograd=False): off)
    fuse_attention           softmax(q @ kt * scale + mask) @ v -> one attention kernel per
                             block of query rows (PassContext(fuse_attention=False): off)
    flatten_matmul_rows      x[1, 7, 7, K] @ W[K, N] -> one product over 49 rows, its
                             elementwise epilogue with it (a channels-last model's layers);
                             a one-pixel 1x1 conv (squeeze-and-excitation) -> a linear
    convert_layout_nchwc     activations channel-blocked (NCHW[b]c) from conv to conv
                             (docs/layout.md; PassContext(nchwc_layout=False): off)
    fold_channel_scale       a squeeze-and-excitation gate scales the next 1x1 conv's weight,
                             not the activation (where the weight is the smaller)
    fuse_winograd            a Winograd conv whose V and M would not fit in L2 and whose
                             transformed weight does: its three operators as one, run
                             per block of tiles (ESPCN's 224 x 224 layer)
    split_as_slices          a split whose pieces are taken one by one -> one slice each, which
                             fuses into its reader (a GRU's gates read the product in place)
    fuse_ops                 operator groups -> one tensor program each (weights of
                             linear/matmul that are constants get a pack call_tir)
    legalize                 the remaining single operators -> tensor programs
    fold_constant            run the pack kernels on the constant weights now, at compile time
    dead_code_elimination    drop the pack kernels and anything else no longer called
    default_schedule         a schedule per kernel kind for every unscheduled tensor program

Options come from the ``PassContext`` (``kiln.transform.PassContext``), never from the
environment: ``kiln.get_pipeline("default", PassContext(prepack_weights=False))``. The target
is one of them: weight layouts and every schedule rule's tile sizes derive from it
(``get_pipeline("default", target="llvm -mcpu=znver3")``; the host when not given).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from .dead_code_elimination import dead_code_elimination
from .default_schedule import default_schedule
from .eliminate_common_subexpr import eliminate_common_subexpr
from .conv1d_as_2d import conv1d_as_2d
from .conv_live_taps import conv_live_taps
from .conv_winograd import conv_winograd
from .fold_constant import fold_constant
from .fuse_attention import fuse_attention
from .flatten_matmul_rows import flatten_matmul_rows
from .fold_channel_scale import fold_channel_scale
from .fuse_ops import fuse_ops
from .fuse_winograd import fuse_winograd
from .split_as_slices import split_as_slices
from .infra import Pass, PassContext, Sequential, context
from .layout_nchwc import convert_layout_nchwc
from .pad_conv_channels import pad_conv_channels
from .simplify_power import simplify_power
from .legalize import legalize


def _zero(ctx: PassContext) -> List[Pass]:
    plain = ctx.replace(prepack_weights=False)
    return [legalize(plain), default_schedule(ctx)]


def _default(ctx: PassContext) -> List[Pass]:
    return [
        fold_constant(ctx),
        simplify_power(ctx),
        eliminate_common_subexpr(),
        dead_code_elimination(),
        conv1d_as_2d(ctx),
        conv_live_taps(ctx),
        pad_conv_channels(ctx),
        *([conv_winograd(ctx)] if ctx.winograd else []),
        fuse_attention(ctx),
        flatten_matmul_rows(ctx),
        *([convert_layout_nchwc(ctx), fold_channel_scale(ctx)] if ctx.nchwc_layout else []),
        *([fuse_winograd(ctx)] if ctx.winograd else []),
        split_as_slices(ctx),
        fuse_ops(ctx),
        legalize(ctx),
        fold_constant(ctx),
        dead_code_elimination(),
        default_schedule(ctx),
    ]


PIPELINES: Dict[str, Callable[[PassContext], List[Pass]]] = {"zero": _zero, "default": _default}


def _for_cuda(make: Callable[[PassContext], List[Pass]], ctx: PassContext) -> List[Pass]:
    """Pipeline ``make`` for a GPU: the graph passes with the CPU's layout choices off (no
    pre-packed weights, NCHWc, Winograd or fused CPU attention kernels), then every kernel
    given the default GPU schedule (``kiln.codegen.cuda.schedule``) instead of a CPU one."""
    from ..codegen.cuda.schedule import gpu_default_schedule
    plain = ctx.replace(target=None, prepack_weights=False, nchwc_layout=False, winograd=False,
                        fuse_attention=False)
    return [p for p in make(plain) if p.name != "default_schedule"] + [gpu_default_schedule()]


def get_pipeline(name: str = "default", ctx: Optional[PassContext] = None,
                 target=None) -> Sequential:
    """The pipeline called ``name`` (``"zero"`` or ``"default"``) with options ``ctx``, making
    its layouts and schedules for ``target`` (a target string or ``kiln.codegen.Target``;
    default: ``ctx.target``, else the host). Compile the result for the same target:
    ``kiln.compile`` refuses kernels scheduled for a target of another kind.

    >>> kiln.get_pipeline("zero").names()                        # doctest: +SKIP
    ['legalize', 'default_schedule']
    >>> kiln.get_pipeline("default", target="llvm -mtriple=aarch64-linux-gnu")  # doctest: +SKIP
    """
    try:
        make = PIPELINES[name]
    except KeyError:
        raise ValueError(f"unknown pipeline {name!r}; the pipelines are "
                         f"{', '.join(sorted(PIPELINES))}") from None
    from ..codegen.cuda.target import is_cuda_target
    if target is None and ctx is not None and is_cuda_target(ctx.target):
        target = ctx.target
    if target is not None and is_cuda_target(target):
        # The graph passes' context is the host's: they make no CPU-specific choice here.
        ctx = context((ctx or PassContext()).replace(target=None))
        return Sequential(_for_cuda(make, ctx), name=name, ctx=ctx)
    if target is not None:
        ctx = (ctx or PassContext()).replace(target=target)
    ctx = context(ctx)
    return Sequential(make(ctx), name=name, ctx=ctx)
