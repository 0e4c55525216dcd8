"""kiln.ir.verify: each kind of malformed tensor program is reported with function and block."""
import pytest

import kiln
from kiln import te
from kiln.ir import (Block, BlockRealize, Buffer, BufferRegion, BufferStore, Cast, For, IRModule,
                     IntImm, IterVar, PrimFunc, Range, Var, VerifyError, root_realize, seq, verify)


def _func(body_fn, params=None, allocs=()):
    A, B = Buffer("A", (8,)), Buffer("B", (8,))
    i, vi = Var("i"), Var("vi")
    body = body_fn(A, B, i, vi)
    return PrimFunc(params or (A, B), root_realize(body, allocs))


def _block(name, vi, store, kind="spatial", reads=(), writes=(), init=None, extent=8):
    return Block(name, (IterVar(vi, Range(0, extent), kind),), reads, writes, store, init)


def _good(A, B, i, vi):
    return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
        "B", vi, BufferStore(B, A[vi] + 1.0, (vi,)),
        reads=(BufferRegion.point(A, (vi,)),), writes=(BufferRegion.point(B, (vi,)),))))


def check(func, *fragments):
    with pytest.raises(VerifyError) as info:
        verify(IRModule({"main": func}))
    msg = str(info.value)
    for f in fragments:
        assert f in msg, msg
    return msg


def test_well_formed_programs_pass():
    assert verify(_func(_good)) is None
    A = te.placeholder((4, 6), name="A")
    W = te.placeholder((6, 5), name="W")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((4, 5), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    D = te.compute((4, 5), lambda i, j: te.max(C[i, j], 0.0), name="D")
    verify(IRModule({"main": te.create_prim_func([A, W, D])}))


def test_loop_var_used_inside_block():
    def body(A, B, i, vi):
        return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(B, A[i] + 1.0, (vi,)))))
    check(_func(body), "function 'main', block 'B'", "variable 'i'", "defined outside it")


def test_undefined_variable():
    def body(A, B, i, vi):
        return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(B, A[Var("j")], (vi,)))))
    check(_func(body), "block 'B'", "variable 'j' is not defined")


def test_block_iterator_used_outside_its_block():
    def body(A, B, i, vi):
        blk = BlockRealize((i,), True, _block("B", vi, BufferStore(B, A[vi], (vi,))))
        return For(i, 0, 8, "serial", seq(blk, BlockRealize((i,), True, _block(
            "C", Var("vj"), BufferStore(B, A[vi], (vi,))))))
    check(_func(body), "block 'C'", "variable 'vi' (bound by block 'B') is used outside its scope")


def test_undeclared_buffer():
    def body(A, B, i, vi):
        C = Buffer("C", (8,))
        return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(C, A[vi], (vi,)))))
    check(_func(body), "block 'B'", "store to buffer 'C'", "neither a parameter nor allocated")


def test_allocated_buffer_is_fine_and_double_alloc_is_not():
    C = Buffer("C", (8,))

    def body(A, B, i, vi):
        return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(C, A[vi], (vi,)))))
    verify(_func(body, allocs=(C,)))
    A2 = Buffer("A", (8,))
    check(_func(lambda A, B, i, vi: _good(A, B, i, vi), params=(A2, Buffer("B", (8,))), allocs=(A2,)),
          "buffer 'A' is allocated here but is already a parameter")


def test_wrong_number_of_indices():
    def body(A, B, i, vi):
        return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(B, A[vi, vi], (vi,)),
            reads=(BufferRegion(A, (Range(0, 8), Range(0, 1))),))))
    check(_func(body), "load from 'A' with 2 indices; the buffer has 1 dimensions",
          "reads region of 'A' has 2 ranges")


def test_store_dtype_mismatch():
    def body(A, B, i, vi):
        return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(B, Cast("float16", A[vi]), (vi,)))))
    check(_func(body), "store to 'B' (dtype float32) of a value of dtype float16")


def test_binding_count_mismatch():
    def body(A, B, i, vi):
        realize = BlockRealize((i,), True, _block("B", vi, BufferStore(B, A[vi], (vi,))))
        object.__setattr__(realize, "iter_values", (i, i))  # bypass the constructor's check
        return For(i, 0, 8, "serial", realize)
    check(_func(body), "block 'B'", "1 iterators but 2 bindings")


