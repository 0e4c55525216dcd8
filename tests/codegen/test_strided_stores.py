"""Vector stores whose lanes are a constant stride apart (a channel-blocked conv's write-back
into NCHW planes) are one scalar store per lane, not a scatter; they write the same elements
(negative strides, a narrower last chunk, a masked chunk that still scatters)."""
import numpy as np

import kiln
from kiln.script import T


@kiln.script.ir_module
class StridedStores:
    @T.prim_func
    def main(A: T.Buffer((21,), "float32"), B: T.Buffer((130,), "float32"),
             C: T.Buffer((130,), "float32"), D: T.Buffer((50,), "float32")):
        for j in T.vectorized(21):
            with T.block("B"):
                vj = T.axis.spatial(21, j)
                B[6 * vj + 3] = A[vj]             # stride 6, 16 + 5 lanes
                C[129 - 6 * vj] = A[vj] * 2.0     # stride -6
        for j in T.vectorized(21):
            with T.block("D"):
                vj = T.axis.spatial(21, j)
                if vj < 10:                       # lane mask: a masked scatter
                    D[5 * vj] = A[vj]


def test_strided_stores_write_the_right_elements():
    rt = kiln.build(StridedStores, target="llvm")
    a = np.arange(1, 22, dtype="float32")
    b, c, d = (kiln.nd.array(np.zeros(n, "float32")) for n in (130, 130, 50))
    rt(kiln.nd.array(a), b, c, d)
    j = np.arange(21)
    want_b, want_c, want_d = np.zeros(130, "float32"), np.zeros(130, "float32"), np.zeros(50, "float32")
    want_b[6 * j + 3] = a
    want_c[129 - 6 * j] = 2 * a
    want_d[5 * j[:10]] = a[:10]
    np.testing.assert_array_equal(b.numpy(), want_b)
    np.testing.assert_array_equal(c.numpy(), want_c)
    np.testing.assert_array_equal(d.numpy(), want_d)
