"""Round trip of hand-built IR: print -> parse is structurally equal, and prints the same again.

The IR here is built with node constructors, so it also covers what scripts rarely say:
clashing names, free variables, non-default dtypes everywhere, nodes the operator syntax
cannot express (the printer falls back to the constructor form, ``T.Add(a, b)``).
"""
import pytest

from kiln.ir import (Add, And, Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore,
                     Call, Cast, Div, EQ, Evaluate, FloatImm, FloorDiv, FloorMod, For, GE, GT,
                     INTRINSICS, IRModule, IfThenElse, IntImm, IterVar, LE, LT, Max, Min, Mul, NE,
                     Not, Or, PrimFunc, Range, Select, Sub, Var, const, root_realize, seq)
from kiln.script import assert_roundtrip


def one_block_func(body_fn, dtype="float32", n=8, extra=()):
    """``for i: with T.block("B"): vi = ...; <body_fn(A, B, vi)>`` over buffers A, B of ``dtype``."""
    A, B = Buffer("A", (n,), dtype), Buffer("B", (n,), dtype)
    i, vi = Var("i"), Var("vi")
    body = body_fn(A, B, vi)
    block = Block("B", (IterVar(vi, Range.from_extent(n), "spatial"),),
                  (BufferRegion.full(A),), (BufferRegion.full(B),), body)
    return PrimFunc((A, B) + tuple(extra), root_realize(For(i, 0, n, "serial", BlockRealize((i,), True, block))))


def test_vector_add_and_matmul():
    A, B = Buffer("A", (8,)), Buffer("B", (8,))
    i, vi = Var("i"), Var("vi")
    block = Block("B", (IterVar(vi, Range.from_extent(8), "spatial"),),
                  (BufferRegion.point(A, (vi,)),), (BufferRegion.point(B, (vi,)),),
                  BufferStore(B, A[vi] + 1.0, (vi,)))
    assert_roundtrip(IRModule({"main": PrimFunc((A, B), root_realize(For(i, 0, 8, "serial",
                                                                             BlockRealize((i,), True, block))))}))
    M, N, K = 4, 5, 6
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    i, j, k, vi, vj, vk = (Var(s) for s in ("i", "j", "k", "vi", "vj", "vk"))
    block = Block("C", (IterVar(vi, Range.from_extent(M), "spatial"), IterVar(vj, Range.from_extent(N), "spatial"),
                        IterVar(vk, Range.from_extent(K), "reduce")),
                  (BufferRegion.point(A, (vi, vk)), BufferRegion.point(B, (vk, vj))),
                  (BufferRegion.point(C, (vi, vj)),),
                  BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
                  init=BufferStore(C, const(0.0), (vi, vj)))
    nest = For(i, 0, M, "serial", For(j, 0, N, "serial", For(k, 0, K, "serial", BlockRealize((i, j, k), True, block))))
    func = PrimFunc((A, B, C), root_realize(nest))
    assert_roundtrip(func)
    assert "T.axis.remap(\"SSR\", [i, j, k])" in func.script()


@pytest.mark.parametrize("op", sorted(INTRINSICS))
def test_every_intrinsic(op):
    def body(A, B, vi):
        return BufferStore(B, Call(op, tuple(A[vi] for _ in range(INTRINSICS[op]))), (vi,))
    assert_roundtrip(one_block_func(body))


# Div ('/') is float division, so it pairs with float dtypes only: those cases are left out of
# the parametrization rather than skipped on every run.
_ARITH_DTYPES = ["float32", "int32", "int64", "float16", "uint8"]
_ARITH_CASES = [(cls, dtype) for cls in (Add, Sub, Mul, Div, FloorDiv, FloorMod, Min, Max)
                for dtype in _ARITH_DTYPES if cls is not Div or dtype.startswith("float")]


@pytest.mark.parametrize("cls,dtype", _ARITH_CASES,
                         ids=[f"{c.__name__}-{d}" for c, d in _ARITH_CASES])
