"""``convert_layout_nchwc``: channel-blocked activations from conv to conv (``layout_nchwc.py``),
its operators' schedules (``schedule_conv.py``, ``schedule_nchwc.py``): where the layout
changes, and the whole default pipeline against the graph interpreter at 1e-4."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import FunctionBuilder, IRModule
from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.transform.layout_nchwc import convert_layout_nchwc

from transform_helpers import (AVX2, AVX2_CTX, attr, kernels, outputs_at_threads, reference, run_vm,
                               typed)

HOST = "llvm"


def _rand(shape, scale=1.0, seed=0):
    rng = np.random.default_rng(seed + sum(shape))
    return (rng.standard_normal(shape) * scale).astype("float32")


class Net:
    """A graph built call by call: ``n.conv(h, out)``, ``n.dw(h)``, ``n.op("relu", h)``."""

    def __init__(self, x_shape, seed=0):
        self.x = typed("x", x_shape)
        self.fb = FunctionBuilder([self.x])
        self.seed = seed
        self._scope = self.fb.dataflow()
        self._scope.__enter__()

    def op(self, name, *args, **attrs):
        return self.fb.emit(ops.call(name, *args, **attrs))

    def const(self, shape, scale=1.0):
        self.seed += 1
        return Constant(_rand(shape, scale, self.seed))

    def conv(self, h, out, k=1, stride=1, bias=True, act="relu", groups=1):
        c = h.ty.static_shape()[1]
        w = self.const((out, c // groups, k, k), 1 / np.sqrt(c // groups * k * k))
        y = self.op("conv2d", h, w, padding=k // 2, strides=stride, groups=groups)
        if bias:
            y = self.op("add", y, self.const((1, out, 1, 1), 0.1))
        if act == "relu":
            y = self.op("relu", y)
        elif act == "clip":
            y = self.op("clip", y, min=0.0, max=6.0)
        return y

    def dw(self, h, stride=1, k=3, act="clip"):
        c = h.ty.static_shape()[1]
        return self.conv(h, c, k=k, stride=stride, act=act, groups=c)

    def module(self, out) -> IRModule:
        gv = self.fb.emit_output(out)
        self._scope.__exit__(None, None, None)
        return IRModule({"main": self.fb.finish(gv)})


def _ops(mod):
    return [b.value.op for b in mod["main"].bindings() if hasattr(b.value, "op")]


def _changes(mod):
    """(entries, exits): where values change to channel-blocked (a conv2d_nchwc reading NCHW,
    a layout_transform from NCHW) and back (a conv2d_nchwc writing NCHW, a layout_transform to
    NCHW, a reshape of a blocked global mean)."""
    entries = exits = 0
    for b in mod["main"].bindings():
        v = b.value
        attrs = dict(getattr(v, "attrs", ()))
        if getattr(v, "op", None) == "conv2d_nchwc":
            entries += len(v.args[0].ty.static_shape()) == 4
            exits += attrs["out_layout"] == "NCHW"
        elif getattr(v, "op", None) == "layout_transform":
            entries += attrs["src"] == "NCHW"
            exits += attrs["dst"] == "NCHW"
        elif getattr(v, "op", None) == "reshape":
            exits += len(v.args[0].ty.static_shape()) == 3
    return entries, exits


def _check(mod, target=AVX2, ctx=None, seed=7):
    """The default pipeline for ``target`` against the graph interpreter at 1e-4; returns the
    pipeline's module."""
    out = kiln.get_pipeline("default", ctx, target=target)(mod)
    x_shape = mod["main"].params[0].ty.static_shape()
    args = [np.random.default_rng(seed).standard_normal(x_shape).astype("float32")]
    np.testing.assert_allclose(run_vm(out, args, target=target), reference(mod, args),
                               rtol=1e-4, atol=1e-4)
    return out


def _schedules(mod):
    return {n: attr(mod[n], "kiln.schedule") for n in kernels(mod)}


# ---- where the layout changes ---------------------------------------------------------------

