"""Block primitives: cache_read, cache_write, compute_at, reverse_compute_at, compute_inline,
reverse_compute_inline, decompose_reduction.

Each primitive is checked for the IR it makes (structural equality with an expected program
in script syntax), for what the program computes (reference evaluator on seeded random
inputs, before vs. after), for a well-formed result that prints and parses back to itself,
for trace replay, and for the ScheduleError of each misuse. The end-to-end flows at the
bottom (tiled matmul with a local accumulator, conv2d with inlined padding, a packed tile of
A) are the acceptance tests.
"""
import numpy as np
import pytest

import kiln
from kiln import ScheduleError, te
from kiln.ir import assert_structural_equal
from kiln.ir.evaluator import evaluate
from kiln.ir.verify import verify
from kiln.script import T, assert_roundtrip

# pytest puts this directory on sys.path (rootdir-less test dirs, "prepend" import mode).
from schedule_helpers import check_same, matmul_module, random_args


# ---- helpers -----------------------------------------------------------------------------
def check_all(before, sch):
    """What every successful schedule must satisfy: a well-formed program that computes the
    same, prints and parses back to itself, and is rebuilt by replaying the trace."""
    verify(sch.mod)
    check_same(before, sch.mod)
    assert_roundtrip(sch.mod)
    fresh = kiln.Schedule(before)
    sch.trace.apply_to(fresh)
    assert_structural_equal(fresh.mod, sch.mod)


def extents(sch, loops):
    """The constant extents of ``loops`` (handles)."""
    return [sch._loop(lp)[0].extent.value for lp in loops]


def te_matmul(n=16, m=16, k=16):
    A = te.placeholder((n, k), "float32", name="A")
    B = te.placeholder((k, m), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return te.create_prim_func([A, B, C])


def te_two_stage(n=8):
    """B = A * 2 (intermediate), C = B + 1."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    return te.create_prim_func([A, C])


def te_conv2d(n=1, c=2, hw=8, f=4, kh=3):
    """NCHW conv2d, stride 1, padding 1, with the padding as its own compute ``pad``."""
    A = te.placeholder((n, c, hw, hw), "float32", name="A")
    W = te.placeholder((f, c, kh, kh), "float32", name="W")
    pad = te.compute((n, c, hw + 2, hw + 2), lambda b, ci, h, w: te.if_then_else(
        (h >= 1) & (h < hw + 1) & (w >= 1) & (w < hw + 1), A[b, ci, h - 1, w - 1], 0.0),
        name="pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kh), name="rx")
    conv = te.compute((n, f, hw, hw), lambda b, fo, h, w: te.sum(
        pad[b, rc, h + ry, w + rx] * W[fo, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    return te.create_prim_func([A, W, conv])


def conv2d_numpy(a, w):
    n, c, hw, _ = a.shape
    f, _, kh, _ = w.shape
    p = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, f, hw, hw), "float32")
    for y in range(kh):
        for x in range(kh):
            out += np.einsum("nchw,fc->nfhw", p[:, :, y:y + hw, x:x + hw], w[:, :, y, x])
    return out


def tile_matmul(sch, block="C", t=4):
    """Split i and j by ``t`` and order the loops i0 j0 k i1 j1."""
    c = sch.get_block(block)
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, t])
    j0, j1 = sch.split(j, [None, t])
    sch.reorder(i0, j0, k, i1, j1)
    return c, (i0, j0, k, i1, j1)


# ---- programs used by several tests ------------------------------------------------------
@kiln.script.ir_module
class Elementwise:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        for i in range(4):
            for j in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(8, j)
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * 2.0


@kiln.script.ir_module
class Matmul4:
    @T.prim_func
    def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
             C: T.Buffer((4, 4), "float32")):
        for i in range(4):
            for j in range(4):
                for k in range(4):
                    with T.block("C"):
                        vi = T.axis.spatial(4, i)
                        vj = T.axis.spatial(4, j)
                        vk = T.axis.reduce(4, k)
                        T.reads(A[vi, vk], B[vk, vj])
                        T.writes(C[vi, vj])
                        with T.init():
                            C[vi, vj] = 0.0
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@kiln.script.ir_module
class TwoStage:
    """B = A * 2 then C = B + 1, each over its own loop."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi])
                T.writes(C[vi])
                C[vi] = B[vi] + 1.0


# ---- cache_read ----------------------------------------------------------------------------
@kiln.script.ir_module
class ElementwiseCacheRead:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
        A_local = T.alloc_buffer((4, 8), "float32", scope="local")
        for ax0 in range(4):
            for ax1 in range(8):
                with T.block("A_local"):
                    v0 = T.axis.spatial(4, ax0)
                    v1 = T.axis.spatial(8, ax1)
                    T.reads(A[v0, v1])
                    T.writes(A_local[v0, v1])
                    A_local[v0, v1] = A[v0, v1]
        for i in range(4):
            for j in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(8, j)
                    T.reads(A_local[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A_local[vi, vj] * 2.0


def test_cache_read():
    sch = kiln.Schedule(Elementwise)
    cached = sch.cache_read(sch.get_block("B"), 0, "local")
    assert cached.name == "A_local"
    assert_structural_equal(sch.mod, ElementwiseCacheRead)
    check_all(Elementwise, sch)
    assert str(sch.trace).splitlines()[-1] == "b1 = sch.cache_read(b0, 0, 'local')"


@kiln.script.ir_module
class PaddedRead:
    """C reads A through a window that pokes past both ends (guarded), as inlined padding does."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        for i in range(8):
            for r in range(3):
                with T.block("C"):
                    vi = T.axis.spatial(8, i)
                    vr = T.axis.reduce(3, r)
                    T.reads(A[vi + vr - 1])
                    T.writes(C[vi])
                    with T.init():
                        C[vi] = 0.0
                    C[vi] = C[vi] + T.Select(vi + vr >= 1 and vi + vr < 9, A[vi + vr - 1], 0.0)


def test_cache_read_region_stays_inside_the_buffer():
    # The window reaches A[-1] and A[8]; the copy must not (it would write out of bounds).
    sch = kiln.Schedule(PaddedRead)
    sch.cache_read(sch.get_block("C"), 0, "local")
    assert extents(sch, sch.get_loops(sch.get_block("A_local"))) == [8]
    check_all(PaddedRead, sch)


def test_cache_read_two_readers_share_the_copy():
    # Both C and D read A: both are redirected to one copy made before the first of them.
    A = te.placeholder((8,), "float32", name="A")
    C = te.compute((8,), lambda i: A[i] + 1.0, name="C")
    D = te.compute((8,), lambda i: A[i] * C[i], name="D")
    func = te.create_prim_func([A, D])
    sch = kiln.Schedule(func)
    sch.cache_read(sch.get_block("D"), 0, "global")
    assert [b.name for b in sch.get_child_blocks(sch.get_block("root"))] == ["A_global", "C", "D"]
    text = sch.mod.script()
    assert "A_global[vi] + " in text and "A_global[vi] * " in text
    check_all(func, sch)


def test_cache_read_errors():
    sch = kiln.Schedule(Elementwise)
    with pytest.raises(ScheduleError, match="cache_read: block 'B' has no read buffer 1; its "
                                            "reads are 0: 'A'"):
        sch.cache_read(sch.get_block("B"), 1, "local")
    with pytest.raises(ScheduleError, match="storage scope must be a name"):
        sch.cache_read(sch.get_block("B"), 0, 3)
    assert len(sch.trace) == 2  # only the two get_block calls: failures are not recorded


@kiln.script.ir_module
class ReadThenOverwrite:
    """B reads A, then block "A2" overwrites A: a copy of A would be stale for later readers."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + 1.0
        for i in range(8):
            with T.block("A2"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi])
                T.writes(A[vi])
                A[vi] = B[vi] * 2.0


def test_cache_read_of_a_buffer_written_later_fails():
    sch = kiln.Schedule(ReadThenOverwrite)
    with pytest.raises(ScheduleError, match="buffer 'A' is written by block 'A2' at or after its "
                                            "first reader 'B'"):
        sch.cache_read(sch.get_block("B"), 0, "local")


# ---- cache_write ---------------------------------------------------------------------------
@kiln.script.ir_module
class Matmul4CacheWrite:
    @T.prim_func
    def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
             C: T.Buffer((4, 4), "float32")):
        C_local = T.alloc_buffer((4, 4), "float32", scope="local")
        for i in range(4):
            for j in range(4):
                for k in range(4):
                    with T.block("C"):
                        vi = T.axis.spatial(4, i)
                        vj = T.axis.spatial(4, j)
                        vk = T.axis.reduce(4, k)
                        T.reads(A[vi, vk], B[vk, vj])
                        T.writes(C_local[vi, vj])
                        with T.init():
                            C_local[vi, vj] = 0.0
                        C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]
        for ax0 in range(4):
            for ax1 in range(4):
                with T.block("C_local"):
                    v0 = T.axis.spatial(4, ax0)
                    v1 = T.axis.spatial(4, ax1)
                    T.reads(C_local[v0, v1])
                    T.writes(C[v0, v1])
                    C[v0, v1] = C_local[v0, v1]