def test_loop_extent_must_be_integer():
    def body(A, B, i, vi):
        return For(i, 0, kiln.ir.FloatImm(8.0), "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(B, A[vi], (vi,)))))
    check(_func(body), "loop 'i': its extent has dtype float32, not an integer")


def test_duplicate_block_names():
    def body(A, B, i, vi):
        j, vj = Var("j"), Var("vj")
        one = For(i, 0, 8, "serial", BlockRealize((i,), True, _block("B", vi, BufferStore(B, A[vi], (vi,)))))
        two = For(j, 0, 8, "serial", BlockRealize((j,), True, _block("B", vj, BufferStore(B, A[vj], (vj,)))))
        return seq(one, two)
    check(_func(body), "block 'B': another block of this function has the same name")


def test_variable_bound_twice():
    def body(A, B, i, vi):
        inner = BlockRealize((i,), True, _block("B", vi, BufferStore(B, A[vi], (vi,))))
        return For(i, 0, 8, "serial", For(i, 0, 1, "serial", inner))
    check(_func(body), "variable 'i' is bound twice")

    def body2(A, B, i, vi):
        j = Var("j")
        one = For(i, 0, 8, "serial", BlockRealize((i,), True, _block("B", vi, BufferStore(B, A[vi], (vi,)))))
        two = For(j, 0, 8, "serial", BlockRealize((j,), True, _block("C", vi, BufferStore(B, A[vi], (vi,)))))
        return seq(one, two)
    check(_func(body2), "block 'C'", "variable 'vi' is bound twice: by block 'B' and by block 'C'")


def test_reduction_without_init_is_allowed_and_symbolic_sizes_are_defined():
    n = Var("n")
    A, S = Buffer("A", (n,)), Buffer("S", (1,))
    k, vk = Var("k"), Var("vk")
    blk = Block("S", (IterVar(vk, Range(0, n), "reduce"),), (), (),
                BufferStore(S, S[0] + A[vk], (IntImm(0),)))
    verify(PrimFunc((A, S), root_realize(For(k, 0, n, "serial", BlockRealize((k,), True, blk)))))
    # n is not defined when no parameter shape mentions it
    A2 = Buffer("A", (8,))
    blk2 = Block("S", (IterVar(vk, Range(0, n), "reduce"),), (), (),
                 BufferStore(S, S[0] + A2[vk], (IntImm(0),)))
    bad = PrimFunc((A2, S), root_realize(For(k, 0, n, "serial", BlockRealize((k,), True, blk2))))
    check(bad, "variable 'n' is not defined")


def test_all_problems_are_listed_and_lone_func_named():
    def body(A, B, i, vi):
        return For(i, 0, 8, "serial", BlockRealize((i,), True, _block(
            "B", vi, BufferStore(B, Cast("int32", A[i]), (vi, vi)))))
    with pytest.raises(VerifyError) as info:
        verify(_func(body), name="f")
    assert len(info.value.problems) >= 3
    assert all(p.startswith("function 'f', block 'B'") for p in info.value.problems)
    with pytest.raises(TypeError):
        verify("not a function")


def test_structural_equal_scopes_variables_per_function_and_nan_constants():
    import numpy as np
    from kiln.ir import Constant, Function, GraphVar, IRModule, TensorType, Var, structural_equal, structural_hash
    n, m = Var("n"), Var("m")
    shared = IRModule({"a": Function((GraphVar("x", TensorType((n,))),), (), Constant(np.float32(0))),
                       "b": Function((GraphVar("y", TensorType((n,))),), (), Constant(np.float32(0)))})
    apart = IRModule({"a": Function((GraphVar("x", TensorType((n,))),), (), Constant(np.float32(0))),
                      "b": Function((GraphVar("y", TensorType((m,))),), (), Constant(np.float32(0)))})
    assert structural_equal(shared, apart) and structural_hash(shared) == structural_hash(apart)
    nan = np.array([np.nan, 1.0], "float32")
    assert structural_equal(Constant(nan), Constant(nan.copy()))
    assert Constant(np.array(0.5, "float32")).data.shape == ()