def _chain(c=16, size=14, out=32):
    n = Net((1, c, size, size))
    return n.module(n.conv(n.conv(n.x, out, k=3), out, k=3, act=None))


def test_conv_relu_conv_changes_layout_once_at_entry_and_once_at_exit():
    mod = _chain()
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert _ops(out) == ["conv2d_nchwc", "add", "relu", "conv2d_nchwc", "add"]
    assert _changes(out) == (1, 1)
    binds = [b for b in out["main"].bindings() if hasattr(b.value, "op")]
    # entry: the first conv reads the NCHW input itself and writes NCHW16c; the second reads
    # that and, as nothing after it is blocked, writes NCHW itself (its write-back scatters)
    assert binds[0].value.args[0] is out["main"].params[0]
    assert binds[0].value.ty.static_shape() == (1, 2, 14, 14, 16)
    assert binds[3].value.args[0].ty.static_shape() == (1, 2, 14, 14, 16)
    assert binds[3].value.ty.static_shape() == (1, 32, 14, 14)
    assert out["main"].body.ty.static_shape() == mod["main"].body.ty.static_shape()


def test_chain_with_a_blocked_tail_transforms_back_once():
    """conv -> conv -> max pool: the pool runs blocked, one layout_transform after it."""
    n = Net((1, 16, 8, 8))
    h = n.conv(n.conv(n.x, 16, k=3), 16, k=3)
    mod = n.module(ops.call("max_pool2d", h, pool_size=2))
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert _ops(out)[-2:] == ["max_pool2d_nchwc", "layout_transform"]
    assert _changes(out) == (1, 1)
    _check(mod)


def test_chain_compiles_to_two_conv_kernels():
    out = _check(_chain())
    sched = _schedules(out)
    assert len(sched) == 2 and all(n.startswith("fused_conv2d_nchwc") for n in sched), sched
    assert all("epilogue inlined" in d for d in sched.values()), sched


def test_a_single_conv_is_left_alone():
    n = Net((1, 16, 14, 14))
    mod = n.module(n.conv(n.x, 32, k=3))
    assert convert_layout_nchwc(AVX2_CTX)(mod) is mod


@pytest.mark.parametrize("target", [AVX2, HOST])
def test_a_depthwise_conv_of_an_nchw_value_runs_blocked_alone(target):
    """ConvNeXt's first stage: a 7x7 depthwise conv reads an NCHW value (a layer norm done in
    NHWC, permuted back) and feeds a permute. It runs blocked all the same, its input re-laid
    out in front of it and its result behind it (in NCHW its tile is one vector of one row).
    A channel count no block divides stays NCHW. Results equal the graph interpreter's."""
    n = Net((1, 96, 20, 20))
    h = n.dw(n.op("relu", n.x), k=7, act=None)
    mod = n.module(n.op("permute_dims", h, axes=(0, 2, 3, 1)))
    out = convert_layout_nchwc(PassContext(target=target))(mod)
    assert "depthwise_conv2d_nchwc" in _ops(out)
    assert _changes(out) == (1, 1)
    _check(mod, target=target)

    n = Net((1, 12, 20, 20))
    mod = n.module(n.op("permute_dims", n.dw(n.x, k=7, act=None), axes=(0, 2, 3, 1)))
    assert convert_layout_nchwc(AVX2_CTX)(mod) is mod


def test_turned_off_by_the_context():
    off = PassContext(nchwc_layout=False)
    assert "convert_layout_nchwc" not in kiln.get_pipeline("default", off).names()
    out = kiln.get_pipeline("default", off, target=AVX2)(_chain())
    assert len(kernels(out)) == 2 and not any("nchwc" in n for n in kernels(out)), kernels(out)


