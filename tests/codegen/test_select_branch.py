"""A select of vectors on a condition that is one value for all their lanes (a concat's part,
chosen by the row) is lowered as a branch, so only the taken arm's loads run; a condition that
varies across the lanes stays a vector select. The results equal numpy's."""
import numpy as np

import kiln
from kiln.codegen.emit import lower_to_llvm
from kiln.script import T


@kiln.script.ir_module
class ConcatRows:
    @T.prim_func
    def main(A0: T.Buffer((2, 64), "float32"), A1: T.Buffer((3, 64), "float32"),
             A2: T.Buffer((1, 64), "float32"), B: T.Buffer((6, 64), "float32")):
        for i in T.serial(6):
            for j in T.vectorized(64):
                with T.block("B"):
                    vi = T.axis.spatial(6, i)
                    vj = T.axis.spatial(64, j)
                    B[vi, vj] = T.Select(vi < 2, A0[T.min(vi, 1), vj],
                                         T.Select(vi < 5, A1[T.min(T.max(vi - 2, 0), 2), vj],
                                                  A2[0, vj]))


@kiln.script.ir_module
class InterleaveColumns:
    @T.prim_func
    def main(A0: T.Buffer((4, 32), "float32"), A1: T.Buffer((4, 32), "float32"),
             B: T.Buffer((4, 64), "float32")):
        for i in T.serial(4):
            for j in T.vectorized(64):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(64, j)
                    B[vi, vj] = T.Select(vj % 2 == 0, A0[vi, vj // 2], A1[vi, vj // 2])


def _run(mod, *shapes):
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
    out = kiln.nd.array(np.zeros(shapes[-1], "float32"))
    kiln.build(mod, target="llvm")(*[kiln.nd.array(p) for p in parts], out)
    return parts, out.numpy()


def test_a_select_on_the_row_is_a_branch():
    ir_text = str(lower_to_llvm(ConcatRows, "llvm")[0])   # before LLVM's optimizations
    assert "select.true" in ir_text and "x float> %" not in _selects(ir_text)
    parts, got = _run(ConcatRows, (2, 64), (3, 64), (1, 64), (6, 64))
    np.testing.assert_array_equal(got, np.concatenate(parts, axis=0))


def test_a_select_on_the_lanes_stays_a_vector_select():
    ir_text = str(lower_to_llvm(InterleaveColumns, "llvm")[0])
    assert "select.true" not in ir_text and "x float> %" in _selects(ir_text)
    parts, got = _run(InterleaveColumns, (4, 32), (4, 32), (4, 64))
    want = np.stack(parts, axis=-1).reshape(4, 64)    # columns alternate between the parts
    np.testing.assert_array_equal(got, want)


def _selects(ir_text):
    return "\n".join(line for line in ir_text.splitlines() if " = select " in line)
