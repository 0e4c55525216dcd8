"""Software prefetch of the next weight block in channel-blocked convs (``transform/prefetch.py``,
``schedule_conv``): where the schedule adds it, that the fetches cover the whole next block,
that the decision ``prefetch`` turns it off, and that the numbers do not change."""
import itertools

import numpy as np
import pytest

import kiln
from kiln.ir import (Add, BlockRealize, BufferLoad, Call, Evaluate, FloorDiv, FloorMod, For, IntImm,
                     Min, Mul, SeqStmt, Var)
from kiln.schedule.decisions import Decisions
from kiln.transform.default_schedule import schedule_kernel
from kiln.transform.infra import Sequential
from kiln.transform.prefetch import LINE_ELEMENTS

from test_conv_blocked import _compile_and_check, _conv_model
from transform_helpers import attr, kernels

AVX512 = "llvm -mcpu=skylake-avx512"


def _unscheduled_kernel(mod, target):
    pipe = kiln.get_pipeline("default", target=target)
    pre = Sequential([p for p in pipe if p.name != "default_schedule"], ctx=pipe.ctx)(mod)
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


def test_fetches_cover_every_line_of_the_next_block():
    mod = _conv_model((1, 64, 10, 10), (96, 64, 3, 3), padding=(1, 1))
    func, ctx = _unscheduled_kernel(mod, "llvm -mcpu=haswell")
    sched = schedule_kernel(func, ctx)
    (call, loops), = _fetches(sched)
    load = call.args[0]
    assert isinstance(load, BufferLoad)
    shape = [int(d.value) for d in load.buffer.shape]
    block = int(np.prod(shape[1:]))
    par = loops[0]
    rows = 10
    blocks = par.extent.value // rows
    lines = {}
    for values in itertools.product(*(range(int(lp.extent.value)) for lp in loops)):
        env = dict(zip((lp.loop_var for lp in loops), values))
        b = _value(load.indices[0], env)
        off = _value(load.indices[-1], env)
        assert 0 <= off < block and all(_value(i, env) == 0 for i in load.indices[1:-1])
        lines.setdefault(env[par.loop_var] // rows, {}).setdefault(b, set()).add(off // LINE_ELEMENTS)
    for g in range(blocks - 1):
        # the rows of block g fetch all of block g + 1, and nothing else
        assert set(lines[g]) == {g + 1}
        assert lines[g][g + 1] == set(range(-(-block // LINE_ELEMENTS)))


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


def test_flat_tiles_do_not_prefetch():
    # 1x1 conv on a short image: flat tiles; its schedule is left as it was
    mod = _conv_model((1, 96, 7, 7), (32, 96, 1, 1))
    out, name = _compile_and_check(mod, (1, 96, 7, 7))
    desc = attr(out[name], "kiln.schedule")
    assert "flat" in desc and "prefetch" not in desc