def test_cache_write():
    sch = kiln.Schedule(Matmul4)
    wb = sch.cache_write(sch.get_block("C"), 0, "local")
    assert wb.name == "C_local"
    assert_structural_equal(sch.mod, Matmul4CacheWrite)
    check_all(Matmul4, sch)


def test_cache_write_of_an_intermediate():
    func = te_two_stage()
    sch = kiln.Schedule(func)
    wb = sch.cache_write(sch.get_block("B"), 0, "local")
    names = [b.name for b in sch.get_child_blocks(sch.get_block("root"))]
    assert names == ["B", wb.name, "C"]
    check_all(func, sch)


@kiln.script.ir_module
class InPlaceUpdate:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi], B[vi])
                T.writes(B[vi])
                B[vi] = B[vi] + A[vi]


@kiln.script.ir_module
class SharedNest:
    """B and C in one loop: C reads B right after it is written."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi])
                T.writes(C[vi])
                C[vi] = B[vi] + 1.0


def test_cache_write_errors():
    sch = kiln.Schedule(Matmul4)
    with pytest.raises(ScheduleError, match="cache_write: block 'C' has no write buffer 2"):
        sch.cache_write(sch.get_block("C"), 2, "local")
    sch = kiln.Schedule(InPlaceUpdate)
    with pytest.raises(ScheduleError, match="reads buffer 'B' that it writes and has no init"):
        sch.cache_write(sch.get_block("B"), 0, "local")
    sch = kiln.Schedule(SharedNest)
    with pytest.raises(ScheduleError, match="block 'C' in the loop nest of block 'B' also uses "
                                            "buffer 'B'"):
        sch.cache_write(sch.get_block("B"), 0, "local")


# ---- compute_at ----------------------------------------------------------------------------
@kiln.script.ir_module
class ProducerConsumerSplit:
    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
        B = T.alloc_buffer((16,), "float32")
        for i in range(16):
            with T.block("B"):
                vi = T.axis.spatial(16, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i_0 in range(4):
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(16, i_0 * 4 + i_1)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] + 1.0


@kiln.script.ir_module
class ProducerComputedAt:
    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
        B = T.alloc_buffer((16,), "float32")
        for i_0 in range(4):
            for ax0 in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(16, i_0 * 4 + ax0)
                    T.reads(A[vi])
                    T.writes(B[vi])
                    B[vi] = A[vi] * 2.0
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(16, i_0 * 4 + i_1)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] + 1.0


def test_compute_at():
    sch = kiln.Schedule(ProducerConsumerSplit)
    i_0, i_1 = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i_0)
    assert_structural_equal(sch.mod, ProducerComputedAt)
    check_all(ProducerConsumerSplit, sch)


def test_compute_at_innermost_keeps_unit_loops_on_request():
    sch = kiln.Schedule(ProducerConsumerSplit)
    _, i_1 = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i_1)
    assert len(sch.get_loops(sch.get_block("B"))) == 2  # i_0, i_1: the unit loop is dropped
    check_all(ProducerConsumerSplit, sch)
    sch = kiln.Schedule(ProducerConsumerSplit)
    _, i_1 = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i_1, preserve_unit_loops=True)
    loops = sch.get_loops(sch.get_block("B"))
    assert extents(sch, loops) == [4, 4, 1]
    check_all(ProducerConsumerSplit, sch)


@kiln.script.ir_module
class Stencil:
    """C[i] = B[i] + B[i + 1] over 15 points, its loop split by 4 (imperfectly)."""
    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), C: T.Buffer((15,), "float32")):
        B = T.alloc_buffer((16,), "float32")
        for i in range(16):
            with T.block("B"):
                vi = T.axis.spatial(16, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i_0 in range(4):
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(15, i_0 * 4 + i_1)
                    T.where(i_0 * 4 + i_1 < 15)
                    T.reads(B[vi:vi + 2])
                    T.writes(C[vi])
                    C[vi] = B[vi] + B[vi + 1]


@kiln.script.ir_module
class StencilComputedAt:
    """Each tile of C needs 5 elements of B (a halo of one); the last tile would reach B[16]."""
    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), C: T.Buffer((15,), "float32")):
        B = T.alloc_buffer((16,), "float32")
        for i_0 in range(4):
            for ax0 in range(5):
                with T.block("B"):
                    vi = T.axis.spatial(16, i_0 * 4 + ax0)
                    T.where(i_0 * 4 + ax0 < 16)
                    T.reads(A[vi])
                    T.writes(B[vi])
                    B[vi] = A[vi] * 2.0
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(15, i_0 * 4 + i_1)
                    T.where(i_0 * 4 + i_1 < 15)
                    T.reads(B[vi:vi + 2])
                    T.writes(C[vi])
                    C[vi] = B[vi] + B[vi + 1]


def test_compute_at_halo_and_edge_predicate():
    sch = kiln.Schedule(Stencil)
    i_0, _ = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), i_0)
    assert_structural_equal(sch.mod, StencilComputedAt)
    check_all(Stencil, sch)


def test_compute_at_reduction_producer():
    # A reduction block moved under its consumer's loop recomputes its tile from init.
    A = te.placeholder((8, 8), "float32", name="A")
    k = te.reduce_axis((0, 8), name="k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="S")
    D = te.compute((8,), lambda i: S[i] * 2.0, name="D")
    func = te.create_prim_func([A, D])
    sch = kiln.Schedule(func)
    (i,) = sch.get_loops(sch.get_block("D"))
    i0, i1 = sch.split(i, [None, 2])
    sch.compute_at(sch.get_block("S"), i0)
    assert [len(sch.get_loops(sch.get_block(b))) for b in ("S", "D")] == [3, 2]
    check_all(func, sch)


def test_compute_at_chain_in_reverse_topological_order():
    # A -> B -> C -> D: move C under D's loop, then B under the same loop (before C).
    A = te.placeholder((16,), "float32", name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((16,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((16,), lambda i: C[i] - 3.0, name="D")
    func = te.create_prim_func([A, D])
    sch = kiln.Schedule(func)
    (i,) = sch.get_loops(sch.get_block("D"))
    i0, _ = sch.split(i, [None, 4])
    sch.compute_at(sch.get_block("C"), i0)
    sch.compute_at(sch.get_block("B"), i0)
    assert [b.name for b in sch.get_child_blocks(i0)] == ["B", "C", "D"]
    check_all(func, sch)


@kiln.script.ir_module
class SiblingNests:
    """Under one loop i, B's loop j and then C's loop j."""
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
        B = T.alloc_buffer((4, 8), "float32")
        for i in range(4):
            for j in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(8, j)
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * 2.0
            for j in range(8):
                with T.block("C"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(8, j)
                    T.reads(B[vi, vj])
                    T.writes(C[vi, vj])
                    C[vi, vj] = B[vi, vj] + 1.0


@kiln.script.ir_module
class SiblingNestsFused:
    @T.prim_func
    def main(A: T.Buffer((4, 8), "float32"), C: T.Buffer((4, 8), "float32")):
        B = T.alloc_buffer((4, 8), "float32")
        for i in range(4):
            for j in range(8):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(8, j)
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * 2.0
                with T.block("C"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(8, j)
                    T.reads(B[vi, vj])
                    T.writes(C[vi, vj])
                    C[vi, vj] = B[vi, vj] + 1.0


def test_compute_at_and_reverse_within_a_shared_outer_loop():
    # Both directions give one loop j holding B then C, inside the loop i they share.
    sch = kiln.Schedule(SiblingNests)
    _, j = sch.get_loops(sch.get_block("C"))
    sch.compute_at(sch.get_block("B"), j)
    assert_structural_equal(sch.mod, SiblingNestsFused)
    check_all(SiblingNests, sch)
    sch = kiln.Schedule(SiblingNests)
    _, j = sch.get_loops(sch.get_block("B"))
    sch.reverse_compute_at(sch.get_block("C"), j)
    assert_structural_equal(sch.mod, SiblingNestsFused)
    check_all(SiblingNests, sch)


@kiln.script.ir_module
class TwoConsumers:
    """B feeds C and D, which are in separate loops."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32"),
             D: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi])
                T.writes(C[vi])
                C[vi] = B[vi] + 1.0
        for i in range(8):
            with T.block("D"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi])
                T.writes(D[vi])
                D[vi] = B[vi] - 1.0


