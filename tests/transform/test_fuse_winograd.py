"""fuse_winograd (a Winograd conv's three operators -> one winograd_conv, run per block of tiles)
and its schedule (schedule_winograd._schedule_conv): the rule, the rewrite, and compiled results
against numpy for odd shapes, both layouts, batches, epilogues and the schedule's decisions."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ops import winograd
from kiln.schedule.decisions import Decisions
from kiln.transform import PassContext
from kiln.transform.conv_winograd import with_winograd
from kiln.transform.default_schedule import schedule_kernel
from kiln.transform.fuse_winograd import fuse_winograd, worth_fusing

from test_conv_winograd import _rand, conv_model, numpy_model, op_names

AVX512 = PassContext(target="llvm -mcpu=sapphirerapids")


def fused_pipeline(ctx=None, fuse=True, tile=4):
    """The default pipeline with every eligible 3x3 conv as Winograd F(tile) and every chain
    fused (``fuse``), whatever the sizes."""
    ctx = ctx or PassContext(disabled_passes=("conv_live_taps",))
    pipe = with_winograd(kiln.get_pipeline("default", ctx), choose=lambda call, plan: tile)
    passes = [fuse_winograd(ctx, choose=lambda call: fuse) if p.name == "fuse_winograd" else p
              for p in pipe]
    return kiln.transform.Sequential(passes, name="fused_winograd", ctx=ctx)


def run(out, args, threads=None):
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    if threads:
        kiln.set_num_threads(threads)
    try:
        return vm["main"](*[kiln.nd.array(a) for a in args]).numpy()
    finally:
        kiln.set_num_threads(0)


def kernels_with(out, anchor):
    return {n: dict(f.attrs) for n, f in out.functions.items()
            if hasattr(f, "attrs") and dict(f.attrs).get("kiln.anchor") == anchor}


def test_rule_fuses_a_large_image_with_a_small_weight():
    # ESPCN's 64 -> 32 at 224 x 224: U 295 KB, V + M 43 MB
    assert worth_fusing(6, 56 * 56, 64, 32, AVX512)
    # the same layer at 28 x 28: V + M (688 KB) fit in L2, the separate stages run in cache
    assert not worth_fusing(6, 7 * 7, 64, 32, AVX512)
    # ResNet-18's 256-channel layer: U (9.4 MB) would be read by every block
    assert not worth_fusing(6, 4 * 4, 256, 256, AVX512)
    # the boundary is half of L2 for U
    l2 = AVX512.machine.l2_bytes
    c = l2 // 2 // (36 * 4 * 32)
    assert worth_fusing(6, 10 ** 5, c, 32, AVX512) and not worth_fusing(6, 10 ** 5, c + 1, 32, AVX512)


def test_pass_rewrites_the_chain_into_one_operator():
    mod, _, _ = conv_model((1, 8, 12, 12), 16, epilogue="bias_relu")
    ctx = PassContext(nchwc_layout=False, disabled_passes=("conv_live_taps",))
    pre = [p for p in fused_pipeline(ctx) if p.name not in ("fuse_ops", "legalize", "fold_constant",
                                                             "dead_code_elimination",
                                                             "default_schedule")]
    out = kiln.transform.Sequential(pre, ctx=ctx)(mod)
    assert op_names(out) == ["winograd_conv", "add", "relu"]
    call = next(iter(out["main"].bindings())).value
    assert dict(call.attrs) == {"padding": (1, 1, 1, 1), "tile": 4, "out_channels": 16,
                                "layout": "NCHW"}
    # and the default rule leaves a small image's chain as three operators
    plain = kiln.transform.Sequential(
        [fuse_winograd(ctx) if p.name == "fuse_winograd" else p for p in pre], ctx=ctx)(mod)
    assert op_names(plain)[:3] == ["winograd_input", "winograd_gemm", "winograd_output"]


def test_the_default_pipeline_fuses_a_large_conv():
    mod, _, _ = conv_model((1, 64, 120, 120), 32, epilogue=None)
    ctx = PassContext(target="llvm -mcpu=sapphirerapids")
    pipe = with_winograd(kiln.get_pipeline("default", ctx), choose=lambda call, plan: 4)
    fused = kernels_with(pipe(mod), "winograd_conv")
    assert len(fused) == 1
    assert "blocks of 30 tiles" in next(iter(fused.values()))["kiln.schedule"]


@pytest.mark.parametrize("x_shape,o,padding,epilogue", [
    ((1, 16, 30, 30), 16, 1, "bias_relu"),          # 8 x 8 tiles, partial at the edge
    ((2, 12, 7, 7), 32, 1, "bn_residual"),          # batch 2, channels not a vector's multiple
    ((1, 8, 9, 13), 8, (0, 1, 2, 1), None),         # asymmetric padding, odd sizes
    ((1, 32, 16, 16), 64, 0, "bias_relu"),          # no padding, several panels of U
])
def test_fused_conv_matches_numpy(x_shape, o, padding, epilogue):
    mod, w, extra = conv_model(x_shape, o, padding=padding, epilogue=epilogue)
    x = _rand(x_shape)
    out = fused_pipeline()(mod)
    assert kernels_with(out, "winograd_conv"), "the chain was not fused"
    assert not kernels_with(out, "winograd_input")
    want = numpy_model(x, w, padding, epilogue, extra)
    for threads in (1, 2):
        np.testing.assert_allclose(run(out, [x], threads), want, rtol=1e-4, atol=1e-4)


def test_fused_conv_in_the_channel_blocked_layout():
    # two convs: the first's output and the second's input stay channel-blocked
    from kiln.ir import FunctionBuilder, IRModule
    from kiln.ir.graph import Constant
    from transform_helpers import typed
    w1, w2 = _rand((32, 16, 3, 3), 0.1), _rand((16, 32, 3, 3), 0.1)
    x = typed("x", (1, 16, 20, 20))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit(ops.call("relu", fb.emit(ops.call("conv2d", x, Constant(w1), padding=1))))
        out = fb.emit_output(ops.call("conv2d", y, Constant(w2), padding=1))
    mod = IRModule({"main": fb.finish(out)})
    out = fused_pipeline(PassContext(disabled_passes=("conv_live_taps",)))(mod)
    scheds = [a["kiln.schedule"] for a in kernels_with(out, "winograd_conv").values()]
    assert any("output nchwc" in s for s in scheds) and any("input nchwc" in s for s in scheds)
    xv = _rand((1, 16, 20, 20))
    ref = ops.get("conv2d")
    want = ref.reference(np.maximum(ref.reference(xv, w1, padding=1), 0), w2, padding=1)
    np.testing.assert_allclose(run(out, [xv], 2), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fixed", [{"tiles": 2, "mr": 1}, {"tiles": 4, "mr": 4, "vectors": 1},
                                   {"in_chunk": 4, "chunk": 8, "parallel": False},
                                   {"tiles": 1, "chunk": 4, "in_chunk": 16}])
def test_decisions_change_the_program_not_the_result(fixed):
    mod, w, extra = conv_model((1, 16, 32, 32), 32, epilogue="bias_relu")
    pipe = fused_pipeline(PassContext(disabled_passes=("conv_live_taps", "default_schedule")))
    pre = pipe(mod)
    (name,) = kernels_with(pre, "winograd_conv")
    funcs = dict(pre.functions)
    funcs[name] = schedule_kernel(pre[name], PassContext(), Decisions(fixed=fixed))
    decided = dict(funcs[name].attrs)["kiln.decisions"]
    for k, v in fixed.items():
        assert f"{k}={str(v).lower() if isinstance(v, bool) else v}" in decided
    out = kiln.IRModule(funcs, pre.attrs)
    out = kiln.get_pipeline("default", PassContext())(out)   # schedules the rest
    x = _rand((1, 16, 32, 32))
    np.testing.assert_allclose(run(out, [x], 2), numpy_model(x, w, 1, "bias_relu", extra),
                               rtol=1e-4, atol=1e-4)


def test_operator_reference_matches_the_conv():
    x, w = _rand((2, 8, 11, 10)), _rand((20, 8, 3, 3))
    u = winograd.transform_weight(w, 4, 8)
    got = ops.get("winograd_conv").reference(x, u, padding=(1, 1, 1, 1), tile=4, out_channels=20)
    np.testing.assert_allclose(got, ops.get("conv2d").reference(x, w, padding=1), rtol=1e-4,
                               atol=1e-4)
    with pytest.raises(ops.OpError, match="winograd"):
        ops.call("winograd_conv", kiln.ir.graph.Constant(x), kiln.ir.graph.Constant(u[:, :5]))


def test_cost_rule_takes_a_smaller_gain_for_a_conv_that_will_be_fused():
    from kiln.transform.conv_winograd import MIN_GAIN, MIN_GAIN_FUSED, conv_plan
    # ESPCN's last conv (32 -> 9 channels padded to 16, 224 x 224): estimated 1.17x
    mod, _, _ = conv_model((1, 32, 224, 224), 16, epilogue=None)
    call = next(iter(mod["main"].bindings())).value
    alone, fused = conv_plan(call), conv_plan(call, ctx=AVX512)
    assert MIN_GAIN_FUSED <= fused.speedup() < MIN_GAIN
    assert alone.fused == () and 4 in fused.fused
    assert alone.choice() is None and fused.choice() == 4
    # Winograd off: nothing will be fused
    assert conv_plan(call, ctx=AVX512.replace(winograd=False)).choice() is None


@pytest.mark.parametrize("seed", range(4))
def test_sampled_decisions_schedule_and_replay(seed):
    """The tuner samples the rule's decisions (``kiln.tune``): every sample schedules (a
    sample the rule cannot apply would fall back to another schedule that its replay does not
    reproduce) and replays to the same program."""
    import random
    from kiln.ir import assert_structural_equal
    from kiln.tune.measure import schedule_candidate
    mod, _, _ = conv_model((1, 16, 32, 32), 32, epilogue="bias_relu")
    pre = fused_pipeline(PassContext(disabled_passes=("conv_live_taps", "default_schedule")))(mod)
    (name,) = kernels_with(pre, "winograd_conv")
    ctx = PassContext().resolved()
    rng = random.Random(seed)
    for _ in range(6):
        d = Decisions(sampler=lambda n, options, default: rng.choice(list(options)))
        sampled = schedule_kernel(pre[name], ctx, d)
        assert dict(sampled.attrs)["kiln.schedule"].startswith("winograd conv:"), d.made
        assert_structural_equal(schedule_candidate(pre[name], ctx, d.made), sampled)


def test_fused_conv_for_an_avx2_target():
    # AVX2's 8-lane vectors and 12 accumulators: panels of 16 channels, two vectors each
    target = "llvm -mcpu=haswell"
    mod, w, extra = conv_model((1, 16, 24, 24), 32, epilogue="bias_relu")
    out = fused_pipeline(PassContext(target=target, disabled_passes=("conv_live_taps",)))(mod)
    (attrs,) = kernels_with(out, "winograd_conv").values()
    assert "gemm tile" in attrs["kiln.schedule"]
    vm = kiln.VirtualMachine(kiln.compile(out, target=target), kiln.cpu())
    x = _rand((1, 16, 24, 24))
    np.testing.assert_allclose(vm["main"](kiln.nd.array(x)).numpy(),
                               numpy_model(x, w, 1, "bias_relu", extra), rtol=1e-4, atol=1e-4)
