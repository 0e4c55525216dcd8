"""Static memory planning: storage shared between tensors whose lifetimes do not overlap."""
import pytest

from kiln import te
from kiln.executable.format import Op
from kiln.executable.lower import lower_module
from kiln.executable.plan import Alloc, plan_memory
from kiln.ir import FunctionBuilder, GraphTuple, GraphVar, IRModule, TensorType, call_tir


def _overlapping(a: Alloc, b: Alloc) -> bool:
    return not (a.last < b.first or b.last < a.first)


def _check_no_conflict(allocs, plan):
    """Tensors live at the same time never share bytes; every view lies inside the arena."""
    for a in allocs:
        assert plan.offsets[a.key] % 64 == 0
        assert plan.offsets[a.key] + a.nbytes <= plan.arena_size
    for a in allocs:
        for b in allocs:
            if a.key < b.key and _overlapping(a, b):
                lo_a, lo_b = plan.offsets[a.key], plan.offsets[b.key]
                assert lo_a + a.nbytes <= lo_b or lo_b + b.nbytes <= lo_a, (a, b, plan.offsets)


def test_chain_uses_two_buffers():
    allocs = [Alloc(i, 1000, i, i + 1) for i in range(10)]
    plan = plan_memory(allocs)
    assert plan.num_tokens == 2
    assert plan.arena_size == 2 * 1024 and plan.naive_size == 10 * 1024
    _check_no_conflict(allocs, plan)


def test_no_reuse_within_the_same_binding():
    # a is last read at binding 1, where b is written: they must not share.
    a, b = Alloc(0, 64, 0, 1), Alloc(1, 64, 1, 2)
    plan = plan_memory([a, b])
    assert plan.offsets[0] != plan.offsets[1]


def test_best_fit_prefers_the_smallest_block_that_fits():
    allocs = [Alloc(0, 4096, 0, 2), Alloc(1, 256, 1, 2),      # both free after binding 2
              Alloc(2, 200, 3, 4)]                            # fits the 256 block
    plan = plan_memory(allocs)
    assert plan.offsets[2] == plan.offsets[1]
    assert plan.arena_size == 4096 + 256


def test_grows_the_largest_free_block_when_none_fits():
    allocs = [Alloc(0, 128, 0, 1), Alloc(1, 64, 0, 1), Alloc(2, 1024, 2, 3)]
    plan = plan_memory(allocs)
    assert plan.num_tokens == 2 and plan.offsets[2] == plan.offsets[0]
    assert plan.arena_size == 1024 + 64
    _check_no_conflict(allocs, plan)


def test_empty_and_zero_size():
    assert plan_memory([]).arena_size == 0
    plan = plan_memory([Alloc(0, 0, 0, 0)])
    assert plan.arena_size == 64  # a zero-size tensor still gets a distinct (aligned) address


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes_never_conflict(seed):
    import random
    rng = random.Random(seed)
    allocs = []
    for k in range(40):
        first = rng.randrange(30)
        allocs.append(Alloc(k, rng.choice([64, 100, 512, 4000, 10_000]), first, first + rng.randrange(6)))
    plan = plan_memory(allocs)
    _check_no_conflict(allocs, plan)
    assert plan.arena_size <= plan.naive_size


# ---- planning through lowering -------------------------------------------------------------
def _inc(shape):
    A = te.placeholder(shape, "float32", name="A")
    B = te.compute(shape, lambda *i: A[i] + 1.0, name="B")
    return te.create_prim_func([A, B])


def test_lowered_chain_of_n_ops_uses_two_buffers():
    n_ops = 12
    x = GraphVar("x", TensorType((256, 256), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        v = x
        for _ in range(n_ops - 1):
            v = fb.emit(call_tir("inc", [v], TensorType((256, 256), "float32")))
        out = fb.emit_output(call_tir("inc", [v], TensorType((256, 256), "float32")))
    spec, plans = lower_module(IRModule({"inc": _inc((256, 256)), "main": fb.finish(out)}), "llvm")
    tensor = 256 * 256 * 4
    plan = plans["main"]
    assert plan.arena_size == 2 * tensor                 # ~2 buffers' worth, not N
    assert plan.naive_size == (n_ops - 1) * tensor
    offsets = [ins.operands[1] for ins in spec.function("main").code if ins.opcode == Op.ALLOC_ARENA]
    assert offsets == [0, tensor] * 5 + [0]


def test_lowered_value_used_late_keeps_its_storage():
    # a is read by the last op, so nothing written in between may take its bytes.
    x = GraphVar("x", TensorType((16,), "float32"))
    A = te.placeholder((16,), "float32", name="A")
    B = te.placeholder((16,), "float32", name="B")
    add = te.create_prim_func([A, B, te.compute((16,), lambda i: A[i] + B[i], name="C")])
    fb = FunctionBuilder([x])
    t16 = TensorType((16,), "float32")
    with fb.dataflow():
        a = fb.emit(call_tir("inc", [x], t16))
        b = fb.emit(call_tir("inc", [a], t16))
        c = fb.emit(call_tir("inc", [b], t16))
        d = fb.emit(call_tir("inc", [c], t16))
        out = fb.emit_output(call_tir("add", [d, a], t16))
    spec, plans = lower_module(IRModule({"inc": _inc((16,)), "add": add, "main": fb.finish(out)}), "llvm")
    offs = [ins.operands[1] for ins in spec.function("main").code if ins.opcode == Op.ALLOC_ARENA]
    a_off, others = offs[0], offs[1:]
    assert a_off not in others
    assert plans["main"].arena_size == 3 * 64


def test_tuple_keeps_fields_alive():
    x = GraphVar("x", TensorType((16,), "float32"))
    t16 = TensorType((16,), "float32")
    fb = FunctionBuilder([x])
    with fb.dataflow():
        a = fb.emit(call_tir("inc", [x], t16))
        tup = fb.emit(GraphTuple((a, x)))
        b = fb.emit(call_tir("inc", [x], t16))
        c = fb.emit(call_tir("inc", [b], t16))
        from kiln.ir import TupleGetItem
        a2 = fb.emit(TupleGetItem(tup, 0))
        out = fb.emit_output(call_tir("inc", [a2], t16))
        del c
    spec, _ = lower_module(IRModule({"inc": _inc((16,)), "main": fb.finish(out)}), "llvm")
    offs = [ins.operands[1] for ins in spec.function("main").code if ins.opcode == Op.ALLOC_ARENA]
    assert offs[0] not in offs[1:]   # a, reachable through the tuple until the end, is never shared
