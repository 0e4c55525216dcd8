"""Layer decisions (``kiln/tune/layers.py``): each 3x3 conv's direct-or-Winograd choice as a
measured, recorded decision that ``PassContext(tuning_db=...)`` applies."""
import warnings

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import FunctionBuilder, GraphVar, IRModule, TensorType
from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.tune.apply import StaleRecordWarning
from kiln.tune.database import Database, make_record
from kiln.tune.layers import (BLOCK, PANEL, WINOGRAD, block_layers, layer_workload,
                              panel_layers, winograd_layers)

X = (1, 16, 10, 10)


def _two_convs(same: bool = True) -> IRModule:
    """relu(conv(relu(conv(x, w1)), w2)): two 3x3 stride-1 16->16 convs, the same layer twice
    (``same``), or the second of another weight shape (padding 0)."""
    rng = np.random.default_rng(0)
    w1 = Constant((rng.standard_normal((16, 16, 3, 3)) * 0.2).astype("float32"))
    w2 = Constant((rng.standard_normal((16, 16, 3, 3)) * 0.2).astype("float32"))
    x = GraphVar("x", TensorType(X, "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        a = fb.emit(ops.call("relu", fb.emit(ops.call("conv2d", x, w1, padding=(1, 1)))))
        b = fb.emit(ops.call("conv2d", a, w2, padding=(1, 1) if same else (0, 0)))
        out = fb.emit_output(ops.call("relu", b))
    return IRModule({"main": fb.finish(out)})


def _reference(x, mod):
    """The module run through the default pipeline with Winograd off (the direct convs)."""
    ex = kiln.compile(kiln.get_pipeline("default", PassContext(winograd=False))(mod), "llvm")
    return kiln.VirtualMachine(ex, kiln.cpu())["main"](kiln.nd.array(x)).numpy()


def test_layers_are_found_once_per_distinct_conv():
    ctx = PassContext(target="llvm", cores=1)
    same = winograd_layers(_two_convs(same=True), ctx)
    assert len(same) == 1 and same[0].calls == 2
    assert same[0].options[0] == 0 and set(same[0].options[1:]) == {4, 2}
    assert same[0].kernel == "conv2d 1x16x10x10 w16x16x3x3"
    other = winograd_layers(_two_convs(same=False), ctx)
    assert len(other) == 2 and {t.workload for t in other} == \
        {layer_workload(t.call, WINOGRAD) for t in other}
    assert winograd_layers(_two_convs(), PassContext(target="llvm", winograd=False)) == []


@pytest.mark.parametrize("choice", [0, 2, 4])
def test_a_record_decides_the_layer_and_the_result_is_unchanged(tmp_path, choice):
    mod = _two_convs()
    ctx = PassContext(target="llvm", cores=1, tuning_db=str(tmp_path / "db.jsonl"))
    (task,) = winograd_layers(mod, ctx.replace(tuning_db=None))
    key = ctx.resolved().machine.key()
    db = Database(ctx.tuning_db)
    for o, s in ((0, 3e-5), (2, 2e-5), (4, 4e-5)):      # the chosen option is the fastest
        db.append(make_record(task.workload, key, 1, task.kernel, {WINOGRAD: o}, "ok",
                              median_s=s / (10 if o == choice else 1),
                              min_s=s / (10 if o == choice else 1)))
    out = kiln.get_pipeline("default", ctx)(mod)
    inputs = [f for f in out.functions if "winograd_input" in f]
    assert bool(inputs) == (choice != 0), sorted(out.functions)
    x = np.random.default_rng(1).standard_normal(X).astype("float32")
    got = kiln.VirtualMachine(kiln.compile(out, "llvm"), kiln.cpu())["main"](
        kiln.nd.array(x)).numpy()
    np.testing.assert_allclose(got, _reference(x, mod), rtol=1e-4, atol=1e-4)
    if choice:
        # the tile reaches the transform: F(m x m, 3 x 3) works on (m + 2) x (m + 2) tiles
        header = out[inputs[0]].script().splitlines()[3]
        assert f"T.Buffer(({choice + 2}, {choice + 2}," in header, header


def test_a_record_of_an_option_that_no_longer_exists_is_reported_once(tmp_path):
    mod = _two_convs()
    ctx = PassContext(target="llvm", cores=1, tuning_db=str(tmp_path / "db.jsonl"))
    (task,) = winograd_layers(mod, ctx.replace(tuning_db=None))
    Database(ctx.tuning_db).append(make_record(
        task.workload, ctx.resolved().machine.key(), 1, task.kernel, {WINOGRAD: 3}, "ok",
        median_s=1e-5, min_s=1e-5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = kiln.get_pipeline("default", ctx)(mod)
    stale = [w for w in caught if issubclass(w.category, StaleRecordWarning)]
    assert len(stale) == 1 and "winograd=3" in str(stale[0].message)
    plain = kiln.get_pipeline("default", ctx.replace(tuning_db=None))(mod)
    assert sorted(out.functions) == sorted(plain.functions)     # the cost rule decided


def test_tune_measures_every_option_and_a_second_run_reuses_them(tmp_path):
    db = tmp_path / "db.jsonl"
    mod = _two_convs()
    report = kiln.tune(mod, db=db, trials=1, num_threads=1, progress=False, confirm=False,
                       check_model=False, cost_model=False)
    layer = report.layers[0]
    assert layer.decision == WINOGRAD
    assert set(layer.times) == {0, 2, 4} and all(t and t > 0 for t in layer.times.values())
    assert layer.best in (0, 2, 4) and layer.calls == 2
    assert "layer conv2d 1x16x10x10 w16x16x3x3 (x2)" in str(report)
    records = [r for r in Database(db).records() if r["workload"].startswith("layer:winograd:")]
    assert sorted(r["decisions"][WINOGRAD] for r in records) == [0, 2, 4]
    # the kernels tuned are those the measured choice makes
    names = " ".join(k.name for k in report.kernels)
    assert ("winograd" in names) == (layer.best != 0), names
    again = kiln.tune(mod, db=db, trials=1, num_threads=1, progress=False, confirm=False,
                      check_model=False, cost_model=False)
    assert again.layers[0].note == "measured before"
    assert len([r for r in Database(db).records()
                if r["workload"].startswith("layer:winograd:")]) == 3


W48 = (np.random.default_rng(2).standard_normal((48, 16, 1, 1)) * 0.2).astype("float32")


def _blocked_conv() -> IRModule:
    """relu(conv2d(x, W48)): a 1x1 conv to 48 channels at 14x14 (blocked in 16 or 8 channels
    on AVX-512 and AVX2)."""
    w = Constant(W48)
    x = GraphVar("x", TensorType((1, 16, 14, 14), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        out = fb.emit_output(ops.call("relu", fb.emit(ops.call("conv2d", x, w))))
    return IRModule({"main": fb.finish(out)})


def test_a_record_decides_the_conv_block(tmp_path):
    mod = _blocked_conv()
    ctx = PassContext(target="llvm", cores=1, tuning_db=str(tmp_path / "db.jsonl"))
    (task,) = block_layers(mod, ctx.replace(tuning_db=None))
    assert task.decision == BLOCK and 8 in task.options and task.default != 8
    Database(ctx.tuning_db).append(make_record(task.workload, ctx.resolved().machine.key(), 1,
                                               task.kernel, {BLOCK: 8}, "ok", median_s=1e-6,
                                               min_s=1e-6))
    out = kiln.get_pipeline("default", ctx)(mod)
    convs = [f for n, f in out.functions.items() if "conv2d" in n]
    assert convs and all("x8" in dict(f.attrs)["kiln.schedule"].split(",")[0] for f in convs), \
        [dict(f.attrs)["kiln.schedule"] for f in convs]
    x = np.random.default_rng(3).standard_normal((1, 16, 14, 14)).astype("float32")
    got = kiln.VirtualMachine(kiln.compile(out, "llvm"), kiln.cpu())["main"](
        kiln.nd.array(x)).numpy()
    want = np.maximum(np.einsum("oc,nchw->nohw", W48[:, :, 0, 0], x), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_grouped_conv_offers_only_blocks_within_a_group():
    """A 3x3 conv in 4 groups of 16 channels (AVX-512: blocks of 16 or 8 fit a group; 32
    would not, though it divides the 64 output channels); in groups of 8 only 8 does, so there
    is nothing to choose."""
    rng = np.random.default_rng(4)

    def grouped(group):
        w = Constant((rng.standard_normal((64, group, 3, 3)) * 0.1).astype("float32"))
        x = GraphVar("x", TensorType((1, 64, 14, 14), "float32"))
        fb = FunctionBuilder([x])
        with fb.dataflow():
            out = fb.emit_output(ops.call("conv2d", x, w, padding=(1, 1), groups=64 // group))
        return IRModule({"main": fb.finish(out)})
    ctx = PassContext(target="llvm -mcpu=skylake-avx512", cores=1)
    (task,) = block_layers(grouped(16), ctx)
    assert task.decision == BLOCK and set(task.options) == {16, 8}
    assert block_layers(grouped(8), ctx) == []


def test_a_record_decides_a_matvec_panel(tmp_path):
    """A one-row linear may pack its weight in panels 2 or 4 times the tile's vector width (one
    stream per tile); a record picks one, the kernel tiles by it and computes the same."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((1024, 96)).astype("float32")
    x = GraphVar("x", TensorType((1, 96), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        out = fb.emit_output(ops.call("linear", x, Constant(w)))
    mod = IRModule({"main": fb.finish(out)})
    ctx = PassContext(target="llvm", cores=1, tuning_db=str(tmp_path / "db.jsonl"))
    lanes = ctx.resolved().pack_lanes
    (task,) = panel_layers(mod, ctx.replace(tuning_db=None))
    assert task.decision == PANEL and task.default == lanes
    assert {lanes, 2 * lanes, 4 * lanes} <= set(task.options)
    Database(ctx.tuning_db).append(make_record(task.workload, ctx.resolved().machine.key(), 1,
                                               task.kernel, {PANEL: 4 * lanes}, "ok",
                                               median_s=1e-6, min_s=1e-6))
    scheduled = kiln.get_pipeline("default", ctx)(mod)
    descs = [dict(f.attrs).get("kiln.schedule", "") for f in scheduled.functions.values()
             if hasattr(f, "attrs")]
    assert any(d.startswith(f"matmul: tile 1x{4 * lanes},") for d in descs), descs
    xs = rng.standard_normal((1, 96)).astype("float32")
    got = kiln.VirtualMachine(kiln.compile(scheduled, "llvm"), kiln.cpu())["main"](
        kiln.nd.array(xs)).numpy()
    np.testing.assert_allclose(got, xs @ w.T, rtol=1e-4, atol=1e-4)


def test_layers_stop_at_their_share_of_the_time_budget(tmp_path):
    report = kiln.tune(_two_convs(), db=tmp_path / "db.jsonl", time_budget_s=1e-3,
                       num_threads=1, progress=False, confirm=False, check_model=False,
                       cost_model=False)
    assert report.layers and all(lay.times == {} and "time budget" in lay.note
                                 for lay in report.layers)
    assert not [r for r in Database(tmp_path / "db.jsonl").records()
                if r["workload"].startswith("layer:")]


def _large_conv(shape=(1, 32, 64, 64), o=32) -> IRModule:
    """One 3x3 conv whose Winograd stages ``fuse_winograd`` fuses on an AVX-512 target (V and
    M 5.3 MB, U 147 KB)."""
    w = Constant((np.random.default_rng(2).standard_normal((o, shape[1], 3, 3)) * 0.1)
                 .astype("float32"))
    x = GraphVar("x", TensorType(shape, "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        out = fb.emit_output(ops.call("conv2d", x, w, padding=(1, 1)))
    return IRModule({"main": fb.finish(out)})


def test_a_fused_winograd_conv_is_an_option_of_the_layer():
    ctx = PassContext(target="llvm -mcpu=sapphirerapids", cores=1)
    (task,) = winograd_layers(_large_conv(), ctx)
    assert task.options == [0, 4, 2, -4, -2] and task.default == -4
    from kiln.tune.layers import describe
    assert describe(WINOGRAD, -4) == "winograd 4 fused" and describe(WINOGRAD, 4) == "winograd 4"
    # a small image: nothing to fuse, no fused option
    (small,) = winograd_layers(_two_convs(), ctx)
    assert all(o >= 0 for o in small.options)


@pytest.mark.parametrize("choice,fused", [(-4, True), (4, False), (-2, True)])
def test_a_record_fuses_the_stages_or_keeps_three_kernels(tmp_path, choice, fused):
    mod = _large_conv()
    ctx = PassContext(target="llvm -mcpu=sapphirerapids", cores=1,
                      tuning_db=str(tmp_path / "db.jsonl"))
    (task,) = winograd_layers(mod, ctx.replace(tuning_db=None))
    Database(ctx.tuning_db).append(make_record(
        task.workload, ctx.resolved().machine.key(), 1, task.kernel, {WINOGRAD: choice}, "ok",
        median_s=1e-5, min_s=1e-5))
    out = kiln.get_pipeline("default", ctx)(mod)
    names = sorted(out.functions)
    assert any("winograd_conv" in n for n in names) == fused, names
    assert any("winograd_input" in n for n in names) == (not fused), names
    tile = abs(choice) + 2
    kernel = next(n for n in names if "winograd_conv" in n or "winograd_input" in n)
    assert f"T.Buffer(({tile}, {tile}," in out[kernel].script() or \
        f"({tile}, {tile}," in out[kernel].script()
