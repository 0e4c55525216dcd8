"""Loop primitives: split, fuse, reorder, parallel, vectorize, unroll, bind.

Each primitive is checked for the IR it makes (an Expected program in script syntax: equal
structure, and the same printed text, so loop names count too), for what the program computes
(reference evaluator on seeded random inputs, before vs. after), for a well-formed result that
prints and parses back to itself, for trace replay, and for the ScheduleError of each misuse.
"""
from __future__ import annotations  # lets script annotations name symbolic sizes (n)

import numpy as np
import pytest

import kiln
from kiln import ScheduleError
from kiln.ir import assert_structural_equal, structural_equal
from kiln.ir.evaluator import evaluate
from kiln.ir.verify import verify
from kiln.script import T, assert_roundtrip

# pytest puts this directory on sys.path (rootdir-less test dirs, "prepend" import mode).
from schedule_helpers import check_same, elementwise_2d_module, matmul_module, random_args


# ---- helpers -----------------------------------------------------------------------------
def replay(sch, original):
    """Replay ``sch.trace`` on a fresh schedule of ``original``; return the new schedule."""
    fresh = kiln.Schedule(original)
    sch.trace.apply_to(fresh)
    return fresh


def check_all(before, sch, expected=None, sizes=None):
    """What every successful schedule must satisfy: the expected program (structure and
    text), well formed, computes the same, round-trips through text, and replays."""
    if expected is not None:
        assert_structural_equal(sch.mod, expected)
        assert sch.mod.script() == expected.script()  # names (i_0, i_j_fused) count too
    verify(sch.mod)
    check_same(before, sch.mod, sizes=sizes)
    assert_roundtrip(sch.mod)
    assert_structural_equal(replay(sch, before).mod, sch.mod)


def loop_names(sch, block):
    return [rv.var.name for rv in sch.get_loops(sch.get_block(block))]


# ---- programs ----------------------------------------------------------------------------
@kiln.script.ir_module
class MyModule:  # API.md section 2, as written there
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] + 1.0


@kiln.script.ir_module
class Elementwise:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i, j in T.grid(4, 8):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * 2.0