def test_compute_at_errors():
    sch = kiln.Schedule(TwoConsumers)
    (ci,) = sch.get_loops(sch.get_block("C"))
    (bi,) = sch.get_loops(sch.get_block("B"))
    (di,) = sch.get_loops(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="compute_at: loop 'i' does not dominate consumer 'D' "
                                            "of block 'B'"):
        sch.compute_at(sch.get_block("B"), ci)
    with pytest.raises(ScheduleError, match="block 'B' is already under loop 'i'"):
        sch.compute_at(sch.get_block("B"), bi)
    with pytest.raises(ScheduleError, match="block 'D' comes after loop 'i'.*use "
                                            "reverse_compute_at"):
        sch.compute_at(sch.get_block("D"), bi)
    with pytest.raises(ScheduleError, match="block 'C' has no consumer in its scope"):
        sch.compute_at(sch.get_block("C"), di)
    with pytest.raises(ScheduleError, match="expected a loop handle"):
        sch.compute_at(sch.get_block("B"), sch.get_block("C"))
    # The message shows the IR involved.
    with pytest.raises(ScheduleError, match=r"(?s)The IR involved:.*T\.block\(\"D\"\)"):
        sch.compute_at(sch.get_block("B"), ci)


def test_compute_at_in_place_update_fails():
    sch = kiln.Schedule(InPlaceSplit)
    i0, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="updates its output in place without an init"):
        sch.compute_at(sch.get_block("B"), i0)


