"""Loop kinds at their edges: extents that are symbolic, tiny, not a multiple of the lane count,
or long; loops not starting at 0; lane-varying and uniform conditions inside vectorized loops;
nested vectorized loops; narrow element types (more lanes)."""
from __future__ import annotations

import numpy as np
import pytest

from kiln import codegen
from kiln.ir import Call, FloatImm, For, IfThenElse, Select, Var

from cg_irbuild import buf, nest, prim_func, realize, store


def unary(n, kind, fn=lambda a: a * 3.0 - 1.0, dtype="float32", lo=0):
    """B[i] = fn(A[i]) for i in [lo, n) (B[:lo] untouched), one loop of ``kind``."""
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    i = Var("i")
    body = realize("B", [("S", n, i)], lambda vi: store(B, fn(A[vi]), vi))
    return prim_func([A, B], For(i, lo, n - lo if lo else n, kind, body))


@pytest.mark.parametrize("kind", ["serial", "vectorized", "unrolled", "parallel"])
def test_symbolic_extent(build, kind):
    n = Var("n")
    lib = build(unary(n, kind))
    for size in (0, 1, 2, 7, 8, 9, 31, 33, 1000):
        a = np.random.default_rng(size).random(size).astype("float32")
        b = np.zeros(size, "float32")
        assert lib.call("main", a, b) == 0
        np.testing.assert_allclose(b, a * 3 - 1, rtol=1e-6, atol=1e-6)  # a*3-1 may be one FMA


@pytest.mark.parametrize("n", [1, 3, 8, 12, 37, 64, 300, 1000])
@pytest.mark.parametrize("kind", ["vectorized", "unrolled"])
def test_constant_extents(check, n, kind):
    a = np.random.default_rng(n).random(n).astype("float32")
    check(unary(n, kind), a, np.zeros(n, "float32"), expected=[None, a * 3 - 1])


@pytest.mark.parametrize("kind", ["serial", "vectorized", "unrolled"])
def test_loop_not_starting_at_zero(check, kind):
    n = 29
    a = np.random.default_rng(2).random(n).astype("float32")
    want = np.zeros(n, "float32")
    want[5:] = a[5:] * 3 - 1
    check(unary(n, kind, lo=5), a, np.zeros(n, "float32"), expected=[None, want])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "float16", "float64", "int64"])
def test_vectorized_narrow_and_wide_types(check, dtype):
    n = 77
    a = (np.random.default_rng(3).random(n) * 50).astype(dtype)
    one = np.asarray(1, dtype)
    func = unary(n, "vectorized", fn=lambda x: x * x + x.astype(dtype) - x, dtype=dtype)
    with np.errstate(all="ignore"):
        check(func, a, np.zeros(n, dtype), expected=[None, (a * a).astype(dtype) * one])


def test_lane_varying_if_then_else(check):
    """if A[i] > 0.5: B[i] = exp(A[i]) else: B[i] = -A[i], vectorized: two masked regions."""
    n = 45
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    body = realize("B", [("S", n, i)], lambda vi: IfThenElse(A[vi] > 0.5, store(B, Call("exp", (A[vi],)), vi),
                                                           store(B, -A[vi], vi)))
    a = np.random.default_rng(4).random(n).astype("float32")
    for kind in ("serial", "vectorized"):
        check(prim_func([A, B], nest([(i, n, kind)], body)), a, np.zeros(n, "float32"),
              expected=[None, np.where(a > 0.5, np.exp(a), -a)])


def test_uniform_condition_inside_vectorized_loop(check):
    """A condition on the outer loop only: a branch around the vector code, no masks."""
    m, n = 6, 24
    A, B = buf("A", (m, n)), buf("B", (m, n))
    i, j = Var("i"), Var("j")
    body = realize("B", [("S", m, i), ("S", n, j)],
                   lambda vi, vj: IfThenElse(vi % 2 == 0, store(B, A[vi, vj] * 2.0, vi, vj),
                                             store(B, Select(A[vi, vj] > 0.5, A[vi, vj], FloatImm(0.0)), vi, vj)))
    func = prim_func([A, B], nest([(i, m, "serial"), (j, n, "vectorized")], body))
    a = np.random.default_rng(5).random((m, n)).astype("float32")
    want = np.where(np.arange(m)[:, None] % 2 == 0, a * 2, np.where(a > 0.5, a, 0))
    check(func, a, np.zeros((m, n), "float32"), expected=[None, want])
    assert "vmaskmov" not in codegen.compile_module(func, "llvm -mcpu=haswell").assembly()


def test_nested_vectorized_loops_fall_back_with_a_note(check):
    m, n = 5, 16
    A, B = buf("A", (m, n)), buf("B", (m, n))
    i, j = Var("i"), Var("j")
    body = realize("B", [("S", m, i), ("S", n, j)], lambda vi, vj: store(B, A[vi, vj] + 1.0, vi, vj))
    func = prim_func([A, B], nest([(i, m, "vectorized"), (j, n, "vectorized")], body))
    notes = codegen.compile_module(func).notes
    assert len(notes) == 1 and "loop 'i'" in notes[0] and "vectorized loop 'j'" in notes[0]
    a = np.random.default_rng(6).random((m, n)).astype("float32")
    check(func, a, np.zeros((m, n), "float32"), expected=[None, a + 1])


def test_loop_carried_dependence_is_not_vectorized_blindly(check):
    """B[i] = B[i - 1] + A[i] (a prefix sum) marked vectorized: codegen must not run the lanes
    in parallel; LLVM's vectorizer (which checks dependences) gets it, with a note."""
    n = 40
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    body = realize("B", [("S", n - 1, i)], lambda vi: store(B, B[vi] + A[vi + 1], vi + 1))
    func = prim_func([A, B], nest([(i, n - 1, "vectorized")], body))
    assert any("different indices" in note for note in codegen.compile_module(func).notes)
    a = np.random.default_rng(7).random(n).astype("float32")
    b = np.zeros(n, "float32")
    b[0] = a[0]
    check(func, a, b, expected=[None, np.cumsum(a)], rtol=1e-5)
