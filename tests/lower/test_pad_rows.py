"""pad_rows: a scratch buffer whose last extent is symbolic is allocated with its rows padded
to whole 64-byte lines (printed IR); constant-shaped buffers keep their shapes; the kernel
computes the same (compiled, vs numpy, for row lengths on and off a line)."""
from __future__ import annotations  # lets script annotations name symbolic sizes (n)

import numpy as np
import pytest

import kiln
from kiln.ir import Var
from kiln.lower import lower_prim_func
from kiln.lower.pad_rows import padded_row
from kiln.script import T


@kiln.script.ir_module
class Scaled:
    @T.prim_func
    def main(A: T.Buffer((4, n), "float32"), B: T.Buffer((4, n), "float32")):
        n = T.int32()
        S = T.alloc_buffer((4, n), "float32")
        H = T.alloc_buffer((4, n), "float16")
        C = T.alloc_buffer((4, 8), "float32")
        for i, j in T.grid(4, n):
            with T.block("S"):
                vi, vj = T.axis.remap("SS", [i, j])
                S[vi, vj] = A[vi, vj] * T.float32(2)
        for i, j in T.grid(4, n):
            with T.block("H"):
                vi, vj = T.axis.remap("SS", [i, j])
                H[vi, vj] = T.Cast("float16", S[vi, vj])
        for i, j in T.grid(4, 8):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = T.float32(1)
        for i, j in T.grid(4, n):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = T.Cast("float32", H[vi, vj]) + C[vi, vj % 8]


def test_symbolic_rows_are_padded_to_lines_and_constant_ones_stay():
    text = lower_prim_func(Scaled["main"]).script()
    assert 'T.alloc_buffer((4, (n + 15) // 16 * 16), "float32")' in text     # 16 floats a line
    assert 'T.alloc_buffer((4, (n + 31) // 32 * 32), "float16")' in text     # 32 halves
    assert 'T.alloc_buffer((4, 8), "float32")' in text


def test_padded_row_of_constants_and_odd_sizes():
    n = Var("n")
    assert padded_row(n, "float64") is not None
    assert padded_row((n + 63) // 64 * 64, "float32") is None           # whole lines already
    assert padded_row(kiln.ir.IntImm(60, "int32"), "float32") is None   # the schedule's tile
    assert padded_row(n, "int8") is not None
    assert padded_row(n, "int4") is None and padded_row(n, "bool") is None   # bits, not bytes


@pytest.mark.parametrize("n", [1, 15, 16, 17, 60])
def test_padded_kernel_computes_the_same(n):
    rt = kiln.build(Scaled, target="llvm")
    a = np.random.default_rng(n).standard_normal((4, n)).astype("float32")
    b = kiln.nd.array(np.full((4, n), np.nan, "float32"))
    rt(kiln.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), (a * 2).astype("float16").astype("float32") + 1, rtol=1e-6)
