"""Kiln in one page: write a tensor program, schedule it, compile it to machine code, run it.

Run: .venv/bin/python examples/quickstart.py   (or `make`, which builds everything first)
"""
import numpy as np

import kiln
from kiln import te
from kiln.script import T


# 1. A tensor program in script syntax: B = A + 1.
@kiln.script.ir_module
class MyModule:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] + 1.0


# The printed script parses back to an equal module.
assert kiln.ir.structural_equal(kiln.script.parse(MyModule.script()), MyModule)

# 2. Schedule it: split the loop in three and reorder; the trace records what was done.
sch = kiln.Schedule(MyModule)
(i,) = sch.get_loops(sch.get_block("B"))
i0, i1, i2 = sch.split(i, factors=[2, 2, 2])
sch.reorder(i0, i2, i1)
print(sch.mod.script())
print(sch.trace)

# 3. Compile for this CPU and run.
rt = kiln.build(sch.mod, target="llvm")
a = kiln.nd.array(np.arange(8, dtype="float32"))
b = kiln.nd.empty((8,), "float32")
rt(a, b)
np.testing.assert_allclose(b.numpy(), np.arange(8, dtype="float32") + 1)
print("B =", b.numpy())

# 4. The same with tensor expressions: a matmul, tiled and vectorized, against numpy.
n = 128
A = te.placeholder((n, n), "float32", name="A")
W = te.placeholder((n, n), "float32", name="W")
k = te.reduce_axis((0, n), name="k")
C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
sch = kiln.Schedule(kiln.ir.IRModule({"main": te.create_prim_func([A, W, C])}))
i, j, kk = sch.get_loops(sch.get_block("C"))
i0, i1 = sch.split(i, factors=[None, 4])
j0, j1 = sch.split(j, factors=[None, 16])
sch.reorder(i0, j0, kk, i1, j1)
sch.parallel(i0)
sch.unroll(i1)
sch.vectorize(j1)
matmul = kiln.build(sch.mod, target="llvm")
a_np = np.random.rand(n, n).astype("float32")
w_np = np.random.rand(n, n).astype("float32")
c = kiln.nd.empty((n, n), "float32")
matmul(kiln.nd.array(a_np), kiln.nd.array(w_np), c)
np.testing.assert_allclose(c.numpy(), a_np @ w_np, rtol=1e-4, atol=1e-4)
print(f"matmul {n}x{n}x{n}: matches numpy")
