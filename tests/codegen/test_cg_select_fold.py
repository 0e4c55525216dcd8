"""A Select whose condition compares constants (an index of an unrolled loop) keeps only the
arm it picks. Where codegen copies an unrolled loop's body itself (``FuncLowerer._copies_here``:
a body that accumulates into memory off the stack), the other arm's loads are never emitted;
where it leaves the unrolling to LLVM (the rest), LLVM folds the Select once it has unrolled
the loop. Either way no select is left in the optimized code (the Winograd transforms, written
as one matrix row chosen per unrolled index, rely on it)."""
import numpy as np

import kiln
from kiln.codegen.emit import compile_module, lower_to_llvm
from kiln.ir.expr import FloatImm, Select, Var

from cg_irbuild import buf, nest, prim_func, realize, store


def _row_pick(accumulate: bool):
    """``C[i] = Select(i == 2, B[i] * 3, A[i] + 1)`` over ``i`` in an unrolled loop of 4, or with
    ``accumulate`` ``C[i] = C[i] + Select(...)``."""
    A, B, C = buf("A", (4,)), buf("B", (4,)), buf("C", (4,))
    i = Var("i")

    def body(vi):
        picked = Select(vi == 2, B[vi] * FloatImm(3.0, "float32"), A[vi] + FloatImm(1.0, "float32"))
        return store(C, C[vi] + picked if accumulate else picked, vi)
    return prim_func([A, B, C], nest([(i, 4, "unrolled")], realize("C", [("S", 4, i)], body)))


RowPick, RowPickInto = _row_pick(False), _row_pick(True)


def test_constant_condition_lowers_one_arm():
    # C[i] += ... reads and writes a parameter: copied here, 4 copies with constant indices:
    # one multiply (i = 2), three adds for the other arm, four for the accumulation.
    text = str(lower_to_llvm(RowPickInto, "llvm")[0])
    assert text.count("fmul") == 1 and text.count("fadd") == 7
    assert "select" not in text and "llvm.loop.unroll" not in text


def test_llvm_unrolls_the_other_loops_and_folds_the_select():
    before = str(lower_to_llvm(RowPick, "llvm")[0])
    assert "llvm.loop.unroll.full" in before      # one copy of the body, unrolled by LLVM
    after = compile_module(RowPick, "llvm").llvm_ir()
    # the four copies, SLP-vectorized: one multiply, one add, blended lane by lane
    assert after.count("fmul") == 1 and after.count("fadd") == 1
    assert "select" not in after


def test_constant_condition_results():
    a, b = np.arange(4, dtype="float32"), np.arange(10, 14, dtype="float32")
    for mod, c0 in ((RowPick, np.zeros(4, "float32")), (RowPickInto, np.full(4, 5, "float32"))):
        rt = kiln.build(mod, target="llvm")
        c = kiln.nd.array(c0)
        rt(kiln.nd.array(a), kiln.nd.array(b), c)
        np.testing.assert_array_equal(c.numpy(), c0 + np.array([1, 2, 36, 4], "float32"))
