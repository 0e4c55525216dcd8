"""Lowering passes: opaque blocks and buffer compaction keep what a program computes."""
import numpy as np

import kiln
from kiln import te
from kiln.ir import Block, BlockRealize, IfThenElse, collect
from kiln.lower import compact_buffers, lower_prim_func, opaque_blocks
from kiln.script import T


def _matmul(n=16):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return kiln.IRModule({"main": te.create_prim_func([A, B, C])})


def _run(func, n=16, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    kiln.evaluate(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _tiled_with_local_accumulator(n=16):
    sch = kiln.Schedule(_matmul(n))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, j0)
    sch.decompose_reduction(c, k)
    return sch.mod["main"]


def test_opaque_blocks_removes_iterators_and_hoists_the_init():
    func = _matmul()["main"]
    low = opaque_blocks(func)
    blocks = [b for b in collect(low.body, Block) if b.name_hint != "root"]
    assert all(not b.iter_vars for b in blocks)
    assert not collect(low.body, IfThenElse)  # the init runs before the k loop, unguarded
    text = low.script()
    assert text.index("C[i, j] = T.float32(0)") < text.index("for k in")
    _run(low)


def test_compaction_shrinks_accumulator_to_the_tile():
    func = _tiled_with_local_accumulator()
    low = lower_prim_func(func)
    assert not low.root_block.alloc_buffers  # moved into the loop that uses it
    (scope,) = [b for b in collect(low.body, Block) if b.alloc_buffers]
    (buf,) = scope.alloc_buffers
    assert [s.value for s in buf.shape] == [4, 8]
    assert "C_local[i_1, j_1]" in low.script()
    _run(low)


def test_compaction_keeps_values_that_flow_between_iterations():
    # The accumulator of a reduction whose init shares the k loop must not be allocated per k.
    n = 8
    A = te.placeholder((n, n), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="S")
    Out = te.compute((n,), lambda i: S[i] * 2.0, name="Out")
    sch = kiln.Schedule(kiln.IRModule({"main": te.create_prim_func([A, Out])}))
    sch.compute_at(sch.get_block("S"), sch.get_loops(sch.get_block("Out"))[0])
    low = lower_prim_func(sch.mod["main"])
    (scope,) = [b for b in collect(low.body, Block) if b.alloc_buffers]
    assert [s.value for s in scope.alloc_buffers[0].shape] == [1]
    a = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    out = np.zeros(n, np.float32)
    kiln.evaluate(low, a, out)
    np.testing.assert_allclose(out, a.sum(1) * 2, rtol=1e-5)


def test_buffer_used_at_root_level_stays():
    func = _matmul()["main"]
    assert compact_buffers(opaque_blocks(func)).script() == opaque_blocks(func).script()


@kiln.script.ir_module
class RowMaxInParallel:
    """A row's max into a scratch cell per row (16 floats apart), one block without iterators
    (its init) among the statements: the block stays after ``opaque_blocks``."""
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
        mx = T.alloc_buffer((4, 16), "float32")
        for h in T.parallel(4):
            with T.block("max_init"):
                mx[h, 0] = T.float32(-3.0e38)
            for j in range(8):
                with T.block("max"):
                    vj = T.axis.remap("R", [j])
                    mx[h, 0] = T.max(mx[h, 0], A[h, vj])
            with T.block("out"):
                B[h] = mx[h, 0]


def test_compaction_renames_the_buffer_in_blocks_that_stay():
    """The scratch is allocated per iteration of h; the block that stays reads and writes the
    new buffer (not the root one, which codegen would find unbound) and the program builds."""
    low = lower_prim_func(RowMaxInParallel["main"])
    (scope,) = [b for b in collect(low.body, Block) if b.alloc_buffers]
    (new,) = scope.alloc_buffers
    stays = [b for b in collect(low.body, Block) if b.name_hint == "max_init"]
    assert stays and all(r.buffer is new for b in stays for r in b.writes)
    rt = kiln.build(RowMaxInParallel, target="llvm")
    a = np.random.default_rng(2).standard_normal((4, 8)).astype("float32")
    b = kiln.nd.array(np.zeros(4, "float32"))
    rt(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a.max(1))


def test_compaction_through_a_fused_loop_of_distinct_tiles():
    """A tile indexed by a fused loop's ``f % 8`` and ``f // 8 * 4`` (as a conv's image rows
    and channel blocks fused into one parallel loop): neither steps past the 1 x 4 tile alone,
    but no two iterations share one, so the tile is allocated per iteration (a few registers)
    rather than as a whole-output buffer all iterations share."""
    n = 8
    sch = kiln.Schedule(_matmul(n))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.reorder(j0, i, k, j1)
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, i)
    sch.decompose_reduction(c, k)
    sch.parallel(sch.fuse(j0, i))
    low = lower_prim_func(sch.mod["main"])
    assert not low.root_block.alloc_buffers
    (scope,) = [b for b in collect(low.body, Block) if b.alloc_buffers]
    assert [s.value for s in scope.alloc_buffers[0].shape] == [1, 4]
    _run(low, n)


def _stencil(n=16, tile=4):
    """B = A * 2 computed per tile of Out = B[i] + B[i + 1] + B[i + 2]: each tile's window of B
    (tile + 2 values) overlaps the next tile's."""
    A = te.placeholder((n + 2,), "float32", name="A")
    B = te.compute((n + 2,), lambda i: A[i] * 2.0, name="B")
    Out = te.compute((n,), lambda i: B[i] + B[i + 1] + B[i + 2], name="Out")
    sch = kiln.Schedule(kiln.IRModule({"main": te.create_prim_func([A, Out])}))
    i0, _ = sch.split(sch.get_loops(sch.get_block("Out"))[0], factors=[None, tile])
    sch.compute_at(sch.get_block("B"), i0)
    return sch.mod["main"]


def test_compaction_of_overlapping_windows_written_before_they_are_read():
    """Each iteration writes its whole window of B before reading it, so a fresh window per
    iteration is correct although neighbouring windows overlap (a fused Winograd conv's
    padded input rows)."""
    low = lower_prim_func(_stencil())
    assert not low.root_block.alloc_buffers
    (scope,) = [b for b in collect(low.body, Block) if b.alloc_buffers]
    assert [s.value for s in scope.alloc_buffers[0].shape] == [6]
    a = np.random.default_rng(3).standard_normal(18).astype("float32")
    out = np.zeros(16, np.float32)
    kiln.evaluate(low, a, out)
    np.testing.assert_allclose(out, 2 * (a[:-2] + a[1:-1] + a[2:]), rtol=1e-5)


def test_compaction_keeps_overlapping_windows_a_guard_may_leave_unwritten():
    # 15 outputs in tiles of 4: the window's stores are guarded, so the rule does not apply
    low = lower_prim_func(_stencil(15))
    assert low.root_block.alloc_buffers
    a = np.random.default_rng(4).standard_normal(17).astype("float32")
    out = np.zeros(15, np.float32)
    kiln.evaluate(low, a, out)
    np.testing.assert_allclose(out, 2 * (a[:-2] + a[1:-1] + a[2:]), rtol=1e-5)
