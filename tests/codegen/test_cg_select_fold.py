"""A Select whose condition compares constants (an index of an unrolled loop) keeps only the
arm it picks. Where codegen copies an unrolled loop's body itself (``FuncLowerer._copies_here``:
a body that accumulates into memory off the stack), the other arm's loads are never emitted;
where it leaves the unrolling to LLVM (the rest), LLVM folds the Select once it has unrolled
the loop. Either way no select is left in the optimized code (the Winograd transforms, written
as one matrix row chosen per unrolled index, rely on it)."""
import numpy as np

import kiln
from kiln.codegen.emit import compile_module, lower_to_llvm
from kiln.script import T


@kiln.script.ir_module
class RowPick:
    @T.prim_func
    def main(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32"),
             C: T.Buffer((4,), "float32")):
        for i in T.unroll(4):
            with T.block("C"):
                vi = T.axis.spatial(4, i)
                C[vi] = T.Select(vi == 2, B[vi] * T.float32(3), A[vi] + T.float32(1))


@kiln.script.ir_module
class RowPickInto:
    @T.prim_func
    def main(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32"),
             C: T.Buffer((4,), "float32")):
        for i in T.unroll(4):
            with T.block("C"):
                vi = T.axis.spatial(4, i)
                C[vi] = C[vi] + T.Select(vi == 2, B[vi] * T.float32(3), A[vi] + T.float32(1))


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