@kiln.script.ir_module
class InPlaceSplit:
    """B updates itself in place (no init), then C reads it in a split loop."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32"),
             C: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi], B[vi])
                T.writes(B[vi])
                B[vi] = B[vi] + A[vi]
        for i_0 in range(2):
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(8, i_0 * 4 + i_1)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] * 2.0


@kiln.script.ir_module
class TwoProducers:
    """B is written by B1 and then B2 (which overwrites half of it); C reads B."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B1"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i in range(4):
            with T.block("B2"):
                vi = T.axis.spatial(4, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 3.0
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi])
                T.writes(C[vi])
                C[vi] = B[vi] + 1.0


def test_compute_at_with_two_producers_fails():
    sch = kiln.Schedule(TwoProducers)
    (i,) = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="block 'B2' also writes a buffer that block 'B1' "
                                            "produces"):
        sch.compute_at(sch.get_block("B1"), i)


@kiln.script.ir_module
class OverwriteBetween:
    """B reads A; "W" then overwrites A; C (split) reads B. B must not move past W."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i in range(8):
            with T.block("W"):
                vi = T.axis.spatial(8, i)
                T.reads()
                T.writes(A[vi])
                A[vi] = 0.0
        for i_0 in range(2):
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(8, i_0 * 4 + i_1)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] + 1.0


@kiln.script.ir_module
class SharedNestThenD:
    """B and C share loop i; D reads C in its own loop."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), D: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        C = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi])
                T.writes(C[vi])
                C[vi] = B[vi] + 1.0
        for i in range(8):
            with T.block("D"):
                vi = T.axis.spatial(8, i)
                T.reads(C[vi])
                T.writes(D[vi])
                D[vi] = C[vi] * C[vi]


def test_compute_at_keeps_dependences():
    sch = kiln.Schedule(OverwriteBetween)
    i_0, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="moving block 'B' past block 'W' would change what one "
                                            "of them reads"):
        sch.compute_at(sch.get_block("B"), i_0)
    with pytest.raises(ScheduleError, match="compute_inline: block 'W', between 'B' and 'C', uses "
                                            "a buffer the inlined computation reads"):
        sch.compute_inline(sch.get_block("B"))
    sch = kiln.Schedule(SharedNestThenD)
    (di,) = sch.get_loops(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="block 'B' shares loop 'i' with block 'C' and one "
                                            "feeds the other; move 'B' first"):
        sch.compute_at(sch.get_block("C"), di)


def test_reverse_compute_at_joins_a_shared_nest():
    # The other way round: bring D into the loop that B and C share.
    sch = kiln.Schedule(SharedNestThenD)
    sch.reverse_compute_at(sch.get_block("D"), sch.get_loops(sch.get_block("C"))[0])
    assert [b.name for b in sch.get_child_blocks(sch.get_block("root"))] == ["B", "C", "D"]
    assert len(sch.get_loops(sch.get_block("D"))) == 1
    check_all(SharedNestThenD, sch)


# ---- reverse_compute_at --------------------------------------------------------------------
@kiln.script.ir_module
class ConsumerAfterSplit:
    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
        B = T.alloc_buffer((16,), "float32")
        for i_0 in range(4):
            for i_1 in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(16, i_0 * 4 + i_1)
                    T.reads(A[vi])
                    T.writes(B[vi])
                    B[vi] = A[vi] * 2.0
        for i in range(16):
            with T.block("C"):
                vi = T.axis.spatial(16, i)
                T.reads(B[vi])
                T.writes(C[vi])
                C[vi] = B[vi] + 1.0


@kiln.script.ir_module
class ConsumerReverseComputedAt:
    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
        B = T.alloc_buffer((16,), "float32")
        for i_0 in range(4):
            for i_1 in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(16, i_0 * 4 + i_1)
                    T.reads(A[vi])
                    T.writes(B[vi])
                    B[vi] = A[vi] * 2.0
            for ax0 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(16, i_0 * 4 + ax0)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] + 1.0


def test_reverse_compute_at():
    sch = kiln.Schedule(ConsumerAfterSplit)
    i_0, _ = sch.get_loops(sch.get_block("B"))
    sch.reverse_compute_at(sch.get_block("C"), i_0)
    assert_structural_equal(sch.mod, ConsumerReverseComputedAt)
    check_all(ConsumerAfterSplit, sch)


def test_reverse_compute_at_2d_with_offset_read():
    # D[i, j] = B[i, j + 1] over a 4x7 domain after an 4x8 producer tiled by 2x4.
    A = te.placeholder((4, 8), "float32", name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0, name="B")
    D = te.compute((4, 7), lambda i, j: B[i, j + 1] + 1.0, name="D")
    func = te.create_prim_func([A, D])
    sch = kiln.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    i0, i1 = sch.split(i, [None, 2])
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(i0, j0, i1, j1)
    sch.reverse_compute_at(sch.get_block("D"), j0)
    text = sch.mod.script()
    assert "T.where" in text  # the tile at j0 == 0 would reach D[.., -1]
    check_all(func, sch)