def test_conv_whose_output_feeds_no_blocked_op_writes_nchw():
    """conv -> conv -> flatten: the second conv reads blocked and writes NCHW itself."""
    n = Net((1, 16, 6, 6))
    h = n.conv(n.conv(n.x, 16, k=3), 16, k=3)
    mod = n.module(ops.call("flatten", h))
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert "layout_transform" not in _ops(out)
    convs = [b.value for b in out["main"].bindings() if b.value.op == "conv2d_nchwc"]
    assert [dict(c.attrs)["out_layout"] for c in convs] == ["NCHW16c", "NCHW"]
    _check(mod)


def test_region_entry_through_a_small_1x1_conv_reads_nhwc():
    """The first conv of a region reads NCHW; a 1x1 one on a 7 x 7 image through the NHWC copy
    (``conv_blocked.pixel_major``), over flat pixels; the next reads its blocked output."""
    n = Net((2, 24, 7, 7))
    mod = n.module(n.conv(n.conv(n.x, 32), 16, k=3, act=None))
    out = _check(mod)
    sched = _schedules(out)
    assert any("input nhwc" in d and "flat" in d for d in sched.values()), sched
    assert sum(d.startswith("conv nchwc") for d in sched.values()) == 2, sched


def test_channels_not_a_multiple_of_the_block_fall_back_to_nchw():
    """16 -> 12 channels has no block: the region ends before that conv (transform to NCHW),
    and the next one starts again from NCHW."""
    n = Net((1, 16, 9, 9))
    h = n.conv(n.conv(n.x, 16, k=3), 16)
    h = n.conv(h, 12, k=3)                       # NCHW: 12 is not a multiple of 8
    h = n.conv(n.conv(h, 16), 24, k=3, stride=2)
    mod = n.module(h)
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert _ops(out).count("conv2d") == 1 and "layout_transform" not in _ops(out)
    assert _changes(out) == (2, 2)
    _check(mod)


# ---- numerics of whole blocks ---------------------------------------------------------------

def _inverted_residual(x_shape, expand=4, stride=1, residual=True, seed=0):
    n = Net(x_shape, seed)
    c = x_shape[1]
    h = n.conv(n.x, c * expand, act="clip")             # 1x1 expand
    h = n.dw(h, stride=stride)                          # 3x3 depthwise
    h = n.conv(h, c, act=None)                          # 1x1 project
    if residual:
        h = n.op("add", h, n.x)
    return n.module(h)


@pytest.mark.parametrize("x_shape,stride,target", [
    ((1, 16, 7, 7), 1, AVX2),
    ((2, 8, 9, 9), 1, AVX2),                           # batch 2
    ((1, 16, 14, 14), 2, AVX2),
    ((1, 24, 1, 1), 1, AVX2),                          # 1 x 1 spatial
    ((1, 16, 7, 7), 1, HOST),
    ((1, 24, 11, 11), 2, HOST),
])
def test_inverted_residual_block(x_shape, stride, target):
    mod = _inverted_residual(x_shape, stride=stride, residual=stride == 1)
    out = _check(mod, target)
    assert _changes(convert_layout_nchwc(PassContext(target=target))(mod)) == (1, 1)
    sched = _schedules(out)
    dws = [n for n in sched if n.startswith("fused_depthwise_conv2d_nchwc")]
    assert len(dws) == 1 and sched[dws[0]].startswith("depthwise nchwc: tile"), sched
    assert "epilogue inlined" in sched[dws[0]], sched
    if stride == 1:      # the residual add folds into the project conv's write-back
        assert any(n.startswith("fused_conv2d_nchwc_add_add") for n in sched), sched


@pytest.mark.parametrize("stride,k", [(1, 3), (2, 3), (2, 5), (1, 5)])
def test_depthwise_strides_and_kernels(stride, k):
    n = Net((1, 32, 10, 10))
    h = n.dw(n.conv(n.x, 32), stride=stride, k=k, act="relu")
    _check(n.module(n.conv(h, 16, act=None)))


