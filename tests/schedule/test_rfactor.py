"""The ``rfactor`` primitive: the IR it makes, what the result computes (reference evaluator
and compiled, against numpy), trace replay, round-trip printing, and its errors."""
import numpy as np
import pytest

import kiln
from kiln import ScheduleError, te
from kiln.ir import IRModule, assert_structural_equal
from kiln.ir.verify import verify
from kiln.script import T, assert_roundtrip

from schedule_helpers import check_same


def row_reduce(op="sum", rows=8, n=64):
    """``B[i] = op_k A[i, k]``; loops ``i, k``, block "B"."""
    A = te.placeholder((rows, n), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[op]
    B = te.compute((rows,), lambda i: red(A[i, k], axis=k), name="B")
    return IRModule({"main": te.create_prim_func([A, B])})


def check_all(before, sch):
    verify(sch.mod)
    check_same(before, sch.mod)
    assert_roundtrip(sch.mod)
    fresh = kiln.Schedule(before)
    sch.trace.apply_to(fresh)
    assert_structural_equal(fresh.mod, sch.mod)


@kiln.script.ir_module
class SumRF:
    @T.prim_func
    def main(A: T.Buffer((8, 16), "float32"), B: T.Buffer((8,), "float32")):
        B_rf = T.alloc_buffer((4, 8), "float32")
        for i in range(8):
            for k_0 in range(4):
                for k_1 in range(4):
                    with T.block("B_rf"):
                        vi = T.axis.spatial(8, i)
                        vk_1 = T.axis.spatial(4, k_1)
                        vk_0 = T.axis.reduce(4, k_0)
                        T.reads(A[vi, vk_0 * 4 + vk_1])
                        T.writes(B_rf[vk_1, vi])
                        with T.init():
                            B_rf[vk_1, vi] = T.float32(0)
                        B_rf[vk_1, vi] = B_rf[vk_1, vi] + A[vi, vk_0 * 4 + vk_1]
            for k_1_rf in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(8, i)
                    vk_1 = T.axis.reduce(4, k_1_rf)
                    T.reads(B_rf[vk_1, vi])
                    T.writes(B[vi])
                    with T.init():
                        B[vi] = T.float32(0)
                    B[vi] = B[vi] + B_rf[vk_1, vi]


def test_rfactor_ir():
    mod = row_reduce(rows=8, n=16)
    sch = kiln.Schedule(mod)
    _, k = sch.get_loops(sch.get_block("B"))
    _, k1 = sch.split(k, [None, 4])
    rf = sch.rfactor(k1, 0)
    assert rf.name == "B_rf"
    assert_structural_equal(sch.mod, SumRF)
    check_all(mod, sch)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("factor_axis", [0, 1])
def test_rfactor_computes_the_same(op, factor_axis):
    mod = row_reduce(op)
    sch = kiln.Schedule(mod)
    _, k = sch.get_loops(sch.get_block("B"))
    sch.split(k, [None, 8])
    _, k0, k1 = sch.get_loops(sch.get_block("B"))
    sch.rfactor(k1, factor_axis)
    check_all(mod, sch)


def test_rfactor_of_the_outer_loop():
    # Factoring k_0 (the partials are strided sums) is as legal as factoring k_1.
    mod = row_reduce()
    sch = kiln.Schedule(mod)
    _, k = sch.get_loops(sch.get_block("B"))
    k0, _ = sch.split(k, [None, 8])
    sch.rfactor(k0, 1)
    check_all(mod, sch)


def test_rfactor_vectorized_and_compiled_matches_numpy():
    """The row-reduction recipe (split, rfactor, vectorize the partials, decompose their init)
    compiled with kiln.build, against numpy: sum and max over rows of 64."""
    for op, ref in (("sum", np.sum), ("max", np.max)):
        mod = row_reduce(op, rows=5, n=64)
        sch = kiln.Schedule(mod)
        _, k = sch.get_loops(sch.get_block("B"))
        k0, k1 = sch.split(k, [None, 16])
        rf = sch.rfactor(k1, 1)
        sch.vectorize(k1)
        init = sch.decompose_reduction(rf, k0)
        sch.vectorize(sch.get_loops(init)[-1])
        check_all(mod, sch)
        a = np.random.default_rng(0).standard_normal((5, 64)).astype("float32")
        b = kiln.nd.array(np.zeros(5, "float32"))
        kiln.build(sch.mod)(kiln.nd.array(a), b)
        np.testing.assert_allclose(b.numpy(), ref(a, axis=1), rtol=1e-5, atol=1e-5)


def test_rfactor_with_spatial_loops_inside():
    # C[j] = sum_k A[k, j] with loops k, j: the final block runs under a copy of j, inside
    # the loop over the partials (which stands where k_1 stood, outside j).
    A = te.placeholder((32, 8), "float32", name="A")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((8,), lambda j: te.sum(A[k, j], axis=k), name="C")
    mod = IRModule({"main": te.create_prim_func([A, C])})
    sch = kiln.Schedule(mod)
    j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, j)
    k0, k1 = sch.split(k, [None, 4])
    sch.rfactor(k1, 0)
    check_all(mod, sch)
    loops = sch.get_loops(sch.get_block("C"))
    assert [lp.var.name for lp in loops] == ["k_1_rf", "j_rf"]


def test_rfactor_errors():
    sch = kiln.Schedule(row_reduce())
    i, k = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="loop 'i' does not drive a reduction iterator"):
        sch.rfactor(i, 0)
    with pytest.raises(ScheduleError, match="factor_axis 3 is out of range"):
        sch.rfactor(k, 3)
    # An imperfect split guards the partials: refused.
    sch = kiln.Schedule(row_reduce(n=60))
    _, k = sch.get_loops(sch.get_block("B"))
    _, k1 = sch.split(k, [None, 8])
    with pytest.raises(ScheduleError, match="predicate of block 'B' uses a reduction loop"):
        sch.rfactor(k1, 1)
    # Not a reduction.
    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    sch = kiln.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="block 'B' is not a reduction"):
        sch.rfactor(i, 0)
