"""A Select whose condition compares constants (an index of an unrolled loop) lowers only the
arm it picks: the other arm's loads are never emitted (the Winograd transforms, written as one
matrix row chosen per unrolled index, rely on it for their compile time)."""
import numpy as np

import kiln
from kiln.codegen.emit import lower_to_llvm
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


def test_constant_condition_lowers_one_arm():
    llmod, _, _ = lower_to_llvm(RowPick, "llvm")
    text = str(llmod)
    # 4 copies: one multiply (i = 2), three adds; no select left
    assert text.count("fmul") == 1 and text.count("fadd") == 3
    assert "select" not in text


def test_constant_condition_results():
    rt = kiln.build(RowPick, target="llvm")
    a, b = np.arange(4, dtype="float32"), np.arange(10, 14, dtype="float32")
    c = kiln.nd.empty((4,), "float32")
    rt(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_array_equal(c.numpy(), [1, 2, 36, 4])