def test_residual_network_with_pools():
    """conv 7x7 s2 -> max pool -> two residual blocks (the second strided, with a 1x1
    shortcut) -> avg pool -> global mean -> flatten."""
    n = Net((2, 3, 23, 23))
    h = n.op("max_pool2d", n.conv(n.x, 16, k=7, stride=2), pool_size=3, strides=2, padding=1)
    r = n.conv(n.conv(h, 16, k=3), 16, k=3, act=None)
    h = n.op("relu", n.op("add", r, h))
    r = n.conv(n.conv(h, 32, k=3, stride=2), 32, k=3, act=None)
    s = n.conv(h, 32, k=1, stride=2, act=None)
    h = n.op("relu", n.op("add", r, s))
    h = n.op("avg_pool2d", h, pool_size=2, strides=1)
    h = n.op("mean", h, axis=(2, 3), keepdims=True)
    mod = n.module(ops.call("flatten", h))
    blocked = _ops(convert_layout_nchwc(AVX2_CTX)(mod))
    for op in ("max_pool2d_nchwc", "avg_pool2d_nchwc", "mean"):
        assert op in blocked, blocked
    assert blocked.count("layout_transform") == 1, blocked
    assert _changes(convert_layout_nchwc(AVX2_CTX)(mod)) == (1, 1)
    out = _check(mod, ctx=PassContext(winograd=False))
    sched = _schedules(out)
    # max pool, average pool and the global mean, each vectorized over a block's channels
    assert sum(s.startswith("pool nchwc") for s in sched.values()) == 3, sched


@pytest.mark.parametrize("method,mode,size", [
    ("linear", "half_pixel", (20, 20)),             # a 2x bilinear upsample (an FPN, a U-Net)
    ("nearest", "asymmetric", (30, 20)),            # 3x / 2x nearest (a YOLO neck)
    ("linear", "align_corners", (13, 7)),           # odd sizes, down along the width
])
def test_resize_between_convs_runs_blocked(method, mode, size):
    """conv -> resize2d -> conv: the resize reads and writes the blocked layout (each output
    pixel's channels one vector from its source pixels'), so the region spans both convs; the
    result equals the graph interpreter's."""
    n = Net((1, 8, 10, 10))
    h = n.op("resize2d", n.conv(n.x, 32, k=3), size=size, method=method,
             coordinate_transformation_mode=mode)
    mod = n.module(n.conv(h, 16, k=3, act=None))
    blocked = convert_layout_nchwc(AVX2_CTX)(mod)
    (resize,) = [b.value for b in blocked["main"].bindings() if getattr(b.value, "op", None) == "resize2d"]
    assert len(resize.args[0].ty.static_shape()) == 5 and len(resize.ty.static_shape()) == 5
    assert _changes(blocked) == (1, 1)
    _check(mod, ctx=PassContext(winograd=False))
    _check(mod, target="llvm", ctx=PassContext(winograd=False))


def test_concat_of_blocked_values_runs_blocked():
    """SqueezeNet's fire module (and DenseNet's concat): two convs of one input concatenated
    along the channels, then a conv. Each part a whole number of blocks: the blocked values
    are concatenated along the block axis, one region; a part that is not (12 channels) ends
    the region there. Results equal the graph interpreter's."""
    n = Net((1, 16, 12, 12))
    s = n.conv(n.x, 32)
    h = n.op("concat", n.conv(s, 32), n.conv(s, 64, k=3), axis=1)
    mod = n.module(n.conv(h, 32, k=3, act=None))
    blocked = convert_layout_nchwc(AVX2_CTX)(mod)
    (cat,) = [b.value for b in blocked["main"].bindings() if getattr(b.value, "op", None) == "concat"]
    assert all(len(a.ty.static_shape()) == 5 for a in cat.args)
    assert _changes(blocked) == (1, 1)
    _check(mod, ctx=PassContext(winograd=False))

    n = Net((1, 16, 12, 12))
    h = n.op("concat", n.conv(n.x, 32), n.conv(n.x, 12), axis=1)
    mod = n.module(n.conv(h, 32, k=3, act=None))
    (cat,) = [b.value for b in convert_layout_nchwc(AVX2_CTX)(mod)["main"].bindings()
              if getattr(b.value, "op", None) == "concat"]
    assert all(len(a.ty.static_shape()) == 4 for a in cat.args)
    _check(mod, ctx=PassContext(winograd=False))