@kiln.script.ir_module
class TwoNests:
    """B = A * 2 under loop i, then C = B + 1 under loop j."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] * 2.0
        for j in range(8):
            with T.block("C"):
                vj = T.axis.spatial(8, j)
                C[vj] = B[vj] + 1.0


@kiln.script.ir_module
class SharedOuter:
    """One loop i around two loops: j (block B) and k (block C)."""
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32"),
             C: T.Buffer((4, 8), "float32")):
        for i in range(4):
            for j in range(8):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0
            for k in range(8):
                with T.block("C"):
                    vi, vk = T.axis.remap("SS", [i, k])
                    C[vi, vk] = B[vi, vk] + 1.0


@kiln.script.ir_module
class Offset:
    """An inner loop that starts at 2."""
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 6), "float32")):
        for i in range(4):
            for j in range(2, 8):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial((2, 8), j)
                    B[vi, vj - 2] = A[vi, vj] * 2.0


@kiln.script.ir_module
class Symbolic:
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        n = T.int32()
        for i in range(n):
            with T.block("B"):
                vi = T.axis.spatial(n, i)
                B[vi] = A[vi] + 1.0


@kiln.script.ir_module
class Triangular:
    @T.prim_func
    def main(A: T.Buffer((6, 6), "float32")):
        for i in range(6):
            for j in range(i + 1):
                with T.block("A"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    A[vi, vj] = 1.0


# ---- the flow of API.md section 2 --------------------------------------------------------
@kiln.script.ir_module
class SeedExpected:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i_0 in T.thread_binding(2, thread="blockIdx.x"):
            for i_2 in T.thread_binding(2, thread="threadIdx.x"):
                for i_1 in range(2):
                    with T.block("B"):
                        vi = T.axis.spatial(8, i_0 * 4 + i_1 * 2 + i_2)
                        B[vi] = A[vi] + 1.0


def test_seed_flow_split_reorder_bind():
    sch = kiln.Schedule(MyModule)
    block = sch.get_block("B")
    (i,) = sch.get_loops(block)
    i0, i1, i2 = sch.split(i, factors=[2, 2, 2])
    sch.reorder(i0, i2, i1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(i2, "threadIdx.x")
    check_all(MyModule, sch, SeedExpected)
    assert "vi = T.axis.spatial(8, i_0 * 4 + i_1 * 2 + i_2)" in sch.mod.script()
    assert kiln.ir.structural_equal(kiln.script.parse(sch.mod.script()), sch.mod)
    assert str(sch.trace).splitlines() == [
        "b0 = sch.get_block('B')",
        "(l1,) = sch.get_loops(b0)",
        "l2, l3, l4 = sch.split(l1, factors=[2, 2, 2])",
        "sch.reorder(l2, l4, l3)",
        "sch.bind(l2, 'blockIdx.x')",
        "sch.bind(l4, 'threadIdx.x')",
    ]


# ---- split -------------------------------------------------------------------------------
def split_vector_add(factors):
    sch = kiln.Schedule(MyModule)
    (i,) = sch.get_loops(sch.get_block("B"))
    return sch, sch.split(i, factors=factors)


@kiln.script.ir_module
class SplitExact:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i_0, i_1, i_2 in T.grid(2, 2, 2):
            with T.block("B"):
                vi = T.axis.spatial(8, i_0 * 4 + i_1 * 2 + i_2)
                B[vi] = A[vi] + 1.0


@kiln.script.ir_module
class SplitInferred:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i_0, i_1 in T.grid(2, 4):
            with T.block("B"):
                vi = T.axis.spatial(8, i_0 * 4 + i_1)
                B[vi] = A[vi] + 1.0


@kiln.script.ir_module
class SplitImperfect:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i_0, i_1 in T.grid(3, 3):
            with T.block("B"):
                vi = T.axis.spatial(8, i_0 * 3 + i_1)
                T.where(i_0 * 3 + i_1 < 8)
                B[vi] = A[vi] + 1.0


@kiln.script.ir_module
class SplitOverCover:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i_0, i_1 in T.grid(5, 2):
            with T.block("B"):
                vi = T.axis.spatial(8, i_0 * 2 + i_1)
                T.where(i_0 * 2 + i_1 < 8)
                B[vi] = A[vi] + 1.0


@kiln.script.ir_module
class SplitFactorOne:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i_0, i_1 in T.grid(1, 8):
            with T.block("B"):
                vi = T.axis.spatial(8, i_1)
                B[vi] = A[vi] + 1.0


@pytest.mark.parametrize("factors, expected", [
    ([2, 2, 2], SplitExact),
    ([None, 4], SplitInferred),
    ([np.int64(2), None], SplitInferred),  # what a tuner samples
    ([None, 3], SplitImperfect),           # 3 * 3 = 9 iterations for 8 elements: guarded
    ([5, 2], SplitOverCover),              # all factors given may cover more than the extent
    ([1, None], SplitFactorOne),           # the extent-1 loop stays, its variable is always 0
])
def test_split(factors, expected):
    sch, loops = split_vector_add(factors)
    assert [rv.var.name for rv in loops] == [f"i_{k}" for k in range(len(factors))]
    check_all(MyModule, sch, expected)


@kiln.script.ir_module
class SplitReduction:
    @T.prim_func
    def main(A: T.Buffer((8, 12), "float32"), B: T.Buffer((12, 8), "float32"),
             C: T.Buffer((8, 8), "float32")):
        for i, j, k_0, k_1_0, k_1_1 in T.grid(8, 8, 3, 2, 2):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                vj = T.axis.spatial(8, j)
                vk = T.axis.reduce(12, k_0 * 4 + k_1_0 * 2 + k_1_1)
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_split_a_reduction_loop_twice():
    mod = matmul_module(8, 8, 12)
    sch = kiln.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.split(k1, factors=[2, 2])
    check_all(mod, sch, SplitReduction)


@kiln.script.ir_module
class SplitOffset:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 6), "float32")):
        for i, j_0, j_1 in T.grid(4, 2, 4):
            with T.block("B"):
                vi = T.axis.spatial(4, i)
                vj = T.axis.spatial((2, 8), j_0 * 4 + j_1 + 2)
                T.where(j_0 * 4 + j_1 < 6)
                B[vi, vj - 2] = A[vi, vj] * 2.0


def test_split_of_a_loop_not_starting_at_zero():
    sch = kiln.Schedule(Offset)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(j, factors=[None, 4])
    check_all(Offset, sch, SplitOffset)


def test_split_keeps_the_other_loops_and_their_handles():
    sch = kiln.Schedule(Elementwise)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(j, factors=[2, 4])
    sch.parallel(i)  # the handle of the untouched loop still works
    assert loop_names(sch, "B") == ["i", "j_0", "j_1"]
    check_all(Elementwise, sch)


@pytest.mark.parametrize("factors, message", [
    ([0, 8], "split of loop 'i': factor 0 is not positive"),
    ([-2, None], "factor -2 is not positive"),
    ([None, None], "at most one factor may be None"),
    ([None, None, 2], "at most one factor may be None"),
    ([2, 3], r"factors \[2, 3\] cover 6 iterations but the loop has 8"),
    ([2.0, 4], "factors must be positive integers or None, got 2.0"),
    ([8], "needs at least two factors"),
    (4, "factors must be a list"),
])
def test_split_errors(factors, message):
    sch = kiln.Schedule(MyModule)
    (i,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=message) as err:
        sch.split(i, factors=factors)
    assert "for i in range(8):" in str(err.value)  # the message shows the loop
    assert len(sch.trace) == 2                      # a failed primitive is not recorded
    assert_structural_equal(sch.mod, MyModule)      # and changed nothing


@kiln.script.ir_module
class SymbolicSplit:
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        n = T.int32()
        for i_0, i_1 in T.grid((n + 3) // 4, 4):
            with T.block("B"):
                vi = T.axis.spatial(n, i_0 * 4 + i_1)
                T.where(i_0 * 4 + i_1 < n)
                B[vi] = A[vi] + 1.0


@pytest.mark.parametrize("size", [1, 3, 4, 9])
def test_split_of_a_symbolic_extent_is_guarded(size):
    sch = kiln.Schedule(Symbolic)
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[None, 4])
    check_all(Symbolic, sch, SymbolicSplit, sizes={"n": size})


def test_split_of_a_symbolic_extent_needs_an_inferred_factor():
    sch = kiln.Schedule(Symbolic)
    (i,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match=r"split of loop 'i' of symbolic extent n: one factor must be "
                                            r"None \(inferred\), got \[2, 4\]"):
        sch.split(i, factors=[2, 4])


def test_a_split_loop_handle_is_gone():
    sch = kiln.Schedule(MyModule)
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.split(i, factors=[2, 4])
    with pytest.raises(ScheduleError, match="loop 'i' does not exist"):
        sch.parallel(i)


# ---- fuse --------------------------------------------------------------------------------
@kiln.script.ir_module
class Fused2:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i_j_fused in range(32):
            with T.block("B"):
                vi = T.axis.spatial(4, i_j_fused // 8)
                vj = T.axis.spatial(8, i_j_fused % 8)
                B[vi, vj] = A[vi, vj] * 2.0


def test_fuse_two_loops():
    sch = kiln.Schedule(Elementwise)
    i, j = sch.get_loops(sch.get_block("B"))
    f = sch.fuse(i, j)
    assert f.var.name == "i_j_fused"
    check_all(Elementwise, sch, Fused2)


@kiln.script.ir_module
class Fused3:
    @T.prim_func
    def main(A: T.Buffer((4, 5), "float32"), B: T.Buffer((5, 6), "float32"),
             C: T.Buffer((4, 6), "float32")):
        for i_j_k_fused in range(120):
            with T.block("C"):
                vi = T.axis.spatial(4, i_j_k_fused // 30)
                vj = T.axis.spatial(6, i_j_k_fused // 5 % 6)
                vk = T.axis.reduce(5, i_j_k_fused % 5)
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_fuse_three_loops_including_a_reduction():
    mod = matmul_module(4, 6, 5)
    sch = kiln.Schedule(mod)
    sch.fuse(*sch.get_loops(sch.get_block("C")))
    check_all(mod, sch, Fused3)


@kiln.script.ir_module
class FusedInner:
    @T.prim_func
    def main(A: T.Buffer((4, 5), "float32"), B: T.Buffer((5, 6), "float32"),
             C: T.Buffer((4, 6), "float32")):
        for i, j_k_fused in T.grid(4, 30):
            with T.block("C"):
                vi = T.axis.spatial(4, i)
                vj = T.axis.spatial(6, j_k_fused // 5)
                vk = T.axis.reduce(5, j_k_fused % 5)
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_fuse_an_inner_pair_keeps_the_outer_loop():
    mod = matmul_module(4, 6, 5)
    sch = kiln.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.fuse(j, k)
    check_all(mod, sch, FusedInner)


@kiln.script.ir_module
class SplitThenFused:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i_0_i_1_fused in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i_0_i_1_fused)
                B[vi] = A[vi] + 1.0


def test_fuse_undoes_a_split():
    sch, (i0, i1) = split_vector_add([2, 4])
    sch.fuse(i0, i1)  # (f // 4) * 4 + f % 4 simplifies back to f
    check_all(MyModule, sch, SplitThenFused)


def test_fuse_one_loop_is_a_no_op():
    sch = kiln.Schedule(MyModule)
    (i,) = sch.get_loops(sch.get_block("B"))
    assert sch.fuse(i) is i
    assert_structural_equal(sch.mod, MyModule)


def test_fuse_errors():
    sch = kiln.Schedule(matmul_module())
    i, j, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="loop 'k' must be the only statement in the body of 'i'"):
        sch.fuse(i, k)  # j is between them
    with pytest.raises(ScheduleError, match="loop 'i' must be the only statement in the body of 'j'"):
        sch.fuse(j, i)  # outermost first
    with pytest.raises(ScheduleError, match="fuse got loop 'i' more than once"):
        sch.fuse(i, i)
    with pytest.raises(ScheduleError, match="fuse needs at least one loop"):
        sch.fuse()

    sch = kiln.Schedule(SharedOuter)
    i, j = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="loop 'j' must be the only statement in the body of 'i'"):
        sch.fuse(i, j)  # i also holds the loop of block C

    sch = kiln.Schedule(Offset)
    i, j = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="cannot fuse loop 'j': it starts at 2, fuse needs loops "
                                            "that start at 0"):
        sch.fuse(i, j)


# ---- reorder -----------------------------------------------------------------------------
@kiln.script.ir_module
class Interchanged:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for j, i in T.grid(8, 4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * 2.0


def test_reorder_interchange():
    sch = kiln.Schedule(Elementwise)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.reorder(j, i)
    check_all(Elementwise, sch, Interchanged)


@kiln.script.ir_module
class ReorderedKJI:
    @T.prim_func
    def main(A: T.Buffer((4, 5), "float32"), B: T.Buffer((5, 6), "float32"),
             C: T.Buffer((4, 6), "float32")):
        for k, j, i in T.grid(5, 6, 4):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_reorder_keeps_loops_not_given_in_place():
    mod = matmul_module(4, 6, 5)
    sch = kiln.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, i)  # j is not named: it stays in the middle
    check_all(mod, sch, ReorderedKJI)


@kiln.script.ir_module
class InterchangedKinds:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for j in T.vectorized(8):
            for i in T.parallel(4):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0


def test_reorder_keeps_loop_kinds():
    sch = kiln.Schedule(Elementwise)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.parallel(i)
    sch.vectorize(j)
    sch.reorder(j, i)
    check_all(Elementwise, sch, InterchangedKinds)


def test_reorder_in_the_current_order_changes_nothing():
    mod = matmul_module()
    sch = kiln.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k)
    sch.reorder(j)
    assert_structural_equal(sch.mod, mod)


def test_reorder_errors():
    sch = kiln.Schedule(TwoNests)
    (i,) = sch.get_loops(sch.get_block("B"))
    (j,) = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="reorder of loops not in one nest: loop 'i' is not "
                                            "inside loop 'j'"):
        sch.reorder(j, i)

    sch = kiln.Schedule(SharedOuter)
    i, j = sch.get_loops(sch.get_block("B"))
    _, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="reorder of loops not in one nest"):
        sch.reorder(j, k)  # siblings under i
    with pytest.raises(ScheduleError, match="reorder of loops not in one nest: the body of loop 'i' "
                                            "is a SeqStmt, not a single loop"):
        sch.reorder(j, i)

    sch = kiln.Schedule(matmul_module())
    i, j, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="reorder got loop 'j' more than once"):
        sch.reorder(j, k, j)


def test_reorder_refuses_a_triangular_nest():
    sch = kiln.Schedule(Triangular)
    i, j = sch.get_loops(sch.get_block("A"))
    with pytest.raises(ScheduleError, match="the bounds of loop 'j' depend on loop 'i', which would "
                                            "move inside it"):
        sch.reorder(j, i)


# ---- loop kinds ----------------------------------------------------------------------------
@kiln.script.ir_module
class InnerParallel:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i in range(4):
            for j in T.parallel(8):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0


@kiln.script.ir_module
class InnerVectorized:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i in range(4):
            for j in T.vectorized(8):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0


@kiln.script.ir_module
class InnerUnrolled:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i in range(4):
            for j in T.unroll(8):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0


@kiln.script.ir_module
class Bound:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i in T.thread_binding(4, thread="blockIdx.x"):
            for j in T.thread_binding(8, thread="threadIdx.x"):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0


@pytest.mark.parametrize("primitive, expected", [
    ("parallel", InnerParallel), ("vectorize", InnerVectorized), ("unroll", InnerUnrolled)])
def test_set_loop_kind(primitive, expected):
    sch = kiln.Schedule(Elementwise)
    i, j = sch.get_loops(sch.get_block("B"))
    getattr(sch, primitive)(j)
    check_all(Elementwise, sch, expected)


def test_bind():
    sch = kiln.Schedule(Elementwise)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    check_all(Elementwise, sch, Bound)


def test_loops_outside_a_reduction_may_run_in_parallel():
    mod = matmul_module(8, 8, 8)
    sch = kiln.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    sch.vectorize(j)  # j is spatial: allowed although the reduction over k runs inside it
    sch.unroll(k)     # unrolling a reduction loop keeps its order: allowed
    check_all(mod, sch)


@pytest.mark.parametrize("primitive, verb", [("parallel", "parallelize"), ("vectorize", "vectorize"),
                                             ("bind", "bind")])
def test_a_reduction_loop_cannot_run_in_parallel(primitive, verb):
    sch = kiln.Schedule(matmul_module())
    i, j, k = sch.get_loops(sch.get_block("C"))
    args = (k, "threadIdx.x") if primitive == "bind" else (k,)
    with pytest.raises(ScheduleError, match=f"cannot {verb} loop 'k': it carries reduction "
                                            "iterator vk of block 'C'") as err:
        getattr(sch, primitive)(*args)
    assert err.value.ir is not None and "for k in range(16):" in str(err.value)


def test_the_reduction_check_sees_through_split_and_fuse():
    sch = kiln.Schedule(matmul_module())
    i, j, k = sch.get_loops(sch.get_block("C"))
    k0, k1 = sch.split(k, factors=[None, 4])
    with pytest.raises(ScheduleError, match="cannot parallelize loop 'k_0'"):
        sch.parallel(k0)
    with pytest.raises(ScheduleError, match="cannot vectorize loop 'k_1'"):
        sch.vectorize(k1)
    f = sch.fuse(j, k0)
    with pytest.raises(ScheduleError, match="cannot parallelize loop 'j_k_0_fused'"):
        sch.parallel(f)


def test_vectorize_needs_a_constant_extent():
    sch = kiln.Schedule(Symbolic)
    (i,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="cannot vectorize loop 'i': its extent n is not a constant"):
        sch.vectorize(i)
    sch.parallel(i)  # a symbolic extent is fine for parallel
    check_all(Symbolic, sch, sizes={"n": 5})


def test_bind_errors():
    sch = kiln.Schedule(matmul_module())
    i, j, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="cannot bind loop 'i' to unknown thread axis "
                                            "'threadIdx.w'; expected one of blockIdx.x"):
        sch.bind(i, "threadIdx.w")
    sch.bind(i, "threadIdx.x")
    with pytest.raises(ScheduleError, match="loop 'i' in the same nest is already bound to it"):
        sch.bind(j, "threadIdx.x")


# ---- putting them together -----------------------------------------------------------------
@kiln.script.ir_module
class Tiled:
    @T.prim_func
    def main(A: T.Buffer((16, 8), "float32"), B: T.Buffer((8, 12), "float32"),
             C: T.Buffer((16, 12), "float32")):
        for i_0, j_0, k, i_1, j_1 in T.grid(4, 3, 8, 4, 5):
            with T.block("C"):
                vi = T.axis.spatial(16, i_0 * 4 + i_1)
                vj = T.axis.spatial(12, j_0 * 5 + j_1)
                vk = T.axis.reduce(8, k)
                T.where(j_0 * 5 + j_1 < 12)
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_tiled_matmul_matches_numpy():
    mod = matmul_module(16, 12, 8)
    sch = kiln.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 5])  # imperfect: 3 * 5 = 15 > 12
    sch.reorder(i0, j0, k, i1, j1)
    check_all(mod, sch, Tiled)
    a, b, c = random_args(sch.mod["main"], seed=3)
    evaluate(sch.mod, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)

    sch.parallel(sch.fuse(i0, j0))
    sch.unroll(i1)
    sch.vectorize(j1)
    assert loop_names(sch, "C") == ["i_0_j_0_fused", "k", "i_1", "j_1"]
    check_all(mod, sch)
    evaluate(sch.mod, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_trace_replays_on_te_module_and_copy_starts_fresh():
    mod = elementwise_2d_module(6, 8)
    sch = kiln.Schedule(mod)
    i, j = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, factors=[2, None])
    f = sch.fuse(i1, j)
    sch.reorder(f, i0)
    sch.parallel(f)
    again = replay(sch, mod)
    assert structural_equal(again.mod, sch.mod)
    assert str(again.trace) == str(sch.trace)
    assert str(sch.trace).splitlines()[2:] == [
        "l3, l4 = sch.split(l1, factors=[2, None])",
        "l5 = sch.fuse(l4, l2)",
        "sch.reorder(l5, l3)",
        "sch.parallel(l5)",
    ]
    assert len(sch.copy().trace) == 0
    check_all(mod, sch)


@kiln.script.ir_module
class SymbolicParallelAtLeast64:
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        n = T.int32()
        for i in T.parallel(n, annotations={"kiln.parallel_min_extent": 64}):
            with T.block("B"):
                vi = T.axis.spatial(n, i)
                B[vi] = A[vi] + 1.0


def test_parallel_with_a_least_extent():
    """``parallel(loop, min_extent=64)``: the loop is annotated (codegen runs fewer iterations
    on the calling thread); it prints, parses back and replays."""
    sch = kiln.Schedule(Symbolic)
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.parallel(i, min_extent=64)
    check_all(Symbolic, sch, SymbolicParallelAtLeast64, sizes={"n": 5})


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "64"])
def test_parallel_least_extent_must_be_a_positive_int(bad):
    sch = kiln.Schedule(Symbolic)
    (i,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="min_extent must be a positive int"):
        sch.parallel(i, min_extent=bad)
