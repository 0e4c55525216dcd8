"""API.md section 2, as written: script, te, schedule, trace, build, run."""
import numpy as np

import kiln
from kiln.script import T


@kiln.script.ir_module
class MyModule:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] + 1.0


def test_script_round_trip():
    assert kiln.ir.structural_equal(kiln.script.parse(MyModule.script()), MyModule)


def test_te_builds_the_same_program():
    from kiln import te
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    func = te.create_prim_func([A, B])
    mod_from_te = kiln.ir.IRModule({"main": func})
    kiln.ir.assert_structural_equal(mod_from_te, MyModule)


def test_schedule_split_reorder_and_trace_replay():
    sch = kiln.Schedule(MyModule)
    block = sch.get_block("B")
    (i,) = sch.get_loops(block)
    i0, i1, i2 = sch.split(i, factors=[2, 2, 2])
    sch.reorder(i0, i2, i1)
    text = sch.mod.script()
    assert "i_0 * 4 + i_1 * 2 + i_2" in text
    assert kiln.ir.structural_equal(kiln.script.parse(text), sch.mod)
    assert str(sch.trace).splitlines() == [
        "b0 = sch.get_block('B')",
        "(l1,) = sch.get_loops(b0)",
        "l2, l3, l4 = sch.split(l1, factors=[2, 2, 2])",
        "sch.reorder(l2, l4, l3)",
    ]
    replay = kiln.Schedule(MyModule)
    sch.trace.apply_to(replay)
    kiln.ir.assert_structural_equal(replay.mod, sch.mod)


def test_seed_flow_with_thread_bindings_prints_clean_script():
    sch = kiln.Schedule(MyModule)
    (i,) = sch.get_loops(sch.get_block("B"))
    i0, i1, i2 = sch.split(i, factors=[2, 2, 2])
    sch.reorder(i0, i2, i1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(i2, "threadIdx.x")
    text = sch.mod.script()
    assert 'T.thread_binding(2, thread="blockIdx.x")' in text
    assert 'T.thread_binding(2, thread="threadIdx.x")' in text
    assert "vi = T.axis.spatial(8, i_0 * 4 + i_1 * 2 + i_2)" in text
    kiln.ir.assert_structural_equal(kiln.script.parse(text), sch.mod)


def test_build_and_run_as_written():
    sch = kiln.Schedule(MyModule)
    (i,) = sch.get_loops(sch.get_block("B"))
    i0, i1, i2 = sch.split(i, factors=[2, 2, 2])
    sch.reorder(i0, i2, i1)
    rt = kiln.build(sch.mod, target="llvm")
    a = kiln.nd.array(np.arange(8, dtype="float32"))
    b = kiln.nd.empty((8,), "float32")
    rt(a, b)
    np.testing.assert_array_equal(b.numpy(), np.arange(8, dtype="float32") + 1)
    b2 = kiln.nd.empty((8,), "float32")
    rt["main"](a, b2)
    np.testing.assert_array_equal(b2.numpy(), b.numpy())