def test_adaptive_average_pool_to_one_pixel_is_a_blocked_mean():
    n = Net((1, 8, 6, 6))
    h = n.op("adaptive_avg_pool2d", n.conv(n.conv(n.x, 16, k=3), 16, k=3), output_size=1)
    mod = n.module(ops.call("flatten", h))
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert "mean" in _ops(out) and _changes(out) == (1, 1), _ops(out)
    _check(mod)


def test_global_mean_without_keepdims_then_linear():
    n = Net((1, 8, 5, 5))
    h = n.op("mean", n.conv(n.conv(n.x, 16, k=3), 16, k=3), axis=(2, 3))
    mod = n.module(ops.call("linear", h, n.const((10, 16))))
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert "reshape" in _ops(out) and "layout_transform" not in _ops(out)
    _check(mod)


def test_elementwise_with_a_runtime_operand_and_broadcast_constants():
    """A multiply by a per-channel value computed at run time (a squeeze-excite gate) and a
    scalar, a [C, 1, 1] and a [W] constant, all on blocked activations."""
    n = Net((1, 16, 6, 6))
    h = n.conv(n.x, 16, k=3)
    gate = n.op("sigmoid", n.op("mean", h, axis=(2, 3), keepdims=True))
    h = n.op("multiply", h, gate)
    h = n.op("add", n.op("multiply", h, n.const((16, 1, 1))), n.const((6,)))
    h = n.op("maximum", h, Constant(np.float32(0.1)))
    mod = n.module(n.conv(h, 16, k=3))
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert "conv2d" not in _ops(out) and _changes(out) == (1, 1), _ops(out)
    _check(mod)


def test_batch_norm_and_constants_first():
    """conv -> batch_norm -> hardswish written with the constant first (as PaddleOCR's models
    export it: 1 * x + 0, x * clip(x + 3) / 6) -> depthwise -> conv, all blocked; batch_norm as
    a multiply and an add."""
    n = Net((1, 16, 9, 9))
    h = n.conv(n.x, 32, bias=False, act=None)
    c = 32
    h = n.op("batch_norm", h, n.const((c,)), n.const((c,)), n.const((c,), 0.1),
             Constant(np.abs(_rand((c,), seed=9)) + 0.5), eps=1e-3)
    h = n.op("add", n.op("multiply", Constant(np.ones(1, "float32")), h), Constant(np.zeros(1, "float32")))
    h = n.op("divide", n.op("multiply", h, n.op("clip", n.op("add", h, Constant(np.float32(3))),
                                                 min=0.0, max=6.0)), Constant(np.float32(6)))
    mod = n.module(n.conv(n.dw(h), 16, act=None))
    out = convert_layout_nchwc(AVX2_CTX)(mod)
    assert "batch_norm" not in _ops(out) and "conv2d" not in _ops(out), _ops(out)
    assert _changes(out) == (1, 1)
    _check(mod)


def test_winograd_convs_read_and_write_blocked():
    """A Winograd conv inside a region: its input transform reads the blocked activations and
    its output transform writes them (the epilogue folded in), so the region goes on."""
    n = Net((1, 32, 16, 16))
    h = n.conv(n.conv(n.x, 32), 32)
    h = n.conv(h, 32, k=3)                   # chosen for Winograd below
    mod = n.module(n.conv(n.conv(h, 32), 32, act=None))
    from kiln.transform.conv_winograd import with_winograd
    pipe = with_winograd(kiln.get_pipeline("default", AVX2_CTX),
                         choose=lambda call, plan: 4 if call.args[1].ty.static_shape()[2] == 3 else None)
    blocked = convert_layout_nchwc(AVX2_CTX)(
        kiln.transform.conv_winograd(AVX2_CTX, choose=lambda call, plan: 4
                                     if call.args[1].ty.static_shape()[2] == 3 else None)(mod))
    assert _changes(blocked) == (1, 1)
    calls = {b.value.op: b.value for b in blocked["main"].bindings() if hasattr(b.value, "op")}
    assert len(calls["winograd_input"].args[0].ty.static_shape()) == 5
    assert dict(calls["winograd_output"].attrs)["layout"] == "NCHW16c"
    out = pipe(mod)
    sched = _schedules(out)
    assert "input nchwc" in sched["winograd_input"], sched
    wo = [d for k, d in sched.items() if k.startswith("fused_winograd_output")]
    assert len(wo) == 1 and "output nchwc" in wo[0] and "epilogue inlined" in wo[0], sched
    args = [_rand((1, 32, 16, 16))]
    np.testing.assert_allclose(run_vm(out, args), reference(mod, args), rtol=1e-4, atol=1e-4)


