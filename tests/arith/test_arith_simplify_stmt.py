"""kiln.arith.simplify_stmt: simplification with loop and block-iterator ranges."""
import numpy as np

from kiln import arith, te
from kiln.ir import (Block, BlockRealize, BufferRegion, BufferStore, For, IfThenElse, IntImm,
                     IterVar, PrimFunc, Range, Var, assert_structural_equal, root_realize, verify)
from kiln.ir.evaluator import evaluate
import kiln


def _split_program(pred_bound):
    """B[vi] = A[vi] + 1 over 16 elements, loop split into (i0, i1) by 4, with the binding and
    predicate a split leaves behind before simplification."""
    A, B = kiln.ir.Buffer("A", (16,)), kiln.ir.Buffer("B", (16,))
    i0, i1, vi = Var("i0"), Var("i1"), Var("vi")
    binding = ((i0 * 2 + i1 // 2) * 2 + i1 % 2)
    block = Block("B", (IterVar(vi, Range(0, 16), "spatial"),),
                  (BufferRegion.point(A, (vi * 1 + 0,)),), (BufferRegion.point(B, (vi,)),),
                  BufferStore(B, A[vi + 0] + 1.0, (vi * 1,)))
    realize = BlockRealize((binding,), i0 * 4 + i1 < pred_bound, block)
    body = For(i0, 0, 4, "serial", For(i1, 0, 4, "serial", realize))
    return PrimFunc((A, B), root_realize(body)), (A, B, i0, i1, vi)


def test_simplify_stmt_uses_loop_ranges():
    func, (A, B, i0, i1, vi) = _split_program(16)
    out = arith.simplify_stmt(func)
    block = Block("B", (IterVar(vi, Range(0, 16), "spatial"),),
                  (BufferRegion.point(A, (vi,)),), (BufferRegion.point(B, (vi,)),),
                  BufferStore(B, A[vi] + 1.0, (vi,)))
    expected = PrimFunc((A, B), root_realize(
        For(i0, 0, 4, "serial", For(i1, 0, 4, "serial",
                                    BlockRealize((i0 * 4 + i1,), IntImm(1, "bool"), block)))))
    assert_structural_equal(out, expected)
    verify(out)
    a, b = np.arange(16, dtype="float32"), np.empty(16, "float32")
    evaluate(out, a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_unprovable_predicate_is_kept():
    func, _ = _split_program(14)
    out = arith.simplify_stmt(func)
    pred = out.body.block.body.body.body.predicate
    assert not isinstance(pred, IntImm)
    a, b = np.arange(16, dtype="float32"), np.zeros(16, "float32")
    evaluate(out, a, b)
    np.testing.assert_array_equal(b, np.where(np.arange(16) < 14, a + 1, 0))


def test_block_iterator_domains_and_if():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.if_then_else(i < 8, A[i], 0.0), name="B")
    func = te.create_prim_func([A, B])
    out = arith.simplify_stmt(kiln.ir.IRModule({"main": func}))["main"]
    store = out.body.block.body.body.block.body
    assert store.value.__class__.__name__ == "BufferLoad"  # select(vi < 8, ...) folded
    # An if whose condition holds becomes its then-branch.
    i, vi = Var("i"), Var("vi")
    Bf = kiln.ir.Buffer("B", (8,))
    st = IfThenElse(vi < 8, BufferStore(Bf, 1.0, (vi,)))
    blk = Block("b", (IterVar(vi, Range(0, 8), "spatial"),), (), (), st)
    loop = For(i, 0, 8, "serial", BlockRealize((i,), True, blk))
    new = arith.simplify_stmt(loop)
    assert isinstance(new.body.block.body, BufferStore)


def test_unchanged_is_shared():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    assert arith.simplify_stmt(func) is func


def test_symbolic_loop_bounds():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.if_then_else(i < n, A[i], 0.0), name="B")
    out = arith.simplify_stmt(te.create_prim_func([A, B]))
    store = out.body.block.body.body.block.body
    assert store.value.__class__.__name__ == "BufferLoad"


def test_an_if_on_a_loop_variable_narrows_it_in_each_branch():
    """``if i < 3`` (what loop partitioning leaves in a parallel loop): the then-branch knows
    i <= 2 and the else-branch i >= 3, so the guard ``i * 4 + j < 14`` folds on both sides."""
    A = kiln.ir.Buffer("A", (16,))
    i, j = Var("i"), Var("j")

    def store():
        return BufferStore(A, kiln.ir.expr.Select(i * 4 + j < 14, kiln.ir.FloatImm(1.0, "float32"), kiln.ir.FloatImm(0.0, "float32")), (i * 4 + j,))
    loop = For(i, 0, 4, "serial", IfThenElse(i < 3, For(j, 0, 4, "serial", store()),
                                             For(j, 0, 2, "serial", store())))
    out = arith.simplify_stmt(loop)
    then, other = out.body.then_case.body, out.body.else_case.body
    assert isinstance(then.value, kiln.ir.FloatImm) and then.value.value == 1.0
    assert isinstance(other.value, kiln.ir.FloatImm) and other.value.value == 1.0
    # Not narrowed by a condition it cannot read: the Select stays.
    kept = arith.simplify_stmt(For(i, 0, 4, "serial", IfThenElse(i * 2 < 5, For(j, 0, 4, "serial", store()))))
    assert isinstance(kept.body.then_case.body.value, kiln.ir.expr.Select)


def test_an_if_that_never_runs_goes_and_so_does_its_loop():
    """``if i + 16 < 8`` under ``for i in range(4)`` never runs: it goes, and the loop around
    nothing but it; its neighbour in the sequence stays."""
    i = Var("i")
    Bf = kiln.ir.Buffer("B", (32,))
    dead = For(i, 0, 4, "serial", IfThenElse(i + 16 < 8, BufferStore(Bf, 1.0, (i,))))
    live = For(i, 0, 4, "serial", BufferStore(Bf, 2.0, (i,)))
    out = arith.simplify_stmt(kiln.ir.SeqStmt((live, dead)))
    assert isinstance(out, kiln.ir.SeqStmt) and len(out.seq) == 1
    assert_structural_equal(out.seq[0], live)
