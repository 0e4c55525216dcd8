"""Parallel loops: outlined task functions run through ``ctx->parallel_launch``, serially when
ctx is NULL; task counts, chunking, nesting, per-task scratch, and status propagation."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.ir import FloatImm, Var, seq

from cg_irbuild import buf, elementwise, nest, prim_func, realize, store
from cg_harness import serial_ctx, threaded_ctx


def scale_kernel(n_sym=True):
    """B[i] = A[i] * 2 + i over a symbolic n, the loop parallel."""
    n = Var("n") if n_sym else 1000
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    body = realize("B", [("S", n, i)], lambda vi: store(B, A[vi] * 2.0 + vi.astype("float32"), vi))
    return prim_func([A, B], nest([(i, n, "parallel")], body))


@pytest.fixture(scope="module")
def scale_lib(build):
    return build(scale_kernel())


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 1000, 4097])
@pytest.mark.parametrize("ctx_kind", ["null", "serial", "threaded"])
def test_parallel_loop_runs_every_iteration_once(scale_lib, n, ctx_kind):
    ctx = {"null": None, "serial": serial_ctx(4), "threaded": threaded_ctx(4)}[ctx_kind]
    a = np.random.default_rng(n).random(n).astype("float32")
    b = np.full(n, np.nan, "float32")
    assert scale_lib.call("main", a, b, ctx=ctx) == 0
    np.testing.assert_allclose(b, a * 2 + np.arange(n), rtol=1e-6)
    if ctx_kind == "serial":
        # n = 0 launches nothing; otherwise min(n, num_threads) tasks
        assert ctx.launches == ([] if n == 0 else [min(n, 4)])


def test_tasks_run_on_several_threads(scale_lib):
    ctx = threaded_ctx(4)
    n = 1 << 16
    a = np.ones(n, "float32")
    b = np.zeros(n, "float32")
    for _ in range(5):
        assert scale_lib.call("main", a, b, ctx=ctx) == 0
    assert len(ctx.threads) >= 2
    np.testing.assert_allclose(b, 2 + np.arange(n), rtol=1e-6)


def test_launch_failure_is_returned(scale_lib):
    a = np.ones(10, "float32")
    assert scale_lib.call("main", a, np.zeros(10, "float32"), ctx=serial_ctx(2, fail_with=7)) == 7


def test_nested_parallel_loops(build):
    """An inner parallel loop is launched from inside a task (the runtime runs it serially)."""
    M, N = 6, 40
    A, B = buf("A", (M, N)), buf("B", (M, N))
    i, j = Var("i"), Var("j")
    body = realize("B", [("S", M, i), ("S", N, j)], lambda vi, vj: store(B, A[vi, vj] + vi.astype("float32"), vi, vj))
    lib = build(prim_func([A, B], nest([(i, M, "parallel"), (j, N, "parallel")], body)))
    a = np.random.default_rng(0).random((M, N)).astype("float32")
    for ctx in (None, serial_ctx(3), threaded_ctx(3)):
        b = np.zeros((M, N), "float32")
        assert lib.call("main", a, b, ctx=ctx) == 0
        np.testing.assert_allclose(b, a + np.arange(M)[:, None], rtol=1e-6)
    ctx = serial_ctx(3)
    lib.call("main", a, np.zeros((M, N), "float32"), ctx=ctx)
    assert ctx.launches == [3] + [3] * M  # one outer launch, one per row for the inner loop


def test_parallel_with_symbolic_scratch_per_task(build):
    """Each task gets its own heap scratch (shape depends on symbolic m), freed on return."""
    n, m = Var("n"), Var("m")
    A, B = buf("A", (n, m)), buf("B", (n,))
    tmp = buf("tmp", (m,))
    i, j, k = Var("i"), Var("j"), Var("k")
    sq = realize("sq", [("S", m, j)], lambda vj: store(tmp, A[i, vj] * A[i, vj], vj))
    sm = realize("sum", [("S", n, i), ("R", m, k)], lambda vi, vk: store(B, B[vi] + tmp[vk], vi),
                 init_fn=lambda vi, vk: store(B, FloatImm(0.0), vi))
    row = realize("row", [], lambda: seq(nest([(j, m, "vectorized")], sq), nest([(k, m, "serial")], sm)),
                  allocs=[tmp])
    lib = build(prim_func([A, B], nest([(i, n, "parallel")], row)))
    for rows, cols in [(1, 1), (7, 3000), (33, 17)]:
        a = np.random.default_rng(rows).random((rows, cols)).astype("float32")
        for ctx in (None, threaded_ctx(4)):
            b = np.zeros(rows, "float32")
            assert lib.call("main", a, b, ctx=ctx) == 0
            np.testing.assert_allclose(b, (a * a).sum(axis=1), rtol=1e-4)


def test_parallel_outer_vectorized_inner_against_evaluator(check):
    n = 203
    A, B = buf("A", (n,)), buf("B", (n,))
    func = elementwise(n, [A], B, lambda a: a * a - 1.0, "parallel_split", factor=16)
    a = np.random.default_rng(1).random(n).astype("float32")
    for ctx in (None, serial_ctx(5), threaded_ctx(2)):
        check(func, a, np.zeros(n, "float32"), ctx=ctx, expected=[None, a * a - 1])


@pytest.fixture(scope="module")
def least_lib(build):
    """scale_kernel's loop with ``kiln.parallel_min_extent`` 8."""
    from kiln.ir import For, PARALLEL_MIN_EXTENT, PrimFunc, transform
    func = scale_kernel()

    def annotate(n):
        if isinstance(n, For) and n.kind == "parallel":
            return For(n.loop_var, n.min, n.extent, n.kind, n.body, None, ((PARALLEL_MIN_EXTENT, 8),))
        return None
    return build(PrimFunc(func.params, transform(func.body, annotate), func.attrs))


@pytest.mark.parametrize("n, launches", [(0, []), (1, []), (7, []), (8, [4]), (1000, [4])])
def test_a_parallel_loop_shorter_than_its_least_extent_runs_on_the_caller(least_lib, n, launches):
    """Below 8 iterations the loop runs as one task on the calling thread: the pool's launch is
    not called; from 8 on it is, with a task per thread."""
    ctx = serial_ctx(4)
    a = np.random.default_rng(n).random(n).astype("float32")
    b = np.full(n, np.nan, "float32")
    assert least_lib.call("main", a, b, ctx=ctx) == 0
    np.testing.assert_allclose(b, a * 2 + np.arange(n), rtol=1e-6)
    assert ctx.launches == launches
