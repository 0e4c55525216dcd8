"""partition_loops: a loop whose last iterations fail the guards split left under it becomes a
guard-free head loop and a guarded tail loop (printed IR), computing the same (compiled, vs
numpy, for sizes with and without a tail)."""
from __future__ import annotations  # lets script annotations name symbolic sizes (n)

import numpy as np
import pytest

import kiln
from kiln.lower import lower_prim_func
from kiln.lower.loop_partition import partition_loops
from kiln.script import T


@kiln.script.ir_module
class RowSums:
    @T.prim_func
    def main(A: T.Buffer((n, 8), "float32"), B: T.Buffer((n,), "float32")):
        n = T.int32()
        for i_0, k, i_1 in T.grid((n + 3) // 4, 8, 4):
            with T.block("B"):
                vi = T.axis.spatial(n, i_0 * 4 + i_1)
                vk = T.axis.reduce(8, k)
                T.where(i_0 * 4 + i_1 < n)
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]


@kiln.script.ir_module
class EvenOnly:
    @T.prim_func
    def main(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32")):
        for i in range(10):
            with T.block("B"):
                vi = T.axis.spatial(10, i)
                T.where(i % 2 == 0)
                B[vi] = A[vi] * 2.0


def test_symbolic_tile_loop_splits_into_head_and_guarded_tail():
    text = lower_prim_func(RowSums["main"]).script()
    head, tail = text.split("for i_0_t in")
    assert "for i_0 in range(T.min(n // 4, (n + 3) // 4)):" in head
    assert " if " not in head                     # the head runs without guards
    assert tail.count("if i_0_t * 4 + i_1 < n:") == 1 and tail.count("if i_0_t * 4 + i_1_init < n:") == 1


def test_a_tail_storing_past_its_guards_is_left_guarded():
    """RowSums's tail stores into B, not into a scratch buffer of its own: it keeps every guard
    (only the ``R >= 1`` around it is new); a constant extent gets no such wrapper at all."""
    tail = lower_prim_func(RowSums["main"]).script().split("for i_0_t in")[1]
    assert "if n - i_0_t * 4 >= 1:" in tail and "if i_0_t * 4 + i_1 < n:" in tail
    assert ">=" not in lower_prim_func(TileOfRowsAndColumns["main"]).script()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 11])
def test_partitioned_loops_compute_the_same(n):
    rt = kiln.build(RowSums, target="llvm")
    a = np.random.default_rng(n).standard_normal((n, 8)).astype("float32")
    b = kiln.nd.array(np.full(n, np.nan, "float32"))
    rt(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), a.sum(1), rtol=1e-5, atol=1e-5)


def test_a_guard_of_another_form_stays():
    """i % 2 == 0 does not hold on a prefix of the loop: nothing is partitioned."""
    from kiln.lower.blocks import opaque_blocks
    func = opaque_blocks(EvenOnly["main"])
    assert partition_loops(func).script() == func.script()


@kiln.script.ir_module
class TileOfRowsAndColumns:
    """A 4 x 8 tile of C = A * 2 over 10 x 21: guarded on the rows and on the columns, as a
    matmul tile is when neither dimension is a multiple of the tile (49 x 1000)."""
    @T.prim_func
    def main(A: T.Buffer((10, 21), "float32"), C: T.Buffer((10, 21), "float32")):
        for j_0, i_0, i_1, j_1 in T.grid(3, 3, 4, 8):
            with T.block("C"):
                vi = T.axis.spatial(10, i_0 * 4 + i_1)
                vj = T.axis.spatial(21, j_0 * 8 + j_1)
                T.where(j_0 * 8 + j_1 < 21 and i_0 * 4 + i_1 < 10)
                C[vi, vj] = A[vi, vj] * 2.0


def test_a_guard_on_two_loops_is_partitioned_on_each():
    """The column loop splits off its last block keeping the row conjunct, then the row loop
    of the head splits off its last tile: the bulk of the tiles run without any guard."""
    text = lower_prim_func(TileOfRowsAndColumns["main"]).script()
    head, tail = text.split("for j_0_t in")
    rows_head, rows_tail = head.split("for i_0_t in")
    assert "for j_0 in range(2):" in rows_head and "for i_0, i_1, j_1 in T.grid(2, 4, 8):" in rows_head
    assert " if " not in rows_head
    assert "if i_0_t * 4 + i_1 < 10:\n" in rows_tail         # the row conjunct alone
    assert tail.count(" if ") == 1 and "j_0_t * 8 + j_1 < 21" in tail


def test_two_loop_partition_computes_the_same():
    rt = kiln.build(TileOfRowsAndColumns, target="llvm")
    a = np.random.default_rng(0).standard_normal((10, 21)).astype("float32")
    c = kiln.nd.array(np.full((10, 21), np.nan, "float32"))
    rt(kiln.nd.array(a), c)
    np.testing.assert_array_equal(c.numpy(), a * 2)