def test_every_arithmetic_op_and_dtype(cls, dtype):
    def body(A, B, vi):
        c = const(3, dtype)
        return BufferStore(B, cls(cls(A[vi], c), cls(c, A[(vi + 1) % 8])), (vi,))
    func = one_block_func(body, dtype)
    assert_roundtrip(func)


@pytest.mark.parametrize("cls", [EQ, NE, LT, LE, GT, GE, And, Or])
def test_every_comparison_and_logical_op(cls):
    def body(A, B, vi):
        x, y = A[vi] > 0.0, A[vi] < 1.0
        lhs = cls(x, y) if cls in (And, Or) else cls(A[vi], A[vi] * 2.0)
        return BufferStore(B, Select(Not(lhs) if cls is Or else lhs, A[vi], Cast("float32", vi)), (vi,))
    assert_roundtrip(one_block_func(body))


def test_bool_buffers_and_constants():
    def body(A, B, vi):
        return BufferStore(B, Or(And(A[vi], IntImm(1, "bool")), Not(EQ(A[vi], IntImm(0, "bool")))), (vi,))
    func = one_block_func(body, "bool")
    assert_roundtrip(func)
    assert "True" in func.script()


def test_loop_kinds_annotations_and_thread_binding():
    A = Buffer("A", (64,))
    v = [Var(n) for n in "abcdef"]
    store = BufferStore(A, FloatImm(0.5), (v[0] * 32 + v[1] * 8 + v[2] * 4 + v[3] + v[4] + v[5],))
    nest = For(v[0], 0, 2, "parallel",
               For(v[1], 2, 4, "serial",
                   For(v[2], 0, 2, "unrolled",
                       For(v[3], 0, 4, "vectorized",
                           For(v[4], 0, 1, "thread_binding", For(v[5], 0, 1, "serial", store,
                                                                 annotations=(("k", 1),)),
                               thread_binding="threadIdx.x", annotations=(("a", "b"),))))),
               annotations=(("pragma", IntImm(4)), ("f", 1.5), ("nested", ((1, 2), [3.0]))))
    func = PrimFunc((A,), root_realize(nest))
    assert_roundtrip(func)
    text = func.script()
    for form in ("T.parallel(2, annotations=", "T.serial(2, 6)", "T.unroll(2)", "T.vectorized(4)",
                 'T.thread_binding(1, thread="threadIdx.x", annotations={"a": "b"})'):
        assert form in text


def test_names_are_made_unique_and_free_variables_declared():
    A, A2 = Buffer("A", (8,)), Buffer("A", (8,))
    i1, i2, inner = Var("i"), Var("i"), Var("i")
    free = Var("i")
    vi = Var("i")
    b1 = Block("A", (IterVar(vi, Range.from_extent(8), "spatial"),), (), (BufferRegion.point(A, (vi,)),),
               BufferStore(A, A2[vi] + Cast("float32", free), (vi,)))
    b2 = Block("A", (), (), (), BufferStore(A2, FloatImm(0.0), (i2,)), alloc_buffers=(Buffer("A", (4,), scope="local"),))
    body = seq(For(i1, 0, 8, "serial", BlockRealize((i1,), True, b1)),
               For(i2, 0, 8, "serial", For(inner, 0, 2, "serial", BlockRealize((), True, b2))))
    func = PrimFunc((A, A2), root_realize(body, (Buffer("A", (2,)),)))
    assert_roundtrip(func)
    text = func.script()
    assert "def main(A: T.Buffer((8,), \"float32\"), A_1: T.Buffer((8,), \"float32\")):" in text
    assert "i_2 = T.int32()" in text           # the free variable, named apart from i and i_1
    assert "for i, i_1 in T.grid(8, 2):" in text


