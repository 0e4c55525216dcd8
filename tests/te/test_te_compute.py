"""te: build tensor programs from tensor expressions, check their shape, run them with the
reference evaluator against numpy."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.ir import (Block, BlockRealize, BufferRegion, BufferStore, For, IntImm, IterVar, PrimFunc,
                     Range, Var, assert_structural_equal, root_realize, verify)
from kiln.ir.evaluator import evaluate

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def blocks(func):
    """The blocks of ``func`` below the root, in program order."""
    out = []
    kiln.ir.pre_order_visit(func.body.block.body,
                            lambda n: out.append(n) if isinstance(n, Block) else None)
    return out


def loops(func):
    out = []
    kiln.ir.pre_order_visit(func.body, lambda n: out.append(n) if isinstance(n, For) else None)
    return out


def region_str(br):
    def e(x):
        return getattr(x, "name", None) or str(getattr(x, "value", x))
    return f"{br.buffer.name}[" + ", ".join(
        e(r.min) if isinstance(r.extent, IntImm) and r.extent.value == 1 else f"{e(r.min)}:+{e(r.extent)}"
        for r in br.region) + "]"


def test_api_example_elementwise():
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    func = te.create_prim_func([A, B])
    mod = kiln.ir.IRModule({"main": func})
    assert isinstance(func, PrimFunc) and mod["main"] is func
    assert [p.name for p in func.params] == ["A", "B"]
    (blk,) = blocks(func)
    assert blk.name_hint == "B"
    assert [(iv.var.name, iv.kind) for iv in blk.iter_vars] == [("vi", "spatial")]
    assert [lp.loop_var.name for lp in loops(func)] == ["i"]
    assert [region_str(r) for r in blk.reads] == ["A[vi]"]
    assert [region_str(r) for r in blk.writes] == ["B[vi]"]
    a, b = np.arange(8, dtype="float32"), np.empty(8, "float32")
    evaluate(mod, a, b)
    np.testing.assert_allclose(b, a + 1)
    verify(func)


def test_elementwise_2d_and_broadcast():
    A = te.placeholder((4, 5), name="A")
    bias = te.placeholder((5,), name="bias")
    C = te.compute((4, 5), lambda i, j: A[i, j] * 2.0 + bias[j], name="C")
    func = te.create_prim_func([A, bias, C])
    verify(func)
    (blk,) = blocks(func)
    assert [region_str(r) for r in blk.reads] == ["A[vi, vj]", "bias[vj]"]
    a, b, c = rand(4, 5), rand(5), np.empty((4, 5), "float32")
    evaluate(func, a, b, c)
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)


def test_matmul_has_tvm_shape():
    M, N, K = 4, 5, 6
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])

    # Hand-built expected program: for i, j, k in T.grid(M, N, K): block "C" ...
    a, b, c = (kiln.ir.Buffer(n, s) for n, s in (("A", (M, K)), ("B", (K, N)), ("C", (M, N))))
    i, j, kk = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    block = Block("C", (IterVar(vi, Range(0, M), "spatial"), IterVar(vj, Range(0, N), "spatial"),
                        IterVar(vk, Range(0, K), "reduce")),
                  reads=(BufferRegion.point(a, (vi, vk)), BufferRegion.point(b, (vk, vj))),
                  writes=(BufferRegion.point(c, (vi, vj)),),
                  body=BufferStore(c, c[vi, vj] + a[vi, vk] * b[vk, vj], (vi, vj)),
                  init=BufferStore(c, kiln.ir.FloatImm(0.0), (vi, vj)))
    nest = BlockRealize((i, j, kk), True, block)
    for v, n in ((kk, K), (j, N), (i, M)):
        nest = For(v, 0, n, "serial", nest)
    assert_structural_equal(func, PrimFunc((a, b, c), root_realize(nest)))

    x, y, z = rand(M, K), rand(K, N), np.empty((M, N), "float32")
    evaluate(func, x, y, z)
    np.testing.assert_allclose(z, x @ y, rtol=1e-5, atol=1e-6)


def test_max_min_reductions_and_identities():
    A = te.placeholder((3, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    mx = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="mx")
    mn = te.compute((3,), lambda i: te.min(A[i, k], axis=k), name="mn")
    func = te.create_prim_func([A, mx, mn])
    verify(func)
    b_max, b_min = blocks(func)
    assert b_max.init.value.value == -np.inf and b_min.init.value.value == np.inf
    a = rand(3, 7)
    o1, o2 = np.empty(3, "float32"), np.empty(3, "float32")
    evaluate(func, a, o1, o2)
    np.testing.assert_array_equal(o1, a.max(axis=1))
    np.testing.assert_array_equal(o2, a.min(axis=1))

    I = te.placeholder((5,), "int8", name="I")
    r = te.reduce_axis((0, 5), name="r")
    imax = te.compute((), lambda: te.max(I[r], axis=r), name="imax")
    f2 = te.create_prim_func([I, imax])
    assert blocks(f2)[0].init.value.value == -128
    x, out = np.array([-128, -100, -128, -5, -7], "int8"), np.empty((), "int8")
    evaluate(f2, x, out)
    assert out == -5


def test_elementwise_max_helpers():
    assert te.max_value("int8").value == 127 and te.min_value("uint8").value == 0
    assert te.max_value("float32").value == float(np.finfo("float32").max)
    A = te.placeholder((6,), name="A")
    relu = te.compute((6,), lambda i: te.max(A[i], 0.0), name="relu")
    func = te.create_prim_func([A, relu])
    a, out = rand(6), np.empty(6, "float32")
    evaluate(func, a, out)
    np.testing.assert_array_equal(out, np.maximum(a, 0))


def test_softmax_in_several_computes():
    n, m = 3, 8
    X = te.placeholder((n, m), name="X")
    k1 = te.reduce_axis((0, m), name="k")
    mx = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="maxelem")
    ex = te.compute((n, m), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k")
    s = te.compute((n,), lambda i: te.sum(ex[i, k2], axis=k2), name="expsum")
    Y = te.compute((n, m), lambda i, j: ex[i, j] / s[i], name="softmax")
    func = te.create_prim_func([X, Y])
    verify(func)
    assert [b.name_hint for b in blocks(func)] == ["maxelem", "exp", "expsum", "softmax"]
    assert [b.name for b in func.body.block.alloc_buffers] == ["maxelem", "exp", "expsum"]
    x, y = rand(n, m), np.empty((n, m), "float32")
    evaluate(func, x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def _conv2d_ref(x, w, pad):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, f, oh, ow), "float32")
    for y in range(oh):
        for z in range(ow):
            out[:, :, y, z] = np.einsum("nchw,fchw->nf", xp[:, :, y:y + kh, z:z + kw], w)
    return out


@pytest.mark.parametrize("fused_padding", [False, True])
def test_conv2d_nchw_with_padding(fused_padding):
    N, C, H, W, F, KH, KW, P = 1, 2, 5, 5, 3, 3, 3, 1
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((F, C, KH, KW), name="W")
    OH, OW = H + 2 * P - KH + 1, W + 2 * P - KW + 1
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")

    def inside(h, w):
        return (h >= P) & (h < H + P) & (w >= P) & (w < W + P)

    if fused_padding:
        def src(n, c, h, w):
            return te.if_then_else(inside(h, w), X[n, c, h - P, w - P], 0.0)
        args = [X, Wt]
    else:
        pad = te.compute((N, C, H + 2 * P, W + 2 * P),
                         lambda n, c, h, w: te.if_then_else(inside(h, w), X[n, c, h - P, w - P], 0.0),
                         name="pad")
        def src(n, c, h, w):
            return pad[n, c, h, w]
        args = [X, Wt]
    out = te.compute((N, F, OH, OW),
                     lambda n, f, y, x: te.sum(src(n, rc, y + ry, x + rx) * Wt[f, rc, ry, rx],
                                               axis=[rc, ry, rx]), name="conv")
    func = te.create_prim_func(args + [out])
    verify(func)
    conv = blocks(func)[-1]
    assert [iv.kind for iv in conv.iter_vars] == ["spatial"] * 4 + ["reduce"] * 3
    assert [lp.loop_var.name for lp in loops(func)][-7:] == ["n", "f", "y", "x", "rc", "ry", "rx"]
    x, w, o = rand(N, C, H, W), rand(F, C, KH, KW), np.empty((N, F, OH, OW), "float32")
    evaluate(func, x, w, o)
    np.testing.assert_allclose(o, _conv2d_ref(x, w, P), rtol=1e-4, atol=1e-5)


def test_symbolic_size():
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    B = te.compute((n, 4), lambda i, j: A[i, j] * A[i, j], name="B")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((4,), lambda j: te.sum(B[k, j], axis=k), name="S")
    func = te.create_prim_func([A, S])
    verify(func)
    assert loops(func)[0].extent is n
    for size in (1, 5):
        a, s = rand(size, 4), np.empty(4, "float32")
        evaluate(func, a, s)
        np.testing.assert_allclose(s, (a * a).sum(axis=0), rtol=1e-5)


def test_reduce_axis_with_offset_where_and_star_args():
    A = te.placeholder((6,), name="A")
    k = te.reduce_axis((2, 5), name="k")
    S = te.compute((1,), lambda i: te.sum(A[k], axis=k, where=A[k] > 0.0), name="S")
    T2 = te.compute((6,), lambda *idx: A(*idx) * 3.0, name="T2")
    func = te.create_prim_func([A, S, T2])
    verify(func)
    s_blk, t_blk = blocks(func)
    assert s_blk.iter_vars[1].dom.min.value == 2
    assert [lp.loop_var.name for lp in loops(func)] == ["i", "k", "i0"]
    a = np.array([1, -1, 2, -3, 4, 5], "float32")
    s, t = np.empty(1, "float32"), np.empty(6, "float32")
    evaluate(func, a, s, t)
    assert s[0] == 6.0
    np.testing.assert_array_equal(t, a * 3)


def test_duplicate_names_are_made_unique():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0)
    C = te.compute((4,), lambda i: B[i] * 2.0)
    func = te.create_prim_func([A, C])
    assert [b.name_hint for b in blocks(func)] == ["compute", "compute_1"]
    verify(func)


def test_math_helpers():
    A = te.placeholder((5,), name="A")
    funcs = {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
             "abs": np.abs}
    for name, ref in funcs.items():
        B = te.compute((5,), lambda i: getattr(te, name)(A[i]), name=name)
        a, b = rand(5), np.empty(5, "float32")
        evaluate(te.create_prim_func([A, B]), a, b)
        np.testing.assert_allclose(b, ref(a), rtol=1e-5)
    P = te.compute((5,), lambda i: te.sqrt(te.pow(A[i], 2.0)) + te.rsqrt(te.abs(A[i]) + 1.0), name="P")
    a, b = rand(5), np.empty(5, "float32")
    evaluate(te.create_prim_func([A, P]), a, b)
    np.testing.assert_allclose(b, np.abs(a) + 1 / np.sqrt(np.abs(a) + 1), rtol=1e-5)


def test_errors_are_clear():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(ValueError, match="placeholder 'A' is read by compute 'B'"):
        te.create_prim_func([B])
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ValueError, match="must be the whole body"):
        te.compute((4,), lambda i: te.sum(A[k], axis=k) + 1.0)
    with pytest.raises(IndexError, match="has 1 dimension"):
        te.compute((4,), lambda i: A[i, i])
    with pytest.raises(ValueError, match="2 dimension"):
        te.compute((4, 4), lambda i: A[i])
    C = te.compute((4,), lambda i: A[k] * 2.0, name="C")
    with pytest.raises(ValueError, match="reduction axis 'k'"):
        te.create_prim_func([A, C])
    with pytest.raises(TypeError, match="axis"):
        te.sum(A[0])


def test_te_programs_round_trip_through_script():
    from kiln import script
    n = te.var("n")
    X = te.placeholder((n, 8), name="X")
    k = te.reduce_axis((1, 8), name="k")
    mx = te.compute((n,), lambda i: te.max(X[i, k], axis=k, where=X[i, k] > 0.0), name="mx")
    Y = te.compute((n, 8), lambda i, j: te.exp(X[i, j] - mx[i]), name="Y")
    mod = kiln.ir.IRModule({"main": te.create_prim_func([X, Y])})
    assert_structural_equal(script.parse(mod.script()), mod)