def test_a_winograd_part_of_a_concat_writes_the_concats_block():
    """SqueezeNet's fire module on AVX2: the 1x1 expand conv writes 8-channel blocks (its
    tile's pick), the 3x3 one goes Winograd, whose output transform could write 16. It writes
    8, bias and relu included, so the concat needs no re-layout of it (and the memory plan
    then has both halves written in place). A Winograd output that a conv before the concat
    reads keeps its own block."""
    from kiln.transform.conv_winograd import conv_winograd
    choose = lambda call, plan: 4 if call.args[1].ty.static_shape()[2] == 3 else None  # noqa: E731
    n = Net((1, 64, 55, 55))
    s = n.conv(n.x, 16)
    h = n.op("concat", n.conv(s, 64), n.conv(s, 64, k=3), axis=1)
    mod = n.module(n.conv(h, 16, act=None))
    blocked = convert_layout_nchwc(AVX2_CTX)(conv_winograd(AVX2_CTX, choose=choose)(mod))
    calls = [b.value for b in blocked["main"].bindings() if hasattr(b.value, "op")]
    (cat,) = [c for c in calls if c.op == "concat"]
    (wo,) = [c for c in calls if c.op == "winograd_output"]
    assert dict(wo.attrs)["layout"] == "NCHW8c"
    assert [a.ty.static_shape()[-1] for a in cat.args] == [8, 8]
    assert not any(c.op == "layout_transform" and len(c.ty.static_shape()) == 5 for c in calls)
    pipe = kiln.transform.Sequential([conv_winograd(AVX2_CTX, choose=choose)] + [
        p for p in kiln.get_pipeline("default", AVX2_CTX) if p.name != "conv_winograd"],
        ctx=AVX2_CTX)
    args = [_rand((1, 64, 55, 55))]
    np.testing.assert_allclose(run_vm(pipe(mod), args), reference(mod, args), rtol=1e-4, atol=1e-4)

    n = Net((1, 64, 55, 55))
    s = n.conv(n.x, 16)
    w = n.conv(s, 64, k=3)
    y = n.conv(w, 64, act=None)              # reads the Winograd output before the concat
    h = n.op("concat", n.conv(s, 64), w, axis=1)
    mod = n.module(n.op("add", n.conv(h, 64, act=None), y))
    calls = [b.value for b in convert_layout_nchwc(AVX2_CTX)(
        conv_winograd(AVX2_CTX, choose=choose)(mod))["main"].bindings() if hasattr(b.value, "op")]
    (wo,) = [c for c in calls if c.op == "winograd_output"]
    assert dict(wo.attrs)["layout"] == "NCHW16c"


