"""Tensor programs compiled under schedules that use every primitive, run through the runtime,
compared with numpy and with the reference evaluator; and the errors a caller gets."""
import numpy as np
import pytest

import kiln
from kiln import te

RNG = np.random.default_rng(0)


def _module(*tensors):
    return kiln.IRModule({"main": te.create_prim_func(list(tensors))})


def _check(mod, inputs, expected, rtol=1e-5, atol=1e-5):
    """Build ``mod``, run it on ``inputs`` + fresh outputs, compare with ``expected`` (numpy)
    and with the reference evaluator on the same inputs."""
    rt = kiln.build(mod, target="llvm")
    outs = [kiln.nd.empty(e.shape, str(e.dtype)) for e in expected]
    rt(*[kiln.nd.array(x) for x in inputs], *outs)
    ref = [np.zeros_like(e) for e in expected]
    kiln.evaluate(mod, *[x.copy() for x in inputs], *ref)
    for got, want, by_eval in zip(outs, expected, ref):
        np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol)
        np.testing.assert_allclose(got.numpy(), by_eval, rtol=rtol, atol=atol)


# ---- elementwise ---------------------------------------------------------------------------
def _elementwise():
    A = te.placeholder((24, 40), "float32", name="A")
    B = te.compute((24, 40), lambda i, j: te.exp(A[i, j]) * 2.0 + 1.0, name="B")
    return _module(A, B)


def _ew_split_vectorize_parallel(sch):
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.parallel(i)
    sch.vectorize(j1)


def _ew_fuse_split(sch):
    i, j = sch.get_loops(sch.get_block("B"))
    f = sch.fuse(i, j)
    f0, f1, f2 = sch.split(f, factors=[None, 4, 16])
    sch.parallel(f0)
    sch.unroll(f1)
    sch.vectorize(f2)


def _ew_guarded_split(sch):
    i, j = sch.get_loops(sch.get_block("B"))
    j0, j1 = sch.split(j, factors=[None, 16])  # 40 is not a multiple of 16: a guard
    sch.reorder(j0, i, j1)
    sch.vectorize(j1)


@pytest.mark.parametrize("schedule", [None, _ew_split_vectorize_parallel, _ew_fuse_split,
                                      _ew_guarded_split])
def test_elementwise(schedule):
    mod = _elementwise()
    if schedule:
        sch = kiln.Schedule(mod)
        schedule(sch)
        mod = sch.mod
    a = RNG.standard_normal((24, 40), dtype=np.float32)
    _check(mod, [a], [np.exp(a) * 2 + 1])


def test_reverse_compute_inline_of_an_elementwise_consumer():
    A = te.placeholder((16, 32), "float32", name="A")
    B = te.compute((16, 32), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((16, 32), lambda i, j: te.max(B[i, j] + 1.0, 0.0), name="C")
    sch = kiln.Schedule(_module(A, C))
    sch.reverse_compute_inline(sch.get_block("C"))
    (i, j) = sch.get_loops(sch.get_block("B"))
    sch.vectorize(j)
    a = RNG.standard_normal((16, 32), dtype=np.float32)
    _check(sch.mod, [a], [np.maximum(a * 2 + 1, 0)])


# ---- reduction -----------------------------------------------------------------------------
def _row_sum():
    A = te.placeholder((32, 100), "float32", name="A")
    k = te.reduce_axis((0, 100), name="k")
    S = te.compute((32,), lambda i: te.sum(A[i, k], axis=k), name="S")
    return _module(A, S)


def _rs_split_k(sch):
    i, k = sch.get_loops(sch.get_block("S"))
    k0, k1 = sch.split(k, factors=[None, 8])  # guarded: 100 = 12 * 8 + 4
    sch.parallel(i)
    sch.unroll(k1)


def _rs_cache_write_decompose(sch):
    s = sch.get_block("S")
    i, k = sch.get_loops(s)
    i0, i1 = sch.split(i, factors=[None, 8])
    sch.reorder(i0, k, i1)
    wb = sch.cache_write(s, 0, "local")
    sch.reverse_compute_at(wb, i0)
    sch.decompose_reduction(s, k)
    sch.vectorize(i1)
    sch.parallel(i0)


@pytest.mark.parametrize("schedule", [None, _rs_split_k, _rs_cache_write_decompose])
def test_reduction(schedule):
    mod = _row_sum()
    if schedule:
        sch = kiln.Schedule(mod)
        schedule(sch)
        mod = sch.mod
    a = RNG.standard_normal((32, 100), dtype=np.float32)
    _check(mod, [a], [a.sum(axis=1)], rtol=1e-4, atol=1e-4)


# ---- softmax -------------------------------------------------------------------------------
def _softmax(n=8, m=64):
    X = te.placeholder((n, m), "float32", name="X")
    k1 = te.reduce_axis((0, m), name="k1")
    M = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="M")
    E = te.compute((n, m), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    k2 = te.reduce_axis((0, m), name="k2")
    S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((n, m), lambda i, j: E[i, j] / S[i], name="Y")
    return _module(X, Y)


def _sm_fused_rows(sch):
    (i, j) = sch.get_loops(sch.get_block("Y"))
    sch.parallel(i)
    for name in ("S", "E", "M"):
        sch.compute_at(sch.get_block(name), i)
    sch.vectorize(sch.get_loops(sch.get_block("Y"))[-1])
    sch.vectorize(sch.get_loops(sch.get_block("E"))[-1])


def _sm_inline_exp(sch):
    sch.compute_inline(sch.get_block("E"))
    i, j = sch.get_loops(sch.get_block("Y"))
    sch.vectorize(j)


@pytest.mark.parametrize("schedule", [None, _sm_fused_rows, _sm_inline_exp])
def test_softmax(schedule):
    mod = _softmax()
    if schedule:
        sch = kiln.Schedule(mod)
        schedule(sch)
        mod = sch.mod
    x = RNG.standard_normal((8, 64), dtype=np.float32) * 4
    e = np.exp(x - x.max(axis=1, keepdims=True))
    _check(mod, [x], [e / e.sum(axis=1, keepdims=True)], rtol=1e-5, atol=1e-6)


# ---- matmul --------------------------------------------------------------------------------
def _matmul(n=64):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return _module(A, B, C)


def _mm_register_tile(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, j0)
    sch.decompose_reduction(c, k)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.parallel(i0)


def _mm_cache_read_a_tile(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 8])
    sch.reorder(i0, j, k, i1)
    a_local = sch.cache_read(c, 0, "local")
    sch.compute_at(a_local, i0)
    sch.unroll(i1)


