"""Software prefetch of the next weight block in channel-blocked convs and of the next packed
panel in matmuls (``transform/prefetch.py``, ``schedule_conv``, ``schedule_tile``): where the
schedules add it, that the fetches cover the whole next block, that the decision ``prefetch``
turns it off, and that the numbers do not change."""
import itertools

import numpy as np
import pytest

import kiln
from kiln.ir import (Add, BlockRealize, BufferLoad, Call, Evaluate, FloorDiv, FloorMod, For, IntImm,
                     Min, Mul, SeqStmt, Var)
from kiln import ops
from kiln.ir.graph import Constant
from kiln.schedule.decisions import Decisions
from kiln.transform.default_schedule import schedule_kernel
from kiln.transform.infra import PassContext, Sequential
from kiln.transform.prefetch import LINE_ELEMENTS

from test_conv_blocked import _compile_and_check, _conv_model
from transform_helpers import attr, graph_module, kernels, outputs_at_threads, reference, typed

AVX512 = "llvm -mcpu=skylake-avx512"


def _unscheduled_kernel(mod, target):
    """The model's one kernel before scheduling; a 3x3 conv stays direct (whether Winograd
    pays depends on the target's memory stream, and on the host that varies)."""
    pipe = kiln.get_pipeline("default", target=target)
    pre = Sequential([p for p in pipe if p.name not in ("default_schedule", "conv_winograd")],
                     ctx=pipe.ctx)(mod)
    (name,) = kernels(pre)
    return pre[name], pipe.ctx


def _fetches(func):
    """(the prefetch Call, the loops around it outermost first)."""
    found = []

    def visit(node, loops):
        if isinstance(node, For):
            visit(node.body, loops + [node])
        elif isinstance(node, Evaluate) and isinstance(node.value, Call) and node.value.op == "prefetch":
            found.append((node.value, loops))
        elif isinstance(node, SeqStmt):
            for child in node.seq:
                visit(child, loops)
        elif isinstance(node, BlockRealize):
            visit(node.block.body, loops)
    visit(func.body, [])
    return found


def _value(e, env):
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    ops = {Add: lambda a, b: a + b, Mul: lambda a, b: a * b, FloorDiv: lambda a, b: a // b,
           FloorMod: lambda a, b: a % b, Min: min}
    return ops[type(e)](_value(e.a, env), _value(e.b, env))


@pytest.mark.parametrize("x_shape,w_shape,target", [
    ((1, 64, 10, 10), (96, 64, 3, 3), "llvm -mcpu=haswell"),   # tile 5x16: 6 blocks x 10 rows
    ((2, 32, 9, 9), (64, 32, 3, 3), AVX512),                   # batch 2: the blocks come again
    ((1, 64, 7, 7), (128, 64, 3, 3), AVX512),                  # tile 7x32
])
def test_conv_prefetches_the_next_block_and_computes_the_same(x_shape, w_shape, target):
    mod = _conv_model(x_shape, w_shape, padding=(1, 1))
    out, name = _compile_and_check(mod, x_shape, target=target)     # numpy at 1e-4
    assert attr(out[name], "kiln.schedule").endswith("prefetch next block")
    (call, loops), = _fetches(out[name])
    assert loops[0].kind == "parallel" and loops[-1].kind == "serial"


def _matmul_model(m, k, n, seed=5):
    rng = np.random.default_rng(seed)
    w = Constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32"))
    bias = Constant(rng.standard_normal((n,)).astype("float32"))
    return graph_module([typed("x", (1, m, k))],
                        lambda emit, x: ops.call("add", emit("matmul", x, w), bias))


def _scheduled(mod, target):
    pipe = kiln.get_pipeline("default", PassContext(target=target, cores=2))
    pre = Sequential([p for p in pipe if p.name != "default_schedule"], ctx=pipe.ctx)(mod)
    (name,) = kernels(pre)
    return schedule_kernel(pre[name], pipe.ctx)


def _winograd_gemm():
    """ResNet's 14x14 256-channel 3x3 conv as F(2x2): its GEMM, 16 products of 49 x 256 x 256,
    the packed weight ``[4, 4, 4, 256, 64]`` (panel, product), scheduled for two cores."""
    from kiln.transform.conv_winograd import with_winograd
    mod = _conv_model((1, 256, 14, 14), (256, 256, 3, 3), padding=(1, 1))
    ctx = PassContext(target=AVX512, cores=2)
    pipe = with_winograd(kiln.get_pipeline("default", ctx), choose=lambda call, plan: 2)
    pre = Sequential([p for p in pipe if p.name != "default_schedule"], ctx=pipe.ctx)(mod)
    return schedule_kernel(pre["winograd_gemm"], pipe.ctx)