def test_names_that_are_not_identifiers_or_are_reserved():
    A = Buffer("A.shared", (4,))
    T_ = Var("T")
    k = Var("for")
    n0 = Var("0n")
    body = For(T_, 0, 4, "serial", For(k, 0, 1, "serial", BufferStore(A, FloatImm(1.0), (T_ + k + n0,))))
    func = PrimFunc((A,), root_realize(body))
    assert_roundtrip(func)
    text = func.script()
    assert "A_shared: T.Buffer" in text and "for T_1, for_1 in T.grid(4, 1):" in text


def test_symbolic_shapes_scalar_params_and_int64():
    n, m = Var("n"), Var("m", "int64")
    A = Buffer("A", (n, m), "float32")
    B = Buffer("B", (m,), "int64")
    i, j = Var("i"), Var("j", "int64")
    body = For(i, 0, n, "serial", For(j, IntImm(0, "int64"), m, "serial",
                                      BufferStore(B, B[j] + Cast("int64", i) * const(2, "int64"), (j,))))
    for params in ((A, B), (A, B, n), (n, A, B)):
        func = PrimFunc(params, root_realize(body))
        assert_roundtrip(func)
    text = PrimFunc((A, B, n), root_realize(body)).script()
    assert "m = T.int64()" in text and "n: T.int32" in text and "n = T.int32()" not in text


def test_non_zero_minimum_domains_and_regions():
    m = Var("m")
    A = Buffer("A", (16, 16))
    i, vi = Var("i"), Var("vi")
    block = Block("B", (IterVar(vi, Range(m, 4), "spatial"),),
                  (BufferRegion(A, (Range(vi, m), Range(IntImm(2), IntImm(3)))),),
                  (BufferRegion(A, (Range(vi * 2, 2), Range(0, 16))),),
                  BufferStore(A, FloatImm(0.0), (vi, IntImm(0))))
    func = PrimFunc((A, m), root_realize(For(i, 2, 8, "serial", BlockRealize((i + m,), True, block))))
    assert_roundtrip(func)
    text = func.script()
    assert "vi = T.axis.spatial((m, m + 4), i + m)" in text
    assert "T.reads(A[vi:vi + m, 2:5])" in text and "T.writes(A[vi * 2:vi * 2 + 2, 0:16])" in text


def test_predicate_init_allocs_attrs_and_evaluate():
    A, B = Buffer("A", (10,)), Buffer("B", (1,))
    io, ii, vk = Var("io"), Var("ii"), Var("vk")
    X = Buffer("X", (1,), "float32", "local")
    block = Block("R", (IterVar(vk, Range.from_extent(10), "reduce"),), (BufferRegion.point(A, (vk,)),),
                  (BufferRegion.point(B, (0,)),),
                  seq(BufferStore(X, A[vk], (0,)), BufferStore(B, B[0] + X[0], (0,)), Evaluate(IntImm(0))),
                  init=BufferStore(B, FloatImm(0.0), (0,)), alloc_buffers=(X,),
                  annotations=(("schedule_rule", "none"), ("w", IntImm(1, "bool"))))
    realize = BlockRealize((io * 4 + ii,), io * 4 + ii < 10, block)
    func = PrimFunc((A, B), root_realize(For(io, 0, 3, "serial", For(ii, 0, 4, "serial", realize))),
                    attrs=(("global_symbol", "reduce10"), ("tir.noalias", True)))
    assert_roundtrip(func)
    text = func.script()
    assert "def reduce10(" in text and "T.where(io * 4 + ii < 10)" in text


def test_if_then_else_chain_and_empty_bodies():
    A = Buffer("A", (4,), "int32")
    i = Var("i")
    chain = IfThenElse(i < 1, BufferStore(A, IntImm(1), (i,)),
                       IfThenElse(i < 2, BufferStore(A, IntImm(2), (i,)),
                                  IfThenElse(i < 3, seq(), BufferStore(A, IntImm(-4), (i,)))))
    func = PrimFunc((A,), root_realize(seq(For(i, 0, 4, "serial", chain), For(Var("j"), 0, 1, "serial", seq()))))
    assert_roundtrip(func)
    assert func.script().count("elif") == 2


