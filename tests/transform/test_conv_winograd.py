"""conv_winograd (3x3 stride-1 conv2d -> winograd_input / winograd_gemm / winograd_output) and
the transform schedules (schedule_winograd.py): which convs it rewrites, the cost rule's choices, the schedules the
transform kernels get, and compiled results against numpy (odd shapes, epilogues)."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import FunctionBuilder, IRModule
from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.transform.conv_winograd import (MIN_GAIN, conv_plan, conv_winograd, ineligible,
                                          with_winograd)

from transform_helpers import typed

RNG = np.random.default_rng(0)


def _rand(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def conv_model(x_shape, o, padding=1, epilogue="bias_relu", weight=None, **attrs):
    """conv2d(x, W) (W a constant unless ``weight`` is "param") and an epilogue:
    ``bias_relu``: relu(y + b); ``bn_residual``: relu(y * scale + shift + r), r an input;
    None: y. Returns (module, weight array, epilogue arrays)."""
    groups = attrs.get("groups", 1)
    k = attrs.pop("kernel", 3)
    w = _rand((o, x_shape[1] // groups, k, k), 1 / np.sqrt(9 * x_shape[1]))
    x = typed("x", x_shape)
    params = [x]
    w_arg = Constant(w)
    if weight == "param":
        w_arg = typed("w", w.shape)
        params.append(w_arg)
    extra = {}
    fb = FunctionBuilder(params)
    with fb.dataflow():
        y = ops.call("conv2d", x, w_arg, padding=padding, **attrs)
        if epilogue is not None:
            y = fb.emit(y)
        if epilogue == "bias_relu":
            extra["b"] = _rand((1, o, 1, 1))
            y = ops.call("relu", fb.emit(ops.call("add", y, Constant(extra["b"]))))
        elif epilogue == "bn_residual":
            extra["scale"], extra["shift"] = _rand((o, 1, 1)), _rand((o, 1, 1))
            y = fb.emit(ops.call("add", fb.emit(ops.call("multiply", y, Constant(extra["scale"]))),
                                 Constant(extra["shift"])))
            extra["r"] = _rand(y.ty.static_shape())
            y = ops.call("relu", fb.emit(ops.call("add", y, Constant(extra["r"]))))
        out = fb.emit_output(y)
    return IRModule({"main": fb.finish(out)}), w, extra


def numpy_model(x, w, padding, epilogue, extra):
    y = ops.get("conv2d").reference(x.astype(np.float64), w.astype(np.float64), padding=padding)
    if epilogue == "bias_relu":
        y = np.maximum(y + extra["b"], 0)
    elif epilogue == "bn_residual":
        y = np.maximum(y * extra["scale"] + extra["shift"] + extra["r"], 0)
    return y


def op_names(mod, name="main"):
    return [getattr(b.value, "op", None) for b in mod[name].bindings()]


def compile_run(mod, args, tile=4):
    # conv_live_taps would make the 3x3 conv over a 1x1 image a 1x1 conv: this tests Winograd.
    ctx = kiln.transform.PassContext(disabled_passes=("conv_live_taps",))
    pipe = with_winograd(kiln.get_pipeline("default", ctx), choose=lambda call, plan: tile)
    out = pipe(mod)
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    return out, vm["main"](*[kiln.nd.array(a) for a in args]).numpy()


def schedules(mod):
    return {n: dict(f.attrs).get("kiln.schedule") for n, f in mod.functions.items()
            if hasattr(f, "attrs") and "kiln.schedule" in dict(f.attrs)}


# ---- the rewrite ---------------------------------------------------------------------------

def test_rewrites_a_3x3_conv_into_three_ops():
    mod, w, _ = conv_model((1, 16, 12, 12), 32, padding=1, epilogue=None)
    out = conv_winograd(choose=lambda call, plan: 4)(mod)
    assert op_names(out) == ["winograd_input", "winograd_gemm", "winograd_output"]
    v, gemm, y = [b.value for b in out["main"].bindings()]
    assert dict(v.attrs) == {"padding": (1, 1, 1, 1), "tile": 4}
    assert v.ty.static_shape() == (6, 6, 9, 16)
    u = gemm.args[1]
    assert isinstance(u, Constant) and u.data.shape[1:4] == (6, 6, 16)
    assert dict(gemm.attrs)["out_channels"] == 32
    assert y.ty.static_shape() == (1, 32, 12, 12) and dict(y.attrs)["out_size"] == (12, 12)
    # the conv's result variable keeps its name: later uses need no change
    assert out["main"].body.name == mod["main"].body.name


@pytest.mark.parametrize("why,x_shape,o,attrs", [
    ("strided", (1, 8, 16, 16), 8, {"strides": (2, 2)}),
    ("not a 3x3 kernel", (1, 8, 16, 16), 8, {"kernel": 1, "padding": 0}),
    ("grouped", (1, 8, 16, 16), 8, {"groups": 2}),
    ("grouped", (1, 8, 16, 16), 8, {"groups": 8}),            # depthwise
    ("dilated", (1, 8, 16, 16), 8, {"dilation": (2, 2)}),
    ("the weight is not a constant", (1, 8, 16, 16), 8, {"weight": "param"}),
])
def test_leaves_ineligible_convs_alone(why, x_shape, o, attrs):
    attrs = dict(attrs)
    padding = attrs.pop("padding", 1)
    weight = attrs.pop("weight", None)
    mod, _, _ = conv_model(x_shape, o, padding=padding, epilogue=None, weight=weight, **attrs)
    conv = next(b.value for b in mod["main"].bindings() if b.value.op == "conv2d")
    assert ineligible(conv) == why
    out = conv_winograd(choose=lambda call, plan: 4)(mod)
    assert op_names(out) == ["conv2d"]
    assert out is mod


def test_choose_none_keeps_the_direct_conv():
    mod, _, _ = conv_model((1, 64, 56, 56), 64, epilogue=None)
    seen = []
    out = conv_winograd(choose=lambda call, plan: seen.append(plan) or None)(mod)
    assert op_names(out) == ["conv2d"] and len(seen) == 1
    assert {c.tile for c in seen[0].options} == {2, 4}


# ---- the cost rule -------------------------------------------------------------------------

def _plan(n, c, o, size, padding=1):
    mod, _, _ = conv_model((n, c, size, size), o, padding=padding, epilogue=None)
    return conv_plan(next(b.value for b in mod["main"].bindings()))


@pytest.mark.parametrize("name,shape,tile", [
    # ResNet-18's 3x3 stride-1 layers at batch 1 (bench/winograd_layers.py measured 2.1x
    # and 2.7x with F(4x4); at 14x14 F(2x2), whose transformed weight is 4.2 MB instead of
    # 9.4: 1.7x alone with F(4x4) and 1.8x with F(2x2), and in the model 0.85 ms against 1.21
    # for the contraction; the last, 1.15x alone with F(2x2) but no faster in the whole
    # model: its transformed weight streams from memory for only 4 (F(4x4)) or 16 tiles)
    ("resnet 64 @56", (1, 64, 64, 56), 4),
    ("resnet 128 @28", (1, 128, 128, 28), 4),
    ("resnet 256 @14", (1, 256, 256, 14), 2),
    ("resnet 512 @7", (1, 512, 512, 7), None),
    ("resnet 512 @7, batch 2", (2, 512, 512, 7), None),
    ("resnet 512 @7, batch 8", (8, 512, 512, 7), 4),
    # three input channels: the transforms cost more than the multiply-adds they save
    ("rgb stem 3x3", (1, 3, 32, 224), None),
    # a small layer: the transforms and the weight dominate
    ("8 -> 8 @8", (1, 8, 8, 8), None),
])
def test_cost_rule_choices(name, shape, tile):
    plan = _plan(*shape)
    assert plan.choice() == tile, (name, plan)
    if tile is not None:
        assert plan.speedup(tile) >= MIN_GAIN


@pytest.mark.parametrize("shape,xeon,zen", [
    # ResNet-18's last two layer sizes. Where one core streams the transformed weight at 30
    # bytes/ns (AMD Zen 4) instead of 10 (Intel Xeon), F(4x4)'s 9.4 MB at 14 x 14 costs less
    # than F(2x2)'s extra multiply-adds, and F(2x2) pays at 7 x 7: inside the model on Zen 4
    # the 7 x 7 layers ran 1.6x faster, ResNet-18 1.20x / 1.14x at one / two threads
    # (bench/RESULTS.md, "Session 29").
    ((1, 256, 256, 14), 2, 4),
    ((1, 512, 512, 7), None, 2),
    # unchanged where the multiply-adds decide
    ((1, 64, 64, 56), 4, 4),
    ((1, 3, 32, 224), None, None),
])
def test_cost_rule_weighs_the_weight_stream_of_the_target(shape, xeon, zen):
    mod, _, _ = conv_model(shape[:2] + (shape[3], shape[3]), shape[2], epilogue=None)
    call = next(b.value for b in mod["main"].bindings())
    assert conv_plan(call, ctx=PassContext(target="llvm -mcpu=rocketlake")).choice() == xeon
    assert conv_plan(call, ctx=PassContext(target="llvm -mcpu=znver4")).choice() == zen


def test_cost_rule_is_the_default_choice():
    mod, _, _ = conv_model((1, 128, 28, 28), 128, epilogue=None)
    assert op_names(conv_winograd()(mod))[0] == "winograd_input"
    mod, _, _ = conv_model((1, 8, 8, 8), 8, epilogue=None)
    assert op_names(conv_winograd()(mod)) == ["conv2d"]


# ---- compiled, against numpy ---------------------------------------------------------------

CASES = [
    # x_shape, O, padding, epilogue, tile
    ((1, 3, 7, 7), 8, 1, "bias_relu", 4),
    ((1, 13, 1, 1), 5, 1, "bias_relu", 4),          # 1x1 image: one tile, mostly padding
    ((1, 13, 5, 9), 16, 1, "bn_residual", 4),       # not square, C not a multiple of 8
    ((2, 16, 8, 8), 13, 0, None, 4),                # batch 2, no padding, odd O
    ((1, 16, 8, 10), 24, (1, 0, 2, 1), "bias_relu", 4),
    ((2, 24, 9, 7), 16, 1, "bn_residual", 2),
]


@pytest.mark.parametrize("x_shape,o,padding,epilogue,tile", CASES)
def test_compiled_matches_numpy(x_shape, o, padding, epilogue, tile):
    mod, w, extra = conv_model(x_shape, o, padding=padding, epilogue=epilogue)
    x = _rand(x_shape)
    out, got = compile_run(mod, [x], tile)
    want = numpy_model(x, w, padding, epilogue, extra)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * max(1.0, np.abs(want).max()))
    sched = schedules(out)
    outs = [n for n in sched if "winograd_output" in n]
    assert len(outs) == 1 and sched[outs[0]].startswith(f"winograd output: tile {tile}x{tile}")
    if epilogue is not None:
        # the epilogue is fused into the output transform and inlined into its store
        assert outs[0].startswith("fused_winograd_output_") and "epilogue inlined" in sched[outs[0]]
    assert sched["winograd_input"].startswith("winograd input")
    assert sched["winograd_gemm"].startswith("matmul: tile")


def test_transform_kernels_are_vectorized_straight_line_code():
    mod, _, _ = conv_model((1, 16, 8, 8), 16, epilogue="bias_relu")
    pipe = with_winograd(kiln.get_pipeline("default"), choose=lambda call, plan: 4)
    out = pipe(mod)
    text = out["winograd_input"].script()
    assert text.count("T.vectorized(") == 3            # the pad, the rows, the columns
    assert text.count("T.unroll(") == 3                # a, b, and the rows' j
    fused = next(f for n, f in out.functions.items() if n.startswith("fused_winograd_output"))
    text = fused.script()
    assert text.count("T.vectorized(") == 2 and text.count("T.unroll(") == 4
    assert 'T.block("relu")' not in text and 'T.block("add")' not in text


def test_an_nchw_input_is_copied_a_vector_of_channels_at_a_time():
    """From NCHW, the padded NHWC copy gathers one vector of channels over every row before the
    next vector (the loop over vectors outside the rows, run in parallel with them), so that a
    vector's gathers touch as many channel planes as it has lanes, not all of them; against
    numpy, batch 2, a 10 x 12 image."""
    lanes = kiln.transform.PassContext().resolved().simd_lanes
    x_shape = (2, 3 * lanes, 10, 12)
    mod, w, extra = conv_model(x_shape, 8, epilogue="bias_relu")
    x = _rand(x_shape)
    out, got = compile_run(mod, [x], 4)
    want = numpy_model(x, w, 1, "bias_relu", extra)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * max(1.0, np.abs(want).max()))
    text = out["winograd_input"].script()
    copy = text[:text.index('T.block("winograd_pad")')]
    assert f"n_ch_0_yy_fused in T.parallel({2 * 3 * 14})" in copy
    assert f"ch_1 in T.vectorized({lanes})" in copy


def test_model_matches_direct_pipeline_within_1e4():
    """A residual block (conv-bn-relu, conv-bn + identity, relu) through the default pipeline
    with and without Winograd: the same result within 1e-4 of its scale."""
    c, size = 32, 14
    x = typed("x", (1, c, size, size))
    ws = [_rand((c, c, 3, 3), 1 / np.sqrt(9 * c)) for _ in range(2)]
    bn = [(_rand((c, 1, 1), 0.2) + 1, _rand((c, 1, 1), 0.1)) for _ in range(2)]
    fb = FunctionBuilder([x])
    with fb.dataflow():
        def e(op, *args, **attrs):
            return fb.emit(ops.call(op, *args, **attrs))
        h = e("relu", e("add", e("multiply", e("conv2d", x, Constant(ws[0]), padding=1),
                                 Constant(bn[0][0])), Constant(bn[0][1])))
        h = e("add", e("multiply", e("conv2d", h, Constant(ws[1]), padding=1), Constant(bn[1][0])),
              Constant(bn[1][1]))
        out = fb.emit_output(ops.call("relu", e("add", h, x)))
    mod = IRModule({"main": fb.finish(out)})
    xa = _rand((1, c, size, size))
    direct = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), target="llvm"),
                                 kiln.cpu())["main"](kiln.nd.array(xa)).numpy()
    wmod, wino = compile_run(mod, [xa], 4)
    assert sum(n.startswith("fused_winograd_output") for n in wmod.functions) == 2
    np.testing.assert_allclose(wino, direct, rtol=0, atol=1e-4 * np.abs(direct).max())


def test_no_rewrite_without_prepacked_weights():
    mod, _, _ = conv_model((1, 64, 28, 28), 64, epilogue=None)
    out = conv_winograd(PassContext(prepack_weights=False), choose=lambda call, plan: 4)(mod)
    assert op_names(out) == ["conv2d"]


def test_panels_follow_pack_lanes():
    mod, _, _ = conv_model((1, 8, 8, 8), 40, epilogue=None)
    out = conv_winograd(PassContext(pack_lanes=16), choose=lambda call, plan: 4)(mod)
    u = [b.value for b in out["main"].bindings()][1].args[1]
    assert u.data.shape == (3, 6, 6, 8, 16)


def test_transform_schedules_are_named_decisions():
    """The rule's choices replay from a record and change the program, not the result. (An
    AVX2 target, 8 lanes, so the default chunk is the same on every host here.)"""
    from kiln.schedule.decisions import Decisions, parse_decisions
    from kiln.transform.default_schedule import schedule_kernel
    avx2 = PassContext(target="llvm -mcpu=haswell")
    mod, _, _ = conv_model((1, 32, 8, 8), 16, epilogue="bias_relu")
    legal = kiln.transform.legalize(avx2)(conv_winograd(avx2, choose=lambda call, plan: 4)(mod))
    func = legal["winograd_input"]
    default = schedule_kernel(func, avx2)
    assert parse_decisions(dict(default.attrs)["kiln.decisions"])["chunk"] == 8
    record = Decisions(fixed={"chunk": 16, "parallel": True})
    changed = schedule_kernel(func, avx2, record)
    assert record.made == {"chunk": 16, "parallel": True} and not record.stale
    assert "channels 16" in dict(changed.attrs)["kiln.schedule"]
    assert "parallel" in dict(changed.attrs)["kiln.schedule"]
    x = _rand((1, 32, 8, 8))
    want = ops.get("winograd_input").reference(x, padding=(1, 1, 1, 1), tile=4)
    for f in (default, changed):
        out = kiln.nd.empty(want.shape, "float32")
        kiln.build(IRModule({"main": f}), target="llvm -mcpu=haswell")(kiln.nd.array(x), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-4)
    stale = Decisions(fixed={"chunk": 12})           # 12 does not divide 32: falls back
    assert "channels 8" in dict(schedule_kernel(func, avx2, stale).attrs)["kiln.schedule"]
    assert stale.stale == ["chunk"]


def test_choice_as_a_named_decision():
    from kiln.schedule.decisions import Decisions
    from kiln.transform.conv_winograd import decided
    mod, _, _ = conv_model((1, 64, 28, 28), 64, epilogue=None)
    made = []

    def per_conv(decisions):
        def get(call):
            made.append(decisions)
            return decisions
        return get
    out = conv_winograd(choose=decided(per_conv(Decisions())))(mod)      # the rule's default
    assert dict(next(out["main"].bindings()).value.attrs)["tile"] == 4
    assert made[-1].made == {"winograd": 4} and made[-1].options["winograd"] == [0, 4, 2]
    out = conv_winograd(choose=decided(per_conv(Decisions(fixed={"winograd": 0}))))(mod)
    assert op_names(out) == ["conv2d"]
    out = conv_winograd(choose=decided(per_conv(Decisions(sampler=lambda n, opts, d: 2))))(mod)
    assert dict(next(out["main"].bindings()).value.attrs)["tile"] == 2


def test_transformed_weight_panels_divide_the_output_channels():
    from kiln.transform.conv_winograd import panel_lanes
    avx512 = PassContext(target="llvm -mcpu=sapphirerapids").resolved()     # panels of 64
    assert [panel_lanes(o, avx512) for o in (64, 128, 96, 160, 80, 48, 32, 8, 20, 1000)] == \
        [64, 64, 32, 32, 16, 16, 32, 8, 32, 64]
    # no vector divides them: one panel of 24 (a vector and a half, none guarded), 40 in one
    # of 40 (5 of 6 half vectors used, against 40 of 64 lanes), 72 in 24s (3 of 4 against 72
    # of 128); 1,000 in 64s (the last one guarded: 1,000 of 1,024 lanes, against 5 of 6)
    assert [panel_lanes(o, avx512) for o in (24, 40, 72, 1000)] == [24, 40, 24, 64]
    avx2 = PassContext(target="llvm -mcpu=haswell").resolved()              # panels of 16
    assert [panel_lanes(o, avx2) for o in (96, 40, 12)] == [16, 8, 16]
    # Inception-V3's 64 -> 96 layer at 35 x 35 (panels of 32), and 24 output channels
    # (EfficientNetV2-S's first stage: panels of 24 on AVX-512, 8 on AVX2), against numpy
    for shape, channels in (((1, 64, 35, 35), 96), ((1, 24, 23, 23), 24)):
        mod, w, extra = conv_model(shape, channels)
        x = _rand(shape)
        out, got = compile_run(mod, [x])
        (gemm,) = [f for n, f in out.functions.items() if "winograd_gemm" in n]
        assert gemm.params[1].shape[-1].value == panel_lanes(channels, PassContext().resolved())
        np.testing.assert_allclose(got, numpy_model(x, w, 1, "bias_relu", extra), rtol=1e-4,
                                   atol=1e-4)
