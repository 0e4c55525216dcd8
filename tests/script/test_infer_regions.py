"""kiln.ir.analysis.infer_access_regions: the regions a block reads and writes, as the parser
fills them in when a script leaves out T.reads / T.writes."""
import pytest

from kiln.ir import (Block, BlockRealize, Buffer, BufferRegion, BufferStore, For, IntImm, IterVar,
                     Range, Var, seq)
from kiln.ir.analysis import expr_equal, infer_access_regions
from kiln.ir.printer import to_text
from kiln.script import parse


def regions(block):
    reads, writes = infer_access_regions(block)
    return [to_text(r) for r in reads], [to_text(w) for w in writes]


def block_of(body, *iters, allocs=(), init=None):
    return Block("b", tuple(IterVar(v, Range.from_extent(16), "spatial") for v in iters), (), (),
                 body, init, allocs)


vi, vj, k = Var("vi"), Var("vj"), Var("k")
A, B, C = Buffer("A", (16, 16)), Buffer("B", (16,)), Buffer("C", (16, 16))


def test_points_and_reduction_reads_its_output():
    body = BufferStore(C, C[vi, vj] + A[vi, vj] * B[vj], (vi, vj))
    assert regions(block_of(body, vi, vj)) == (["C[vi, vj]", "A[vi, vj]", "B[vj]"], ["C[vi, vj]"])


def test_loops_inside_the_block_give_hulls():
    body = For(k, 0, 4, "serial", BufferStore(B, B[vi] + A[vi * 4 + k, 15 - k], (vi * 4 + k,)))
    assert regions(block_of(body, vi)) == (["B[vi]", "A[vi * 4:vi * 4 + 4, 12:16]"], ["B[vi * 4:vi * 4 + 4]"])


def test_symbolic_loop_extent_and_offsets_merge():
    n = Var("n")
    body = For(k, 1, n, "serial", seq(BufferStore(B, A[vi, k - 1] + A[vi, k + 1], (vi,))))
    assert regions(block_of(body, vi)) == (["A[vi, 0:n + 2]"], ["B[vi]"])


@pytest.mark.parametrize("index", ["k * k", "vi * k", "I[k]"])
def test_non_affine_indices_cover_the_whole_dimension(index):
    text = f'''
@T.prim_func
def f(A: T.Buffer((16, 16), "float32"), I: T.Buffer((4,), "int32")):
    for i in range(4):
        with T.block("b"):
            vi = T.axis.spatial(4, i)
            for k in range(4):
                A[vi, 0] = A[vi, {index}]
'''
    block = parse(text).body.block.body.body.block
    (region,) = [r for r in block.reads if r.buffer.name == "A"]
    assert to_text(region) == "A[vi, 0:16]"


def test_incomparable_indices_cover_the_whole_dimension():
    body = seq(BufferStore(B, A[vi, vj], (vi,)), BufferStore(B, A[vj, vi], (vj,)))
    assert regions(block_of(body, vi, vj)) == (["A[0:16, 0:16]"], ["B[0:16]"])


def test_same_point_after_arithmetic_is_still_a_point():
    body = BufferStore(B, A[vi, 0] + A[vi + 1 - 1, 0], (vi,))
    assert regions(block_of(body, vi)) == (["A[vi, 0]"], ["B[vi]"])


def test_nested_blocks_contribute_their_regions_and_allocations_are_left_out():
    X = Buffer("X", (4,))
    vk = Var("vk")
    inner = Block("inner", (IterVar(vk, Range.from_extent(4), "spatial"),),
                  (BufferRegion.point(A, (vi, vk)),), (BufferRegion.point(X, (vk,)),),
                  BufferStore(X, A[vi, vk], (vk,)))
    body = seq(For(k, 0, 4, "serial", BlockRealize((k,), True, inner)),
               BufferStore(B, X[0] + X[3], (vi,)))
    assert regions(block_of(body, vi, allocs=(X,))) == (["A[vi, 0:4]"], ["B[vi]"])


def test_init_and_parts_call_form():
    init = BufferStore(B, IntImm(0).astype("float32"), (vi,))
    body = BufferStore(B, B[vi] + A[vi, vj], (vi,))
    reads, writes = infer_access_regions(body, (), init)
    assert [to_text(r) for r in reads] == ["B[vi]", "A[vi, vj]"]
    assert [to_text(w) for w in writes] == ["B[vi]"]


def test_expr_equal_compares_variables_by_identity():
    i = Var("i")
    assert expr_equal(i * 4 + 1, i * 4 + 1)
    assert not expr_equal(i + 1, Var("i") + 1)
    assert not expr_equal(IntImm(1), IntImm(1, "int64"))
