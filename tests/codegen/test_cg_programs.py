"""Whole tensor programs, compiled and compared with numpy and the reference evaluator, each
under several hand-built loop structures: plain loops, split index arithmetic with tail
predicates, fused loops (// and % bindings: gathers), unrolled and vectorized inner loops,
parallel outer loops, scratch buffers local to a block (stack) or symbolically sized (heap)."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.ir import Call, FloatImm, IntImm, Max, Select, Var, seq

from cg_irbuild import buf, matmul_tiled, nest, prim_func, realize, store

rng = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


# ---- elementwise add (2-D) and broadcast ---------------------------------------------------

M, N = 13, 37


def add2d(structure):
    A, B, C = buf("A", (M, N)), buf("B", (M, N)), buf("C", (M, N))

    def body(vi, vj):
        return store(C, A[vi, vj] + B[vi, vj], vi, vj)

    i, j, j0, j1, f, f0, f1 = (Var(s) for s in ("i", "j", "j0", "j1", "f", "f0", "f1"))
    if structure == "serial":
        s = nest([(i, M, "serial"), (j, N, "serial")], realize("C", [("S", M, i), ("S", N, j)], body))
    elif structure == "parallel_split_vec":
        s = nest([(i, M, "parallel"), (j0, 5, "serial"), (j1, 8, "vectorized")],
                 realize("C", [("S", M, i), ("S", N, j0 * 8 + j1)], body, predicate=j0 * 8 + j1 < N))
    elif structure == "split_unroll":
        s = nest([(i, M, "serial"), (j0, 10, "serial"), (j1, 4, "unrolled")],
                 realize("C", [("S", M, i), ("S", N, j0 * 4 + j1)], body, predicate=j0 * 4 + j1 < N))
    else:  # fused and re-split: the vectorized loop's indices are // and %: gathers/scatters
        fused = f0 * 16 + f1
        s = nest([(f0, (M * N + 15) // 16, "parallel"), (f1, 16, "vectorized")],
                 realize("C", [("S", M, fused // N), ("S", N, fused % N)], body, predicate=fused < M * N))
    return prim_func([A, B, C], s)


@pytest.mark.parametrize("structure", ["serial", "parallel_split_vec", "split_unroll", "fused_vec"])
def test_elementwise_add(check, structure):
    a, b = rand(M, N), rand(M, N)
    check(add2d(structure), a, b, np.zeros((M, N), "float32"), expected=[None, None, a + b])


@pytest.mark.parametrize("structure", ["serial", "vectorized"])
def test_broadcast(check, structure):
    """C[i, j] = A[i, j] * scale[i] + bias[j]: scale is loop-invariant in the vectorized j loop
    (a splatted scalar load), bias contiguous."""
    A, scale, bias, C = buf("A", (M, N)), buf("scale", (M,)), buf("bias", (N,)), buf("C", (M, N))
    i, j = Var("i"), Var("j")
    body = realize("C", [("S", M, i), ("S", N, j)],
                   lambda vi, vj: store(C, A[vi, vj] * scale[vi] + bias[vj], vi, vj))
    func = prim_func([A, scale, bias, C], nest([(i, M, "serial"), (j, N, structure)], body))
    a, s, bi = rand(M, N), rand(M), rand(N)
    check(func, a, s, bi, np.zeros((M, N), "float32"), expected=[None, None, None, a * s[:, None] + bi])


# ---- reduction: B[i] = sum_k A[i, k] --------------------------------------------------------

R, K = 9, 50


def row_sum(structure):
    A, B = buf("A", (R, K)), buf("B", (R,))
    i, k, k0, k1 = Var("i"), Var("k"), Var("k0"), Var("k1")

    def block(vk_binding, pred=True):
        return realize("B", [("S", R, i), ("R", K, vk_binding)],
                       lambda vi, vk: store(B, B[vi] + A[vi, vk], vi),
                       init_fn=lambda vi, vk: store(B, FloatImm(0.0), vi), predicate=pred)

    if structure == "serial":
        s = nest([(i, R, "serial"), (k, K, "serial")], block(k))
    elif structure == "vectorized_rows":  # i vectorized, the k loop inside it: strided gathers
        s = nest([(i, R, "vectorized"), (k, K, "serial")], block(k))
    elif structure == "vectorized_reduction":  # left to LLVM's vectorizer, with a note
        s = nest([(i, R, "parallel"), (k, K, "vectorized")], block(k))
    elif structure == "parallel_unrolled":
        s = nest([(i, R, "parallel"), (k0, 13, "serial"), (k1, 4, "unrolled")], block(k0 * 4 + k1, k0 * 4 + k1 < K))
    else:  # accumulate in a local scratch buffer, then write out
        acc = buf("acc", (1,), "float32", "local")
        upd = realize("acc", [("S", R, i), ("R", K, k)], lambda vi, vk: store(acc, acc[0] + A[vi, vk], 0),
                      init_fn=lambda vi, vk: store(acc, FloatImm(0.0), 0))
        out = realize("out", [("S", R, i)], lambda vi: store(B, acc[0], vi))
        s = nest([(i, R, "parallel")], realize("row", [], lambda: seq(nest([(k, K, "serial")], upd), out),
                                                 allocs=[acc]))
    return prim_func([A, B], s)


@pytest.mark.parametrize("structure", ["serial", "vectorized_rows", "vectorized_reduction",
                                       "parallel_unrolled", "local_accumulator"])
def test_reduction_with_init(check, structure):
    a = rand(R, K)
    check(row_sum(structure), a, np.full(R, 7.0, "float32"), expected=[None, a.sum(axis=1)], rtol=1e-5, atol=1e-5)


def test_vectorized_reduction_is_noted(build):
    from kiln import codegen
    cm = codegen.compile_module(row_sum("vectorized_reduction"))
    assert any("loop 'k'" in n and "reduction iterator" in n for n in cm.notes), cm.notes


# ---- softmax over rows ------------------------------------------------------------------------

def softmax(rows, cols, structure):
    """max, exp(x - max) into a scratch row, sum, divide: four blocks per row."""
    X, Y = buf("X", (rows, cols)), buf("Y", (rows, cols))
    i, j, j0, j1 = Var("i"), Var("j"), Var("j0"), Var("j1")
    per_row = structure != "serial"
    mx = buf("mx", (1,), "float32", "local") if per_row else buf("mx", (rows,))
    sm = buf("sm", (1,), "float32", "local") if per_row else buf("sm", (rows,))
    E = buf("E", (cols,)) if per_row else buf("E", (rows, cols))
    r = (lambda vi: (0,)) if per_row else (lambda vi: (vi,))
    e = (lambda vi, vj: (vj,)) if per_row else (lambda vi, vj: (vi, vj))
    vec = "vectorized" if per_row else "serial"
    b_max = realize("max", [("S", rows, i), ("R", cols, j)],
                    lambda vi, vj: store(mx, Max(mx[r(vi)], X[vi, vj]), *r(vi)),
                    init_fn=lambda vi, vj: store(mx, FloatImm(float("-inf")), *r(vi)))
    b_exp = realize("exp", [("S", rows, i), ("S", cols, j)],
                    lambda vi, vj: store(E, Call("exp", (X[vi, vj] - mx[r(vi)],)), *e(vi, vj)))
    b_sum = realize("sum", [("S", rows, i), ("R", cols, j)],
                    lambda vi, vj: store(sm, sm[r(vi)] + E[e(vi, vj)], *r(vi)),
                    init_fn=lambda vi, vj: store(sm, FloatImm(0.0), *r(vi)))
    split = j0 * 8 + j1
    b_div = realize("div", [("S", rows, i), ("S", cols, split)],
                    lambda vi, vj: store(Y, E[e(vi, vj)] / sm[r(vi)], vi, vj), predicate=split < cols)
    row = seq(nest([(j, cols, "serial")], b_max), nest([(j, cols, vec)], b_exp),
              nest([(j, cols, "serial")], b_sum), nest([(j0, (cols + 7) // 8, "serial"), (j1, 8, vec)], b_div))
    if per_row:
        body = nest([(i, rows, "parallel")], realize("row", [], lambda: row, allocs=[mx, sm, E]))
        return prim_func([X, Y], body)
    return prim_func([X, Y], nest([(i, rows, "serial")], row), allocs=[mx, sm, E])


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("structure", ["serial", "parallel_vectorized"])
def test_softmax(check, structure):
    x = rand(7, 53) * 5
    check(softmax(7, 53, structure), x, np.zeros_like(x), expected=[None, np_softmax(x)], rtol=1e-5, atol=1e-7)


def test_softmax_symbolic_shape_uses_heap_scratch(build, check):
    """Symbolic rows/cols: the per-row scratch row is heap-allocated once per parallel task."""
    n, m = Var("n"), Var("m")
    func = softmax(n, m, "parallel_vectorized")
    lib = build(func)
    assert lib.sym_names("main") == ["n", "m"]
    from cg_harness import serial_ctx, threaded_ctx
    for rows, cols, ctx in [(3, 1, None), (5, 17, serial_ctx()), (6, 1000, threaded_ctx(3)), (1, 20000, None)]:
        x = rand(rows, cols) * 3
        y = np.zeros_like(x)
        assert lib.call("main", x, y, ctx=ctx) == 0
        np.testing.assert_allclose(y, np_softmax(x), rtol=5e-5, atol=1e-8)  # serial sums of 20000
    check(func, rand(4, 11), np.zeros((4, 11), "float32"), rtol=1e-5, atol=1e-7)


# ---- matmul ---------------------------------------------------------------------------------

def matmul_naive(m, n, k, order="ijk", vec=False):
    A, B, C = buf("A", (m, k)), buf("B", (k, n)), buf("C", (m, n))
    i, j, r = Var("i"), Var("j"), Var("r")
    blk = realize("C", [("S", m, i), ("S", n, j), ("R", k, r)],
                  lambda vi, vj, vk: store(C, C[vi, vj] + A[vi, vk] * B[vk, vj], vi, vj),
                  init_fn=lambda vi, vj, vk: store(C, FloatImm(0.0), vi, vj))
    loops = {"i": (i, m, "parallel" if vec else "serial"), "j": (j, n, "vectorized" if vec else "serial"),
             "k": (r, k, "serial")}
    return prim_func([A, B, C], nest([loops[c] for c in order], blk))


@pytest.mark.parametrize("variant", ["ijk", "ikj_vectorized", "tiled", "tiled_serial"])
def test_matmul(check, variant):
    m, n, k = (24, 32, 20) if variant.startswith("tiled") else (10, 19, 13)
    if variant == "ijk":
        func = matmul_naive(m, n, k)
    elif variant == "ikj_vectorized":  # init at k == 0 inside the k loop, j vectorized
        func = matmul_naive(m, n, k, "ikj", vec=True)
    else:
        func = matmul_tiled(m, n, k, mr=4, nr=16, parallel=variant == "tiled")
    a, b = rand(m, k), rand(k, n)
    check(func, a, b, np.full((m, n), np.nan, "float32"), expected=[None, None, a @ b], rtol=1e-5, atol=1e-5)


def test_tiled_matmul_float64(check):
    func = matmul_tiled(8, 8, 6, mr=2, nr=8, dtype="float64")
    a, b = rand(8, 6, dtype="float64"), rand(6, 8, dtype="float64")
    check(func, a, b, np.zeros((8, 8)), expected=[None, None, a @ b])


# ---- conv2d NCHW --------------------------------------------------------------------------------

def conv2d(cin, hw, cout, ks, pad, structure):
    """O[0, f, y, x] = sum_{c, ky, kx} P[c, y + ky, x + kx] * W[f, c, ky, kx], where P is the
    zero-padded input, built by a first block (Select with clamped, always-valid indices)."""
    I, Wt = buf("I", (1, cin, hw, hw)), buf("W", (cout, cin, ks, ks))
    ohw = hw + 2 * pad - ks + 1
    O = buf("O", (1, cout, ohw, ohw))
    ph = hw + 2 * pad
    P = buf("P", (cin, ph, ph))
    c, y, x, f, ky, kx, x0, x1 = (Var(s) for s in ("c", "y", "x", "f", "ky", "kx", "x0", "x1"))

    def pad_body(vc, vy, vx):
        inside = (vy >= pad) & (vy < hw + pad) & (vx >= pad) & (vx < hw + pad)
        zero = IntImm(0)
        cy = Max(vy - pad, zero) - Max(vy - pad - (hw - 1), zero)   # clamp into [0, hw - 1]
        cx = Max(vx - pad, zero) - Max(vx - pad - (hw - 1), zero)
        return store(P, Select(inside, I[0, vc, cy, cx], FloatImm(0.0)), vc, vy, vx)

    vec = structure != "serial"
    pad_nest = nest([(c, cin, "serial"), (y, ph, "serial"), (x, ph, "vectorized" if vec else "serial")],
                    realize("pad", [("S", cin, c), ("S", ph, y), ("S", ph, x)], pad_body))
    xs = x0 * 8 + x1 if structure == "split" else x

    def conv_body(vf, vy, vx, vc, vky, vkx):
        return store(O, O[0, vf, vy, vx] + P[vc, vy + vky, vx + vkx] * Wt[vf, vc, vky, vkx], 0, vf, vy, vx)

    conv = realize("conv", [("S", cout, f), ("S", ohw, y), ("S", ohw, xs), ("R", cin, c), ("R", ks, ky), ("R", ks, kx)],
                   conv_body, init_fn=lambda vf, vy, vx, *r: store(O, FloatImm(0.0), 0, vf, vy, vx),
                   predicate=xs < ohw if structure == "split" else True)
    if structure == "serial":
        loops = [(f, cout, "serial"), (y, ohw, "serial"), (x, ohw, "serial"), (c, cin, "serial"),
                 (ky, ks, "serial"), (kx, ks, "serial")]
    elif structure == "vectorized":  # x innermost and vectorized, reductions outside it
        loops = [(f, cout, "parallel"), (y, ohw, "serial"), (c, cin, "serial"), (ky, ks, "unrolled"),
                 (kx, ks, "unrolled"), (x, ohw, "vectorized")]
    else:  # x split by 8 with a tail, the reduction loops inside the vectorized x1 loop
        loops = [(f, cout, "parallel"), (y, ohw, "serial"), (x0, (ohw + 7) // 8, "serial"), (x1, 8, "vectorized"),
                 (c, cin, "serial"), (ky, ks, "serial"), (kx, ks, "serial")]
    return prim_func([I, Wt, O], seq(pad_nest, nest(loops, conv)), allocs=[P])


def np_conv2d(inp, w, pad):
    p = np.pad(inp[0], ((0, 0), (pad, pad), (pad, pad)))
    cout, cin, ks, _ = w.shape
    ohw = p.shape[1] - ks + 1
    out = np.zeros((1, cout, ohw, ohw), "float64")
    for ky in range(ks):
        for kx in range(ks):
            out[0] += np.einsum("chw,fc->fhw", p[:, ky:ky + ohw, kx:kx + ohw], w[:, :, ky, kx])
    return out


@pytest.mark.parametrize("pad", [0, 1])
@pytest.mark.parametrize("structure", ["serial", "vectorized", "split"])
def test_conv2d_nchw(check, structure, pad):
    cin, hw, cout, ks = 3, 10, 4, 3
    inp, w = rand(1, cin, hw, hw), rand(cout, cin, ks, ks)
    ohw = hw + 2 * pad - ks + 1
    check(conv2d(cin, hw, cout, ks, pad, structure), inp, w, np.zeros((1, cout, ohw, ohw), "float32"),
          expected=[None, None, np_conv2d(inp, w, pad)], rtol=1e-5, atol=1e-5)


# ---- ABI details ----------------------------------------------------------------------------------

def test_byte_offset_is_honoured(check):
    a, b = rand(M, N), rand(M, N)
    check(add2d("parallel_split_vec"), a, b, np.zeros((M, N), "float32"), expected=[None, None, a + b],
          byte_offset=12)


def test_te_program_with_schedule(check):
    """A program from kiln.te, scheduled with kiln.Schedule (split, vectorize, parallel)."""
    te = pytest.importorskip("kiln.te")
    import kiln
    n = 100
    A = te.placeholder((n, n), "float32", name="A")
    B = te.compute((n, n), lambda i, j: te.exp(A[i, j]) * 2.0 + A[j, i], name="B")
    sch = kiln.Schedule(kiln.ir.IRModule({"main": te.create_prim_func([A, B])}))
    blk = sch.get_block("B")
    i, j = sch.get_loops(blk)
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.vectorize(j1)
    sch.parallel(i)
    a = rand(n, n)
    check(sch.mod, a, np.zeros((n, n), "float32"), expected=[None, np.exp(a) * 2 + a.T], rtol=1e-5, atol=1e-6)


# ---- the same programs after kiln's lowering passes (what kiln.build compiles) ---------------------

LOWERED = {
    "add_fused": (lambda: add2d("fused_vec"), lambda: [rand(M, N), rand(M, N), np.zeros((M, N), "float32")]),
    "row_sum_unrolled": (lambda: row_sum("parallel_unrolled"), lambda: [rand(R, K), np.zeros(R, "float32")]),
    "row_sum_vec_reduction": (lambda: row_sum("vectorized_reduction"), lambda: [rand(R, K), np.zeros(R, "float32")]),
    "softmax": (lambda: softmax(7, 53, "parallel_vectorized"), lambda: [rand(7, 53), np.zeros((7, 53), "float32")]),
    "matmul_ikj": (lambda: matmul_naive(10, 19, 13, "ikj", vec=True),
                   lambda: [rand(10, 13), rand(13, 19), np.zeros((10, 19), "float32")]),
    "matmul_tiled": (lambda: matmul_tiled(24, 32, 20), lambda: [rand(24, 20), rand(20, 32), np.zeros((24, 32), "float32")]),
    "conv2d_split": (lambda: conv2d(3, 10, 4, 3, 1, "split"),
                     lambda: [rand(1, 3, 10, 10), rand(4, 3, 3, 3), np.zeros((1, 4, 10, 10), "float32")]),
}


@pytest.mark.parametrize("name", sorted(LOWERED))
def test_programs_after_lowering_passes(build, name):
    """Blocks made opaque (init and predicates become ifs), buffers compacted: the IR kiln.build
    hands to codegen. Compared with the evaluator on the original program."""
    from kiln.driver import lower
    from kiln.ir.evaluator import evaluate
    make, args = LOWERED[name]
    func = make()
    lowered = lower(func)["main"]
    arrays = args()
    ref = [a.copy() for a in arrays]
    evaluate(func, *ref)
    got = [a.copy() for a in arrays]
    assert build(lowered).call("main", *got) == 0
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
