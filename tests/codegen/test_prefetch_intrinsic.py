"""The ``prefetch`` intrinsic: ``T.evaluate(T.prefetch(A[i]))`` becomes ``llvm.prefetch`` of
the element's address (``prefetcht1`` on x86, ``prfm`` on AArch64), computes nothing, and is
refused with a clear error when its argument is not a buffer element."""
import numpy as np
import pytest

import kiln
from kiln import codegen
from kiln.codegen.errors import CodegenError
from kiln.ir import Call, IntImm
from kiln.script import T


@kiln.script.ir_module
class CopyWithPrefetch:
    @T.prim_func
    def main(A: T.Buffer((4, 64), "float32"), B: T.Buffer((4, 64), "float32")):
        for i in T.serial(4):
            # the next row's line, by its flat offset (past the last dimension's extent)
            T.evaluate(T.prefetch(A[T.min(i + 1, 3), 0]))
            for j in T.vectorized(64):
                with T.block("B"):
                    vi = T.axis.spatial(4, i)
                    vj = T.axis.spatial(64, j)
                    B[vi, vj] = A[vi, vj] * T.float32(2)


def test_prefetch_computes_nothing_and_the_program_runs():
    rt = kiln.build(CopyWithPrefetch, target="llvm")
    a = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    b = kiln.nd.array(np.zeros((4, 64), "float32"))
    rt(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), 2 * a)


@pytest.mark.parametrize("target,instr", [("llvm -mcpu=haswell", "prefetcht1"),
                                          ("aarch64-linux-gnu", "prfm")])
def test_prefetch_is_a_prefetch_instruction(target, instr):
    cm = codegen.compile_module(kiln.driver.lower(CopyWithPrefetch), target)
    assert "@llvm.prefetch" in cm.llvm_ir()
    assert instr in cm.assembly()


def test_prefetch_round_trips_through_the_script_printer():
    text = CopyWithPrefetch["main"].script()
    assert "T.evaluate(T.prefetch(A[" in text
    kiln.script.assert_roundtrip(CopyWithPrefetch)


def test_prefetch_of_a_value_is_refused():
    with pytest.raises(CodegenError, match="prefetch takes a buffer element"):
        @kiln.script.ir_module
        class Bad:
            @T.prim_func
            def main(A: T.Buffer((4,), "float32")):
                for i in T.serial(4):
                    T.evaluate(T.prefetch(A[i] + T.float32(1)))
                    with T.block("A"):
                        vi = T.axis.spatial(4, i)
                        A[vi] = A[vi] + T.float32(1)
        kiln.build(Bad, target="llvm")


def test_prefetch_has_no_value_of_its_arguments_type():
    A = CopyWithPrefetch["main"].params[0]
    assert Call("prefetch", (A[IntImm(0, "int32"), IntImm(0, "int32")],), "int32").dtype == "int32"