@pytest.mark.parametrize("schedule", [None, _mm_register_tile, _mm_cache_read_a_tile])
def test_matmul(schedule):
    mod = _matmul()
    if schedule:
        sch = kiln.Schedule(mod)
        schedule(sch)
        mod = sch.mod
    a = RNG.standard_normal((64, 64), dtype=np.float32)
    b = RNG.standard_normal((64, 64), dtype=np.float32)
    _check(mod, [a, b], [a @ b], rtol=1e-4, atol=1e-4)


def test_benchmark_matmul_schedule_is_correct():
    import sys, pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))
    import matmul as bench_matmul
    a = RNG.standard_normal((50, 48), dtype=np.float32)
    b = RNG.standard_normal((48, 80), dtype=np.float32)
    for const in (True, False):
        f, sched = bench_matmul._compiled(bench_matmul.matmul_module(50, 48, 80, b if const else None))
        assert sched.startswith("matmul: tile"), sched
        got = f(*([kiln.nd.array(a)] + ([] if const else [kiln.nd.array(b)]))).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


# ---- conv2d --------------------------------------------------------------------------------
def _conv2d(n=1, ci=3, h=10, w=10, co=4, kh=3, kw=3, pad=1):
    X = te.placeholder((n, ci, h, w), "float32", name="X")
    W = te.placeholder((co, ci, kh, kw), "float32", name="W")
    P = te.compute((n, ci, h + 2 * pad, w + 2 * pad), lambda b, c, y, x: te.if_then_else(
        (y >= pad) & (y < h + pad) & (x >= pad) & (x < w + pad), X[b, c, y - pad, x - pad], 0.0),
        name="P")
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    oh, ow = h + 2 * pad - kh + 1, w + 2 * pad - kw + 1
    Y = te.compute((n, co, oh, ow), lambda b, f, y, x: te.sum(
        P[b, rc, y + ry, x + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    return _module(X, W, Y)


def _conv_inline_pad_tile(sch):
    sch.compute_inline(sch.get_block("P"))
    y = sch.get_block("Y")
    b, f, yy, xx, rc, ry, rx = sch.get_loops(y)
    x0, x1 = sch.split(xx, factors=[None, 5])
    sch.reorder(b, f, yy, x0, rc, ry, rx, x1)
    wb = sch.cache_write(y, 0, "local")
    sch.reverse_compute_at(wb, x0)
    sch.decompose_reduction(y, rc)
    sch.parallel(f)
    sch.vectorize(x1)


def _conv_pad_at_row(sch):
    y = sch.get_block("Y")
    b, f, yy, xx, rc, ry, rx = sch.get_loops(y)
    sch.compute_at(sch.get_block("P"), b)
    sch.unroll(rx)


def _ref_conv(x, w, pad=1):
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, co, h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1), np.float32)
    for dy in range(kh):
        for dx in range(kw):
            patch = xp[:, :, dy:dy + out.shape[2], dx:dx + out.shape[3]]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, dy, dx])
    return out


@pytest.mark.parametrize("schedule", [None, _conv_inline_pad_tile, _conv_pad_at_row])
def test_conv2d(schedule):
    mod = _conv2d()
    if schedule:
        sch = kiln.Schedule(mod)
        schedule(sch)
        mod = sch.mod
    x = RNG.standard_normal((1, 3, 10, 10), dtype=np.float32)
    w = RNG.standard_normal((4, 3, 3, 3), dtype=np.float32)
    _check(mod, [x, w], [_ref_conv(x, w)], rtol=1e-4, atol=1e-4)


# ---- errors --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def add_one():
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    return kiln.build(_module(A, B), target="llvm")


@pytest.mark.parametrize("args, message", [
    (lambda: (np.zeros(9, "float32"), np.zeros(8, "float32")),
     r"main: argument 0 'A' expected shape \(8,\), got \(9,\)"),
    (lambda: (np.zeros(8, "float64"), np.zeros(8, "float32")),
     r"main: argument 0 'A' expected dtype float32, got float64"),
    (lambda: (np.zeros((8, 1), "float32"), np.zeros(8, "float32")),
     r"main: argument 0 'A' expected shape \(8,\), got \(8, 1\)"),
    (lambda: (np.zeros(16, "float32")[::2], np.zeros(8, "float32")),
     r"main: argument 0 'A' is not contiguous"),
    (lambda: (np.zeros(8, "float32"),), r"main: expected 2 arguments, got 1"),
])
def test_bad_arguments_raise_with_a_clear_message(add_one, args, message):
    with pytest.raises(kiln.KilnError, match=message):
        add_one(*args())
