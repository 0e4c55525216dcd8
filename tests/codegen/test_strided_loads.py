"""Vector loads with a small constant lane stride (2-4: stride-2 pools and convs) are contiguous
loads of the span plus shuffles, not gathers; they read the same elements (checked at
extents with a narrower last chunk, and right up to the end of the buffer)."""
import numpy as np

import kiln
from kiln.script import T


@kiln.script.ir_module
class Strided:
    @T.prim_func
    def main(A: T.Buffer((101,), "float32"), B: T.Buffer((4, 21), "float32")):
        for j in T.vectorized(21):
            with T.block("B"):
                vj = T.axis.spatial(21, j)
                B[0, vj] = A[2 * vj + 1]
                B[1, vj] = A[3 * vj]
                B[2, vj] = A[4 * vj + 20]     # the last lane reads A[100], the last element
                B[3, vj] = A[5 * vj]          # stride 5: still a gather


def test_strided_loads_read_the_right_elements():
    rt = kiln.build(Strided, target="llvm")
    a = np.arange(101, dtype="float32")
    b = kiln.nd.array(np.zeros((4, 21), "float32"))
    rt(kiln.nd.array(a), b)
    j = np.arange(21)
    np.testing.assert_array_equal(b.numpy(), np.stack([a[2 * j + 1], a[3 * j], a[4 * j + 20], a[5 * j]]))