@pytest.mark.parametrize("target,vector,not_vector", [
    ("llvm -mcpu=haswell", r"vfmadd\w+\s+.*%ymm", "zmm"),
    ("llvm -mcpu=skylake-avx512", r"vfmadd\w+\s+.*%zmm", None),
    ("llvm -mtriple=aarch64-linux-gnu", r"fmla\s+v\d+\.4s", None),
])
def test_blocked_kernels_use_the_targets_vectors(target, vector, not_vector):
    """The depthwise conv's and the blocked 1x1 convs' multiply-adds use the target's full
    vector registers."""
    import re
    from kiln import codegen
    from kiln.driver import lower
    out = kiln.get_pipeline("default", target=target)(_inverted_residual((1, 16, 14, 14)))
    for name in kernels(out):
        if not name.startswith(("fused_depthwise_conv2d_nchwc", "fused_conv2d_nchwc")):
            continue
        asm = codegen.compile_module(lower(IRModule({name: out[name]})), target).assembly()
        assert re.search(vector, asm), (name, asm[:2000])
        assert not_vector is None or not_vector not in asm[:asm.find("kiln_library_info")], name


def test_depthwise_threads_split_the_image_by_rows():
    """The depthwise conv's parallel loop runs over rows outside the channel blocks (so the
    threads split the image by rows, as the 1 x 1 convs around it do); the same numbers."""
    from kiln.ir import For, collect
    mod = _inverted_residual((1, 32, 28, 28), stride=1, residual=True)
    out = _check(mod, AVX2, PassContext(target=AVX2, cores=2, parallel_min_elements=1024))
    (dw,) = [n for n in kernels(out) if n.startswith("fused_depthwise_conv2d_nchwc")]
    (par,) = [f for f in collect(out[dw].body, For) if f.kind == "parallel"]
    blocks = next(int(b.shape[1].value) for b in out[dw].params if len(b.shape) == 5)
    assert par.extent.value == 28 * blocks      # rows x channel blocks
    # the fused index is y * blocks + q: its quotient by the channel blocks is the row
    assert par.loop_var.name.index("y") < par.loop_var.name.index("q"), par.loop_var.name


# ---- grouped convs ----------------------------------------------------------------------------

