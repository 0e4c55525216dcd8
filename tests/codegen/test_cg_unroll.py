"""Who unrolls an ``unrolled`` loop (``FuncLowerer._unrolled``): LLVM, from one copy of the body
marked ``llvm.loop.unroll.full``, unless the body is of the two kinds codegen copies itself
(``FuncLowerer._copies_here``). A register tile unrolled by LLVM still ends in registers, and a
one-iteration loop's index (a batch of 1) is a constant inside the parallel body it encloses."""
import re

import numpy as np

import kiln
from kiln.codegen.emit import compile_module, lower_to_llvm
from kiln.ir.expr import Var

from cg_irbuild import buf, matmul_tiled, nest, prim_func, realize, store


def test_register_tile_unrolled_by_llvm_is_kept_in_registers():
    f = matmul_tiled(8, 32, 16)
    before = str(lower_to_llvm(f, "llvm")[0])
    assert "llvm.loop.unroll.full" in before and '%"acc" = alloca' in before
    after = compile_module(f, "llvm").llvm_ir()
    assert [line.strip() for line in after.splitlines() if " alloca " in line] == \
        ["%closure.i = alloca { i64, i64, ptr, ptr, ptr, ptr }, align 8"]   # no tile left


def _batch_of_one(n_extent):
    """out[n, i, j] = 2 * x[n, i, j] with n outermost (serial), i parallel, j vectorized."""
    x, out = buf("x", (n_extent, 4, 16)), buf("out", (n_extent, 4, 16))
    n, i, j = Var("n"), Var("i"), Var("j")
    body = realize("E", [("S", n_extent, n), ("S", 4, i), ("S", 16, j)],
                   lambda a, b, c: store(out, x[a, b, c] * 2.0, a, b, c))
    return prim_func([x, out], nest([(n, n_extent, "serial"), (i, 4, "parallel"), (j, 16, "vectorized")], body))


def _impl_params(text):
    sig = re.search(r'define internal i32 @"[^"]*\.par\d*\.impl"\(([^)]*)\)', text).group(1)
    return len(sig.split(","))


def test_one_iteration_loop_index_is_a_constant_in_the_parallel_body():
    one = str(lower_to_llvm(_batch_of_one(1), "llvm")[0])
    two = str(lower_to_llvm(_batch_of_one(2), "llvm")[0])
    # (ctx, begin, end, x, out): n is passed to the outlined body only when it varies
    assert _impl_params(one) == 5 and _impl_params(two) == 6
    for n in (1, 2):
        rt = kiln.build(_batch_of_one(n), target="llvm")
        x = np.random.default_rng(n).standard_normal((n, 4, 16)).astype("float32")
        out = kiln.nd.empty((n, 4, 16), "float32")
        rt(kiln.nd.array(x), out)
        np.testing.assert_array_equal(out.numpy(), 2 * x)