def test_root_less_and_explicit_root_functions():
    def lowered():
        A, i = Buffer("A", (4,)), Var("i")
        return PrimFunc((A,), For(i, 0, 4, "serial", BufferStore(A, FloatImm(1.0), (i,))))
    A = Buffer("A", (4,))
    bare_block = PrimFunc((A,), BlockRealize((), True, Block("B", (), (), (), BufferStore(A, FloatImm(1.0), (0,)))))
    A = Buffer("A", (4,))
    annotated_root = PrimFunc((A,), BlockRealize((), True, Block(
        "root", (), (), (BufferRegion.full(A),), BufferStore(A, FloatImm(1.0), (0,)),
        alloc_buffers=(Buffer("S", (2,)),), annotations=(("k", 1),))))
    nested_root = PrimFunc((Buffer("A", (4,)),), root_realize(BlockRealize((), True, Block("root", (), (), (), seq()))))
    mod = IRModule({"lowered": lowered(), "bare_block": bare_block, "annotated_root": annotated_root,
                    "nested_root": nested_root, "fused.add": lowered(), "if": lowered(), "0x": lowered()})
    assert_roundtrip(mod)
    text = mod.script()
    assert "@T.prim_func(root=False)" in text and '@T.prim_func(root=False, name="fused.add")' in text


def test_ill_typed_nodes_print_in_constructor_form():
    x, n = Var("x", "float32"), Var("n", "int64")
    B = Buffer("B", (4,))
    body = seq(BufferStore(B, Add(x, IntImm(1)), (IntImm(0),)),
               BufferStore(B, Min(x, FloatImm(1.0, "float16")), (Add(n, IntImm(1)),)),
               BufferStore(B, Select(x > 0.0, x, IntImm(3)), (IntImm(1),)),
               BufferStore(B, Call("exp", (x,), "float16"), (IntImm(2),)),
               BufferStore(B, Call("pow", (x, IntImm(2))), (IntImm(2),)),
               BufferStore(B, Add(x, x, "float16"), (Mul(IntImm(2, "int64"), IntImm(3)),)))
    func = PrimFunc((B,), root_realize(body))
    assert_roundtrip(func)
    assert "T.Add(x, T.int32(1))" in func.script()


def test_float_constants_keep_their_value():
    B = Buffer("B", (8,), "float64")
    values = [0.1, -0.0, 1e20, 1e-7, float("inf"), float("-inf"), float("nan"), 123456789.125]
    body = seq(*(BufferStore(B, FloatImm(v, "float64"), (k,)) for k, v in enumerate(values)))
    assert_roundtrip(PrimFunc((B,), root_realize(body)))


def test_zero_dimensional_buffers_and_loads_in_indices():
    S, A, I = Buffer("S", ()), Buffer("A", (8,)), Buffer("I", (8,), "int32")
    i = Var("i")
    body = For(i, 0, 8, "serial", BufferStore(S, S[()] + A[I[i]] + BufferLoad(A, (FloorMod(I[i] + 1, IntImm(8)),)), ()))
    assert_roundtrip(PrimFunc((S, A, I), root_realize(body)))


def test_module_attrs_and_empty_module():
    assert_roundtrip(IRModule({}, {"target": "llvm", "opt": 3}))
    assert_roundtrip(IRModule({}))


def test_variables_whose_dtype_differs_from_their_extent():
    A = Buffer("A", (8,))
    i, vi = Var("i", "int64"), Var("vi", "int64")
    block = Block("B", (IterVar(vi, Range.from_extent(8), "spatial"),), (), (BufferRegion.point(A, (vi,)),),
                  BufferStore(A, FloatImm(0.0), (vi,)))
    func = PrimFunc((A,), root_realize(For(i, 0, 8, "serial", BlockRealize((i,), True, block))))
    assert_roundtrip(func)
    text = func.script()
    assert 'for i in T.serial(8, dtype="int64"):' in text
    assert 'vi = T.axis.spatial(8, i, dtype="int64")' in text