def _grouped_block(mid, group, c=32, size=14):
    """RegNet's bottleneck: 1x1 conv c -> mid, a 3x3 conv in groups of ``group`` channels,
    1x1 conv mid -> c, plus the residual."""
    n = Net((1, c, size, size))
    y = n.conv(n.x, mid)
    y = n.conv(y, mid, k=3, groups=mid // group)
    return n.module(n.op("add", n.conv(y, c, act=None), n.x))


@pytest.mark.parametrize("mid,group,target,blocked_input", [
    (208, 8, "llvm", True),          # blocks of 16 hold two groups: the group's lanes of one
    (208, 8, AVX2, True),
    (128, 32, "llvm", True),         # a group is whole blocks
    (96, 24, "llvm -mcpu=skylake-avx512", False),   # 16-channel blocks and groups of 24 do not nest
])
def test_grouped_conv_runs_blocked_between_the_convs(mid, group, target, blocked_input):
    mod = _grouped_block(mid, group)
    out = _check(mod, target=target)
    grouped = [v for v in (b.value for b in convert_layout_nchwc(
        PassContext(target=target).resolved())(mod)["main"].bindings())
        if getattr(v, "op", None) == "conv2d_nchwc" and dict(v.attrs).get("groups", 1) != 1]
    assert len(grouped) == 1
    assert (len(grouped[0].args[0].ty.static_shape()) == 5) == blocked_input
    assert dict(grouped[0].attrs)["out_layout"] != "NCHW"      # the next conv reads it blocked
    sched = [s for s in _schedules(out).values() if "channel blocks outer" in s]
    assert sched, _schedules(out)


def test_grouped_conv_at_two_threads_equals_the_reference():
    mod = _grouped_block(208, 8)
    out = kiln.get_pipeline("default", target="llvm")(mod)
    x = np.random.default_rng(3).standard_normal((1, 32, 14, 14)).astype("float32")
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    for got in outputs_at_threads(vm, [x]):
        np.testing.assert_allclose(got, reference(mod, [x]), rtol=1e-4, atol=1e-4)


# ---- convs over a blocked input: the reduction step and the loop order ---------------------

def _blocked_input_conv(out, k):
    """The one conv kernel of ``out`` with a k x k kernel that reads a channel-blocked input."""
    (name,) = [n for n in kernels(out) if n.startswith("fused_conv2d_nchwc")
               and len(out[n].params[0].shape) == 5 and int(out[n].params[1].shape[1].value) == k]
    return out[name]

@pytest.mark.parametrize("mid,size,target,step", [
    (64, 14, "llvm -mcpu=skylake-avx512", 4),     # 32-channel blocks: 8 steps of 4, unrolled
    (64, 28, "llvm -mcpu=skylake-avx512", 4),     # a flat tile (28 x 28 in 12-pixel tiles)
    (48, 14, AVX2, 4),                            # 16-channel blocks: 4 steps
    (8, 14, "llvm -mcpu=skylake-avx512", 8),      # 8-channel blocks: the whole block a step
])
def test_pointwise_conv_reduces_four_channels_a_step(mid, size, target, step):
    """A 1x1 conv reading a channel-blocked input reduces 4 channels of a pixel per step of its
    tile, the step unrolled (``schedule_conv.POINTWISE_STEP_CHANNELS``), while the block holds
    at least 4 such steps; the same numbers as the reference."""
    from kiln.ir import For, collect
    n = Net((1, 16, size, size))
    mod = n.module(n.conv(n.conv(n.x, mid, k=3), 32, act=None))
    out = _check(mod, target=target)
    pw = _blocked_input_conv(out, 1)
    assert f"ci={step}" in attr(pw, "kiln.decisions"), attr(pw, "kiln.decisions")
    loops = collect(pw.body, For)
    unrolled = [f for f in loops if f.kind == "unrolled" and int(f.extent.value) == step
                and f.loop_var.name.startswith("rci")]
    block = int(pw.params[0].shape[-1].value)
    assert bool(unrolled) == (step < block), [(f.loop_var.name, f.kind) for f in loops]


@pytest.mark.parametrize("stride,order", [(1, "rows outer"), (2, "channel blocks outer")])
def test_strided_pointwise_conv_counts_the_input_it_reads(stride, order):
    """A stride-2 1 x 1 conv reads a quarter of its blocked input (every other row, and every
    other pixel of those, a pixel of 16 channels being a cache line): re-reading that per
    channel block costs less than re-reading the weights per output row, so the channel
    blocks go outside (``schedule_conv._input_bytes_read``; ResNet-50's 512 -> 1024 stride-2
    conv 1.87 -> 1.22 ms). At stride 1 the whole input counts and the rows go outside. One
    core, so that only the traffic decides; the same numbers as the reference."""
    n = Net((1, 16, 28, 28))
    mod = n.module(n.conv(n.conv(n.x, 64, k=3), 128, k=1, stride=stride, act=None))
    out = _check(mod, AVX2, PassContext(target=AVX2, cores=1, parallel_min_elements=1024))
    pw = _blocked_input_conv(out, 1)
    assert int(pw.params[0].shape[-1].value) == 16
    assert order in attr(pw, "kiln.schedule"), attr(pw, "kiln.schedule")


@pytest.mark.parametrize("size,order", [(56, "rows outer"), (28, "channel blocks outer")])
def test_conv_whose_weights_fit_in_l2_goes_by_rows_over_a_large_input(size, order):
    """A stride-2 3 x 3 conv with 147 KB of weight: over a 56 x 56 input (800 KB, more than
    3/8 of the target's 1 MiB L2) the rows go outside, the weights re-read from L2 per row;
    over 28 x 28 (200 KB) the counted traffic decides, channel blocks outside
    (``schedule_conv._rows_outer``). The same numbers as the reference."""
    n = Net((1, 16, size, size))
    mod = n.module(n.conv(n.conv(n.x, 64, k=3), 64, k=3, stride=2, act=None))
    ctx = PassContext(target=AVX2, cores=1, parallel_min_elements=1024)
    assert ctx.resolved().machine.l2_bytes == 1 << 20
    out = _check(mod, AVX2, ctx)
    conv = _blocked_input_conv(out, 3)
    assert order in attr(conv, "kiln.schedule"), attr(conv, "kiln.schedule")