@kiln.script.ir_module
class StencilAfterSplit:
    """C reads B at two offsets: its tile cannot follow B's tiles one to one."""
    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), C: T.Buffer((15,), "float32")):
        B = T.alloc_buffer((16,), "float32")
        for i_0 in range(4):
            for i_1 in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(16, i_0 * 4 + i_1)
                    T.reads(A[vi])
                    T.writes(B[vi])
                    B[vi] = A[vi] * 2.0
        for i in range(15):
            with T.block("C"):
                vi = T.axis.spatial(15, i)
                T.reads(B[vi], B[vi + 1])
                T.writes(C[vi])
                C[vi] = B[vi] + B[vi + 1]


def test_reverse_compute_at_errors():
    sch = kiln.Schedule(ConsumerAfterSplit)
    i_0, i_1 = sch.get_loops(sch.get_block("B"))
    (ci,) = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="reverse_compute_at: block 'B' comes before loop 'i'"):
        sch.reverse_compute_at(sch.get_block("B"), ci)
    # A producer moved into its consumer's loop is compute_at's job.
    sch = kiln.Schedule(TwoConsumers)
    (di,) = sch.get_loops(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="block 'B' comes before loop 'i'.*use compute_at"):
        sch.reverse_compute_at(sch.get_block("B"), di)
    # C now reads B through the copy B_local, which is not under B's loop.
    sch = kiln.Schedule(TwoStage)
    (bi,) = sch.get_loops(sch.get_block("B"))
    sch.cache_read(sch.get_block("C"), 0, "local")
    with pytest.raises(ScheduleError, match="loop 'i' does not dominate producer 'B_local' of "
                                            "block 'C'"):
        sch.reverse_compute_at(sch.get_block("C"), bi)
    sch = kiln.Schedule(StencilAfterSplit)
    i_0, _ = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="reads buffer 'B' at several offsets of iterator vi"):
        sch.reverse_compute_at(sch.get_block("C"), i_0)


def test_reverse_compute_at_under_a_reduction_loop_fails():
    sch = kiln.Schedule(Matmul4)
    wb = sch.cache_write(sch.get_block("C"), 0, "local")
    _, _, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="is a reduction loop of producer 'C'; block 'C_local' "
                                            "would read partial results"):
        sch.reverse_compute_at(wb, k)


# ---- compute_inline ------------------------------------------------------------------------
@kiln.script.ir_module
class TwoStageInlined:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(C[vi])
                C[vi] = A[vi] * 2.0 + 1.0


def test_compute_inline():
    sch = kiln.Schedule(TwoStage)
    sch.compute_inline(sch.get_block("B"))
    assert_structural_equal(sch.mod, TwoStageInlined)
    check_all(TwoStage, sch)


def test_compute_inline_into_two_consumers_and_a_window():
    A = te.placeholder((10,), "float32", name="A")
    B = te.compute((10,), lambda i: A[i] * A[i], name="B")
    C = te.compute((8,), lambda i: B[i] + B[i + 2], name="C")
    D = te.compute((8,), lambda i: B[i + 1] - C[i], name="D")
    func = te.create_prim_func([A, D])
    sch = kiln.Schedule(func)
    sch.compute_inline(sch.get_block("B"))
    assert [b.name for b in sch.get_child_blocks(sch.get_block("root"))] == ["C", "D"]
    assert " B[" not in sch.mod.script() and "alloc_buffer((10,)" not in sch.mod.script()
    check_all(func, sch)


def test_compute_inline_into_a_concat_of_many_keeps_the_other_reads():
    """A block reading 12 intermediates (as a recurrent net's concat of its steps), each inlined
    in turn: the reads it keeps are the very region objects it had (only the inlined buffer's
    are merged again, so 100 steps do not re-bound 100 reads 100 times), and the reads at the
    end are those of the inputs, the program unchanged."""
    xs = [te.placeholder((4,), "float32", name=f"X{k}") for k in range(12)]
    def doubled(x, k):
        return te.compute((4,), lambda i: x[i] * 2.0, name=f"S{k}")
    steps = [doubled(x, k) for k, x in enumerate(xs)]
    out = te.compute((4,), lambda i: sum((s[i] for s in steps[1:]), steps[0][i]), name="Out")
    func = te.create_prim_func(xs + [out])
    sch = kiln.Schedule(func)
    def reads():
        (blk,) = [b for b in kiln.ir.collect(sch.func.body, kiln.ir.Block) if b.name_hint == "Out"]
        return {rg.buffer.name: rg for rg in blk.reads}
    for k in range(12):
        before = reads()
        sch.compute_inline(sch.get_block(f"S{k}"))
        kept = reads()
        assert all(kept[n] is rg for n, rg in before.items() if n.startswith("S") and n != f"S{k}")
    assert sorted(reads()) == sorted(x.name for x in xs)
    check_all(func, sch)


def test_compute_inline_errors():
    sch = kiln.Schedule(Matmul4)
    with pytest.raises(ScheduleError, match="compute_inline: block 'C' is a reduction block"):
        sch.compute_inline(sch.get_block("C"))
    sch = kiln.Schedule(TwoStage)
    with pytest.raises(ScheduleError, match="block 'C' writes buffer 'C', a parameter"):
        sch.compute_inline(sch.get_block("C"))
    sch = kiln.Schedule(SharedNest)
    sch.cache_write(sch.get_block("C"), 0, "local")  # fine; now C writes C_local
    with pytest.raises(ScheduleError, match="block 'C_local' writes buffer 'C', a parameter"):
        sch.compute_inline(sch.get_block("C_local"))
    sch = kiln.Schedule(Transposed)
    with pytest.raises(ScheduleError, match=r"stores to B\[vi \+ 1\]; the indices must be the "
                                            "block's iterators"):
        sch.compute_inline(sch.get_block("B"))
    sch = kiln.Schedule(TwoStores)
    with pytest.raises(ScheduleError, match="block 'B' must have a single store as its body; it "
                                            "has SeqStmt with 2 store"):
        sch.compute_inline(sch.get_block("B"))