def _conv_reads(rows):
    return lambda f, shape: (f // rows) % shape[0]


def _winograd_reads(f, shape):
    # the parallel loop walks (a, b, panel), the weight is [panel, a, b, K, P]
    nb, ta, tb = shape[:3]
    a, b, panel = f // (tb * nb), f // nb % tb, f % nb
    return (panel * ta + a) * tb + b


@pytest.mark.parametrize("make,rows,trailing,reads", [
    # tile 5x16, 6 channel blocks x 10 rows: each row fetches a tenth of the next block
    (lambda: _scheduled(_conv_model((1, 64, 10, 10), (96, 64, 3, 3), padding=(1, 1)),
                        "llvm -mcpu=haswell"), 10, 4, _conv_reads(10)),
    # tile 5x16 flat: each pixel tile (a serial loop under the block) fetches a part
    (lambda: _scheduled(_conv_model((1, 64, 7, 7), (128, 64, 3, 3), padding=(1, 1)),
                        "llvm -mcpu=haswell"), 1, 4, _conv_reads(1)),
    # 16 panels of 64 columns, 11 row tiles each (the last guarded)
    (lambda: _scheduled(_matmul_model(64, 256, 1024), AVX512), 1, 2, _conv_reads(1)),
    # a batch of products: each iteration reads one product's panel, K x P of [N/P, 4, 4, K, P]
    (_winograd_gemm, 1, 2, _winograd_reads),
], ids=["conv", "conv-flat", "matmul", "winograd-gemm"])
def test_fetches_cover_every_line_of_the_next_block(make, rows, trailing, reads):
    sched = make()
    assert "prefetch next" in attr(sched, "kiln.schedule")
    (call, loops), = _fetches(sched)
    load = call.args[0]
    assert isinstance(load, BufferLoad)
    shape = [int(d.value) for d in load.buffer.shape]
    block = int(np.prod(shape[-trailing:]))
    strides = [int(np.prod(shape[a + 1:])) for a in range(len(shape))]
    par = loops[0]
    groups = par.extent.value // rows
    assert groups >= 3
    lines = {}
    for values in itertools.product(*(range(int(lp.extent.value)) for lp in loops)):
        env = dict(zip((lp.loop_var for lp in loops), values))
        index = [_value(i, env) for i in load.indices]
        assert 0 <= index[-1] < block and all(i == 0 for i in index[len(shape) - trailing:-1])
        flat = sum(i * st for i, st in zip(index, strides))
        lines.setdefault(env[par.loop_var] // rows, {}).setdefault(flat // block, set()) \
            .add(flat % block // LINE_ELEMENTS)
    for g in range(groups - 1):
        # the work of group g fetches all of the block the next group reads, and nothing else
        nxt = reads((g + 1) * rows, shape)
        assert set(lines[g]) == {nxt}
        assert lines[g][nxt] == set(range(-(-block // LINE_ELEMENTS)))


@pytest.mark.parametrize("m,k,n", [(64, 256, 1024), (50, 96, 640), (7, 64, 640)])
def test_matmul_prefetching_panels_matches_numpy(m, k, n):
    """Rows not a multiple of the tile's and a bias in the write-back, at 1 and 2 threads."""
    mod = _matmul_model(m, k, n)
    ctx = PassContext(target="llvm", cores=2, parallel_min_elements=256)
    out = kiln.get_pipeline("default", ctx)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").endswith("prefetch next panel")
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    x = np.random.default_rng(6).standard_normal((1, m, k)).astype("float32")
    for got in outputs_at_threads(vm, [x]):
        np.testing.assert_allclose(got, reference(mod, [x]), rtol=1e-4, atol=1e-4)


def test_matmul_split_by_rows_does_not_prefetch():
    # 64 x 256 x 256: split by rows, every row block reads all of B, which stays in L2
    sched = _scheduled(_matmul_model(64, 256, 256), AVX512)
    desc = attr(sched, "kiln.schedule")
    assert "parallel by rows" in desc and "prefetch" not in desc and not _fetches(sched)


def test_decision_turns_prefetch_off_with_the_same_numbers():
    x_shape, w_shape = (1, 64, 10, 10), (96, 64, 3, 3)
    mod = _conv_model(x_shape, w_shape, padding=(1, 1))
    func, ctx = _unscheduled_kernel(mod, "llvm")
    on = schedule_kernel(func, ctx)
    off = schedule_kernel(func, ctx, Decisions(fixed={"prefetch": False}))
    assert "prefetch" not in attr(off, "kiln.schedule") and not _fetches(off)
    assert attr(on, "kiln.schedule").endswith("prefetch next block")
    results = []
    for f in (on, off):
        rng = np.random.default_rng(3)      # the same inputs for both
        args = [kiln.nd.array((rng.standard_normal([int(d.value) for d in p.shape]) * 0.1)
                              .astype("float32")) for p in f.params]
        kiln.build(kiln.ir.IRModule({"main": f}), target="llvm")["main"](*args)
        results.append(args[-1].numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_rows_outer_tiles_do_not_prefetch():
    # a 1x1 conv on a short image goes rows outer: every row reads every block's weight
    mod = _conv_model((1, 96, 7, 7), (32, 96, 1, 1))
    out, name = _compile_and_check(mod, (1, 96, 7, 7), target="llvm -mcpu=haswell")
    desc = attr(out[name], "kiln.schedule")
    assert "flat" in desc and "rows outer" in desc and "prefetch" not in desc


def test_flat_conv_prefetching_matches_numpy():
    out, name = _compile_and_check(_conv_model((1, 64, 7, 7), (128, 64, 3, 3), padding=(1, 1)),
                                   (1, 64, 7, 7), target="llvm -mcpu=haswell")
    desc = attr(out[name], "kiln.schedule")
    assert "flat" in desc and desc.endswith("prefetch next block")


def _conv_then_pointwise(target, size=28):
    """A 3x3 conv 64 -> 64 at ``size`` x ``size``, relu, then a 1x1 conv 64 -> 32 that reads
    its input channel-blocked, rows outer; the 1x1 conv's kernel, scheduled for two cores."""
    rng = np.random.default_rng(8)
    w1 = Constant((rng.standard_normal((64, 64, 3, 3)) / 24).astype("float32"))
    w2 = Constant((rng.standard_normal((32, 64, 1, 1)) / 8).astype("float32"))
    mod = graph_module([typed("x", (1, 64, size, size))], lambda emit, x: ops.call(
        "conv2d", emit("relu", emit("conv2d", x, w1, padding=(1, 1))), w2))
    ctx = PassContext(target=target, cores=2, winograd=False)
    pipe = kiln.get_pipeline("default", ctx)
    pre = Sequential([p for p in pipe if p.name != "default_schedule"], ctx=pipe.ctx)(mod)
    (name,) = [k for k in kernels(pre) if any(
        len(p.shape) == 5 and int(p.shape[1].value) == int(p.shape[2].value) == 1
        for p in pre[k].params)]
    return mod, schedule_kernel(pre[name], pipe.ctx)


@pytest.mark.parametrize("target,size", [("llvm -mcpu=haswell", 28), (AVX512, 56)])
def test_rows_outer_pointwise_conv_fetches_the_next_input_row(target, size):
    # (AVX-512 tiles a 28-wide image flat: its tiles cross rows, and fetch nothing)
    mod, sched = _conv_then_pointwise(target, size)
    assert "rows outer" in attr(sched, "kiln.schedule")
    assert attr(sched, "kiln.schedule").endswith("prefetch next row")
    (call, loops), = _fetches(sched)
    load = call.args[0]
    shape = [int(d.value) for d in load.buffer.shape]        # [1, C/b, 28, 28, b]
    assert len(shape) == 5 and shape[2] == size
    strides = [int(np.prod(shape[a + 1:])) for a in range(5)]
    par = loops[0]
    per_row = par.extent.value // shape[2]                    # channel blocks of the output
    fetched = {}
    for values in itertools.product(*(range(int(lp.extent.value)) for lp in loops)):
        env = dict(zip((lp.loop_var for lp in loops), values))
        flat = sum(_value(i, env) * st for i, st in zip(load.indices, strides))
        fetched.setdefault(env[par.loop_var] // per_row, set()).add(flat // LINE_ELEMENTS)
    row = shape[3] * shape[4]
    for y in range(shape[2] - 1):
        # output row y fetches every line of input row y + 1, in every channel block
        want = {(cb * strides[1] + (y + 1) * strides[2] + e) // LINE_ELEMENTS
                for cb in range(shape[1]) for e in range(0, row, LINE_ELEMENTS)}
        assert fetched[y] == want


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 64, 28, 28), (32, 64, 1, 1), {}),                        # NCHW input: a run per channel
    ((2, 64, 20, 20), (48, 64, 1, 1), {}),                        # batch 2
    ((1, 64, 29, 29), (32, 64, 1, 1), {"strides": (2, 2)}),       # the next row is 2 rows on
])
def test_rows_outer_prefetching_matches_numpy(x_shape, w_shape, attrs):
    out, name = _compile_and_check(_conv_model(x_shape, w_shape, **attrs), x_shape,
                                   PassContext(winograd=False), target="llvm -mcpu=haswell")
    desc = attr(out[name], "kiln.schedule")
    assert "rows outer" in desc and desc.endswith("prefetch next row"), desc


def test_rows_outer_two_conv_chain_matches_the_reference():
    mod, _ = _conv_then_pointwise("llvm")
    out = kiln.get_pipeline("default", target="llvm")(mod)
    x = np.random.default_rng(9).standard_normal((1, 64, 28, 28)).astype("float32")
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    for got in outputs_at_threads(vm, [x]):
        np.testing.assert_allclose(got, reference(mod, [x]), rtol=1e-4, atol=1e-4)