@kiln.script.ir_module
class ParallelTiles:
    """The tile loop runs in parallel: 21 columns in tiles of 8."""
    @T.prim_func
    def main(A: T.Buffer((4, 21), "float32"), C: T.Buffer((4, 21), "float32")):
        for j_0 in T.parallel(3):
            for i, j_1 in T.grid(4, 8):
                with T.block("C"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(21, j_0 * 8 + j_1)
                    T.where(j_0 * 8 + j_1 < 21)
                    C[vi, vj] = A[vi, vj] * 2.0


def test_a_parallel_loop_stays_one_loop():
    """A parallel loop is not split into a head loop and a tail loop (two fork-joins, the tail's
    few tasks on one thread): its body picks the guard-free code for the iterations before the
    split."""
    text = lower_prim_func(ParallelTiles["main"]).script()
    assert text.count("T.parallel(") == 1 and "j_0_t" not in text
    assert "if j_0 < 2:" in text and "j_0 * 8 + j_1 < 21" in text
    rt = kiln.build(ParallelTiles, target="llvm")
    a = np.random.default_rng(1).standard_normal((4, 21)).astype("float32")
    c = kiln.nd.array(np.full((4, 21), np.nan, "float32"))
    rt(kiln.nd.array(a), c)
    np.testing.assert_array_equal(c.numpy(), a * 2)


@kiln.script.ir_module
class BatchOfRaggedTiles:
    """A batch of 3 rows of 21 columns in tiles of 8, batch and tiles fused into one parallel
    loop (a batched matmul's batch x column panels): the tile is ``f % 3``."""
    @T.prim_func
    def main(A: T.Buffer((3, 4, 21), "float32"), C: T.Buffer((3, 4, 21), "float32")):
        for f in T.parallel(9):
            for i, j_1 in T.grid(4, 8):
                with T.block("C"):
                    vb = T.axis.spatial(3, f // 3)
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(21, f % 3 * 8 + j_1)
                    T.where(f % 3 * 8 + j_1 < 21)
                    C[vb, vi, vj] = A[vb, vi, vj] * 2.0


def test_a_fused_loop_branches_on_its_tile():
    """The guard steps with ``f % 3``, not with ``f``: the body runs guard-free for the tiles
    below the last (``f % 3 < 2``) and guarded for the last tile of each batch."""
    text = lower_prim_func(BatchOfRaggedTiles["main"]).script()
    free, guarded = text.split("else:")
    assert text.count("T.parallel(9)") == 1 and "if f % 3 < 2:" in free
    assert " if " not in free.split("if f % 3 < 2:")[1]
    assert "f % 3 * 8 + j_1 < 21" in guarded
    rt = kiln.build(BatchOfRaggedTiles, target="llvm")
    a = np.random.default_rng(2).standard_normal((3, 4, 21)).astype("float32")
    c = kiln.nd.array(np.full((3, 4, 21), np.nan, "float32"))
    rt(kiln.nd.array(a), c)
    np.testing.assert_array_equal(c.numpy(), a * 2)


@kiln.script.ir_module
class PanelsOfRowBlocks:
    """16 x 21 in tiles of 4 rows x 8 columns, column panels outside row blocks, fused into one
    parallel loop (a matmul split by columns): the panel is ``f // 4``, the last one ragged."""
    @T.prim_func
    def main(A: T.Buffer((16, 21), "float32"), C: T.Buffer((16, 21), "float32")):
        for f in T.parallel(12):
            for i, j_1 in T.grid(4, 8):
                with T.block("C"):
                    vi = T.axis.spatial(16, f % 4 * 4 + i)
                    vj = T.axis.spatial(21, f // 4 * 8 + j_1)
                    T.where(f // 4 * 8 + j_1 < 21)
                    C[vi, vj] = A[vi, vj] * 2.0


def test_a_ragged_last_panel_outside_row_blocks_gets_code_of_its_own():
    """The guard steps with ``f // 4``: the first two panels (``f < 8``) run guard-free, and
    the last panel's code knows it is the last (columns 16 + j, five of them, no guard)."""
    text = lower_prim_func(PanelsOfRowBlocks["main"]).script()
    free, last = text.split("else:")
    assert text.count("T.parallel(12)") == 1 and "if f < 8:" in free
    assert " if " not in free.split("if f < 8:")[1] and " if " not in last
    assert "j_1 + 16" in last and "range(5)" in last and "f // 4" not in last
    rt = kiln.build(PanelsOfRowBlocks, target="llvm")
    a = np.random.default_rng(3).standard_normal((16, 21)).astype("float32")
    c = kiln.nd.array(np.full((16, 21), np.nan, "float32"))
    rt(kiln.nd.array(a), c)
    np.testing.assert_array_equal(c.numpy(), a * 2)