@kiln.script.ir_module
class Transposed:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((9,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi + 1])
                B[vi + 1] = A[vi]
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi + 1])
                T.writes(C[vi])
                C[vi] = B[vi + 1]


@kiln.script.ir_module
class TwoStores:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        D = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi], D[vi])
                B[vi] = A[vi]
                D[vi] = A[vi]
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(B[vi], D[vi])
                T.writes(C[vi])
                C[vi] = B[vi] + D[vi]


# ---- reverse_compute_inline ----------------------------------------------------------------
@kiln.script.ir_module
class TwoStageReverseInlined:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(C[vi])
                C[vi] = A[vi] * 2.0 + 1.0


def test_reverse_compute_inline():
    sch = kiln.Schedule(TwoStage)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert_structural_equal(sch.mod, TwoStageReverseInlined)
    check_all(TwoStage, sch)


@kiln.script.ir_module
class ShiftedConsumer:
    """C[i] = B[i + 1] * A[i]: C needs B[1..8), so the producer skips B[0]."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((7,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + 1.0
        for i in range(7):
            with T.block("C"):
                vi = T.axis.spatial(7, i)
                T.reads(B[vi + 1], A[vi])
                T.writes(C[vi])
                C[vi] = B[vi + 1] * A[vi]


@kiln.script.ir_module
class ShiftedReverseInlined:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), C: T.Buffer((7,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.where(i - 1 >= 0)
                T.reads(A[vi - 1:vi - 1 + 2])
                T.writes(C[vi - 1])
                C[vi - 1] = (A[vi] + 1.0) * A[vi - 1]


def test_reverse_compute_inline_with_offset():
    sch = kiln.Schedule(ShiftedConsumer)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert_structural_equal(sch.mod, ShiftedReverseInlined)
    check_all(ShiftedConsumer, sch)


def test_reverse_compute_inline_epilogue_of_tiled_producer():
    A = te.placeholder((8, 8), "float32", name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: te.max(B[i, j], 0.0), name="C")
    func = te.create_prim_func([A, C])
    sch = kiln.Schedule(func)
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 4])
    sch.reverse_compute_inline(sch.get_block("C"))
    assert [b.name for b in sch.get_child_blocks(sch.get_block("root"))] == ["B"]
    check_all(func, sch)


@kiln.script.ir_module
class Broadcast:
    @T.prim_func
    def main(A: T.Buffer((4,), "float32"), C: T.Buffer((4, 4), "float32")):
        B = T.alloc_buffer((4,), "float32")
        for i in range(4):
            with T.block("B"):
                vi = T.axis.spatial(4, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i in range(4):
            for j in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(4, j)
                    T.reads(B[vi])
                    T.writes(C[vi, vj])
                    C[vi, vj] = B[vi]


def test_reverse_compute_inline_errors():
    sch = kiln.Schedule(Broadcast)
    with pytest.raises(ScheduleError, match=r"reads B\[vi\], which is not a one-to-one map"):
        sch.reverse_compute_inline(sch.get_block("C"))
    sch = kiln.Schedule(StencilAfterSplit)
    with pytest.raises(ScheduleError, match="reads buffer 'B' at several indices"):
        sch.reverse_compute_inline(sch.get_block("C"))
    sch = kiln.Schedule(TwoConsumers)
    with pytest.raises(ScheduleError, match=r"buffer 'B' is also read by block\(s\) D"):
        sch.reverse_compute_inline(sch.get_block("C"))
    # A reduction producer, then a consumer reading two produced buffers.
    A = te.placeholder((4, 4), "float32", name="A")
    k = te.reduce_axis((0, 4), name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    E = te.compute((4,), lambda i: A[i, 0] * 2.0, name="E")
    D = te.compute((4,), lambda i: S[i] + 1.0, name="D")
    F = te.compute((4,), lambda i: D[i] + E[i], name="F")
    sch = kiln.Schedule(te.create_prim_func([A, F]))
    with pytest.raises(ScheduleError, match="producer 'S' is a reduction block"):
        sch.reverse_compute_inline(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="must read exactly one buffer written by another "
                                            "block; it reads 'D', 'E'"):
        sch.reverse_compute_inline(sch.get_block("F"))
    with pytest.raises(ScheduleError, match="reverse_compute_inline: block 'S' is a reduction"):
        sch.reverse_compute_inline(sch.get_block("S"))


@kiln.script.ir_module
class ConsumerOverwritesInput:
    """C writes A, which B (its producer) reads."""
    @T.prim_func
    def main(A: T.Buffer((8,), "float32")):
        B = T.alloc_buffer((8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * 2.0
        for i in range(7):
            with T.block("C"):
                vi = T.axis.spatial(7, i)
                T.reads(B[vi + 1])
                T.writes(A[vi])
                A[vi] = B[vi + 1] + 1.0


def test_inline_refuses_in_place_merges():
    sch = kiln.Schedule(ConsumerOverwritesInput)
    with pytest.raises(ScheduleError, match="reverse_compute_inline: block 'C' writes buffer 'A', "
                                            "which block 'B' reads"):
        sch.reverse_compute_inline(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="compute_inline: block 'C' writes buffer 'A', which "
                                            "block 'B' reads"):
        sch.compute_inline(sch.get_block("B"))


# ---- decompose_reduction -------------------------------------------------------------------
@kiln.script.ir_module
class MatmulIKJ:
    @T.prim_func
    def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
             C: T.Buffer((4, 4), "float32")):
        for i in range(4):
            for k in range(4):
                for j in range(4):
                    with T.block("C"):
                        vi = T.axis.spatial(4, i)
                        vj = T.axis.spatial(4, j)
                        vk = T.axis.reduce(4, k)
                        T.reads(A[vi, vk], B[vk, vj])
                        T.writes(C[vi, vj])
                        with T.init():
                            C[vi, vj] = 0.0
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@kiln.script.ir_module
class MatmulDecomposed:
    @T.prim_func
    def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
             C: T.Buffer((4, 4), "float32")):
        for i in range(4):
            for j_init in range(4):
                with T.block("C_init"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(4, j_init)
                    T.reads()
                    T.writes(C[vi, vj])
                    C[vi, vj] = 0.0
            for k in range(4):
                for j in range(4):
                    with T.block("C"):
                        vi = T.axis.spatial(4, i)
                        vj = T.axis.spatial(4, j)
                        vk = T.axis.reduce(4, k)
                        T.reads(A[vi, vk], B[vk, vj])
                        T.writes(C[vi, vj])
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_decompose_reduction():
    sch = kiln.Schedule(MatmulIKJ)
    _, k, _ = sch.get_loops(sch.get_block("C"))
    init = sch.decompose_reduction(sch.get_block("C"), k)
    assert init.name == "C_init"
    assert_structural_equal(sch.mod, MatmulDecomposed)
    check_all(MatmulIKJ, sch)


def test_decompose_reduction_at_the_outermost_loop():
    sch = kiln.Schedule(Matmul4)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.decompose_reduction(sch.get_block("C"), i)
    assert len(sch.get_loops(sch.get_block("C_init"))) == 2
    assert [b.name for b in sch.get_child_blocks(sch.get_block("root"))] == ["C_init", "C"]
    check_all(Matmul4, sch)


@kiln.script.ir_module
class MatmulSplitJDecomposed:
    @T.prim_func
    def main(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32"),
             C: T.Buffer((4, 4), "float32")):
        for i in range(4):
            for j_0 in range(2):
                for j_1_init in range(3):
                    with T.block("C_init"):
                        vi = T.axis.spatial(4, i)
                        vj = T.axis.spatial(4, j_0 * 3 + j_1_init)
                        T.where(j_0 * 3 + j_1_init < 4)
                        T.reads()
                        T.writes(C[vi, vj])
                        C[vi, vj] = 0.0
                for k in range(4):
                    for j_1 in range(3):
                        with T.block("C"):
                            vi = T.axis.spatial(4, i)
                            vj = T.axis.spatial(4, j_0 * 3 + j_1)
                            vk = T.axis.reduce(4, k)
                            T.where(j_0 * 3 + j_1 < 4)
                            T.reads(A[vi, vk], B[vk, vj])
                            T.writes(C[vi, vj])
                            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def test_decompose_reduction_keeps_the_spatial_predicate():
    # Imperfect split of j: the init block keeps the guard, on its own copy of j_1.
    sch = kiln.Schedule(Matmul4)
    _, j, k = sch.get_loops(sch.get_block("C"))
    j_0, j_1 = sch.split(j, [None, 3])
    sch.reorder(k, j_1)
    sch.decompose_reduction(sch.get_block("C"), k)
    assert_structural_equal(sch.mod, MatmulSplitJDecomposed)
    check_all(Matmul4, sch)


def test_decompose_reduction_errors():
    sch = kiln.Schedule(Matmul4)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.decompose_reduction(sch.get_block("C"), k)
    with pytest.raises(ScheduleError, match="block 'C' has no init"):
        sch.decompose_reduction(sch.get_block("C"), k)
    sch = kiln.Schedule(MatmulIKJ)
    i, k, j = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="loop 'k' around loop 'j' drives the reduction of "
                                            "block 'C'"):
        sch.decompose_reduction(sch.get_block("C"), j)
    sch = kiln.Schedule(Matmul4)
    i, j, k = sch.get_loops(sch.get_block("C"))
    fused = sch.fuse(j, k)
    with pytest.raises(ScheduleError, match="loop 'j_k_fused' drives both spatial and reduction "
                                            "iterators of block 'C'"):
        sch.decompose_reduction(sch.get_block("C"), fused)


def test_decompose_reduction_loop_not_around_block():
    # A loop of another nest in the same function.
    A = te.placeholder((4, 4), "float32", name="A")
    k = te.reduce_axis((0, 4), name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    D = te.compute((4,), lambda i: S[i] * 2.0, name="D")
    sch = kiln.Schedule(te.create_prim_func([A, D]))
    (di,) = sch.get_loops(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="decompose_reduction: loop 'i' is not around block "
                                            "'S'"):
        sch.decompose_reduction(sch.get_block("S"), di)


# ---- acceptance flows ----------------------------------------------------------------------
def test_matmul_tiled_local_accumulator_flow():
    """te matmul 64x64x64: tile, accumulate in a local buffer written back per tile, and
    initialise the accumulator before the reduction loop; still equal to numpy."""
    func = te_matmul(64, 64, 64)
    sch = kiln.Schedule(func)
    c, (i0, j0, k, i1, j1) = tile_matmul(sch, t=8)
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, j0)
    init = sch.decompose_reduction(c, k)
    # The tile structure: i0, j0 { C_init over i1, j1; k, i1, j1 { C }; C_local over 8x8 }.
    assert [b.name for b in sch.get_child_blocks(j0)] == [init.name, "C", wb.name]
    assert [rv.var.name for rv in sch.get_loops(wb)] == ["i_0", "j_0", "ax0", "ax1"]
    verify(sch.mod)
    a, b, out = random_args(sch.func, seed=1)
    evaluate(sch.mod, a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert_roundtrip(sch.mod)
    fresh = kiln.Schedule(func)
    sch.trace.apply_to(fresh)
    assert_structural_equal(fresh.mod, sch.mod)
    assert str(sch.trace).splitlines()[5:8] == [
        "b8 = sch.cache_write(b0, 0, 'local')",
        "sch.reverse_compute_at(b8, l6)",
        "b9 = sch.decompose_reduction(b0, l3)",
    ]


def test_conv2d_inline_padding_and_tile_flow():
    func = te_conv2d()
    sch = kiln.Schedule(func)
    sch.compute_inline(sch.get_block("pad"))
    conv = sch.get_block("conv")
    b, f, h, w, rc, ry, rx = sch.get_loops(conv)
    h0, h1 = sch.split(h, [None, 4])
    w0, w1 = sch.split(w, [None, 4])
    sch.reorder(h0, w0, rc, ry, rx, h1, w1)
    wb = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(wb, w0)
    sch.decompose_reduction(conv, rc)
    assert "pad" not in [b.name for b in sch.get_child_blocks(sch.get_block("root"))]
    verify(sch.mod)
    a, wgt, out = random_args(sch.func, seed=2)
    evaluate(sch.mod, a, wgt, out)
    np.testing.assert_allclose(out, conv2d_numpy(a, wgt), rtol=1e-4, atol=1e-4)
    check_all(func, sch)


def test_conv2d_pad_computed_at_tile_flow():
    # Instead of inlining, compute the padded input per output tile (with its halo).
    func = te_conv2d()
    sch = kiln.Schedule(func)
    conv = sch.get_block("conv")
    b, f, h, w, rc, ry, rx = sch.get_loops(conv)
    h0, h1 = sch.split(h, [None, 4])
    sch.reorder(h0, b, f, w, rc, ry, rx, h1)
    sch.compute_at(sch.get_block("pad"), h0)
    ax = sch.get_loops(sch.get_block("pad"))
    # All channels, 4 rows and a halo of 2, all padded columns.
    assert extents(sch, ax[1:]) == [2, 6, 10]
    check_all(func, sch)


def test_cache_read_compute_at_packs_a_tile_of_A():
    func = te_matmul(32, 32, 32)
    sch = kiln.Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 8])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, k1, i1, j1)
    a_local = sch.cache_read(c, 0, "local")
    sch.compute_at(a_local, k0)
    loops = sch.get_loops(a_local)
    assert extents(sch, loops) == [4, 4, 8, 8, 4]
    assert [b.name for b in sch.get_child_blocks(k0)] == ["A_local", "C"]
    check_all(func, sch)
    a, bm, out = random_args(sch.func, seed=3)
    evaluate(sch.mod, a, bm, out)
    np.testing.assert_allclose(out, a @ bm, rtol=1e-4, atol=1e-4)


def test_cache_read_and_write_both_tiled():
    # Pack A and B per k-step, accumulate C locally: every block moved into one tile nest.
    func = te_matmul(16, 16, 16)
    sch = kiln.Schedule(func)
    c, (i0, j0, k, i1, j1) = tile_matmul(sch, t=4)
    a_l = sch.cache_read(c, 0, "local")
    b_l = sch.cache_read(c, 1, "local")
    wb = sch.cache_write(c, 0, "local")
    sch.compute_at(a_l, k)
    sch.compute_at(b_l, k)
    sch.reverse_compute_at(wb, j0)
    sch.decompose_reduction(c, k)
    assert [b.name for b in sch.get_child_blocks(k)] == ["A_local", "B_local", "C"]
    check_all(func, sch)


def test_matmul_module_from_conftest():
    # A hand-built (not te) matmul through the same flow.
    mod = matmul_module(8, 8, 8)
    sch = kiln.Schedule(mod)
    c, (i0, j0, k, i1, j1) = tile_matmul(sch, t=4)
    wb = sch.cache_write(c, 0, "global")
    sch.reverse_compute_at(wb, j0)
    sch.decompose_reduction(c, k)
    check_all(mod, sch)


def test_conv2d_pack_input_tile_with_halo():
    # After inlining the padding, pack the input window of each 4x4 output tile: 6x6 with the
    # halo, guarded at the image border where the window pokes out of A.
    func = te_conv2d()
    sch = kiln.Schedule(func)
    sch.compute_inline(sch.get_block("pad"))
    conv = sch.get_block("conv")
    b, f, h, w, rc, ry, rx = sch.get_loops(conv)
    h0, h1 = sch.split(h, [None, 4])
    w0, w1 = sch.split(w, [None, 4])
    sch.reorder(b, h0, w0, f, rc, ry, rx, h1, w1)
    a_local = sch.cache_read(conv, 0, "local")
    sch.compute_at(a_local, w0)
    loops = sch.get_loops(a_local)
    assert extents(sch, loops[3:]) == [2, 6, 6]
    assert "T.where(" in sch.mod.script()
    check_all(func, sch)


def test_more_misuse_messages():
    # compute_inline of one of two writers.
    sch = kiln.Schedule(TwoProducers)
    with pytest.raises(ScheduleError, match="compute_inline: buffer 'B' is written by blocks B1, "
                                            "B2; it must have a single writer"):
        sch.compute_inline(sch.get_block("B1"))
    # reverse_compute_inline when the intermediate is an output of the function.
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    sch = kiln.Schedule(te.create_prim_func([A, B, C]))
    with pytest.raises(ScheduleError, match="buffer 'B' is a parameter \\(output\\) of the "
                                            "function, so it must still be written"):
        sch.reverse_compute_inline(sch.get_block("C"))
    # reverse_compute_at of a consumer that sums over a window of what is produced per tile.
    k = te.reduce_axis((0, 3), name="k")
    A = te.placeholder((10,), "float32", name="A")
    B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    D = te.compute((8,), lambda i: te.sum(B[i + k], axis=k), name="D")
    sch = kiln.Schedule(te.create_prim_func([A, D]))
    (i,) = sch.get_loops(sch.get_block("B"))
    i0, _ = sch.split(i, [None, 5])
    with pytest.raises(ScheduleError, match="reads dimension 0 of buffer 'B' at an index that is "
                                            "not one spatial iterator plus an offset"):
        sch.reverse_compute_at(sch.get_block("D"), i0)
