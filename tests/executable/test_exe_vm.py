"""End to end: te kernels + graph functions, compiled, run by the runtime's VM, against numpy."""

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.executable import compile as kiln_compile
from kiln.ir import (Constant, FunctionBuilder, GraphTuple, GraphVar, IRModule, TensorType, TupleGetItem,
                     TupleType, Var, call_dps_packed, call_tir)

from kiln.runtime.vm import VirtualMachine

F32 = "float32"


def t(*shape):
    return TensorType(shape, F32)


def _binary(name, fn, shape):
    A = te.placeholder(shape, F32, name="A")
    B = te.placeholder(shape, F32, name="B")
    return te.create_prim_func([A, B, te.compute(shape, lambda *i: fn(A[i], B[i]), name=name)])


def _matmul(n, k, m):
    A = te.placeholder((n, k), F32, name="A")
    W = te.placeholder((k, m), F32, name="W")
    r = te.reduce_axis((0, k), name="r")
    return te.create_prim_func([A, W, te.compute((n, m), lambda i, j: te.sum(A[i, r] * W[r, j], axis=r),
                                                 name="C")])


def _nd(a):
    return kiln.nd.array(np.ascontiguousarray(a))


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(0)


def test_two_kernels_and_a_constant(rng):
    w = rng.standard_normal((8, 4)).astype(F32)
    b = rng.standard_normal((2, 4)).astype(F32)
    x = GraphVar("x", t(2, 8))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        lv0 = fb.emit(call_tir("matmul", [x, Constant(w)], t(2, 4)))
        gv = fb.emit_output(call_tir("add", [lv0, Constant(b)], t(2, 4)))
    mod = IRModule({"matmul": _matmul(2, 8, 4), "add": _binary("C", lambda p, q: p + q, (2, 4)),
                    "main": fb.finish(gv)})
    ex = kiln_compile(mod, "llvm")
    vm = VirtualMachine(ex, kiln.cpu())
    xs = rng.standard_normal((2, 8)).astype(F32)
    y = vm["main"](_nd(xs))
    np.testing.assert_allclose(y.numpy(), xs @ w + b, rtol=1e-5, atol=1e-5)
    # Called again: the arena is per call, the constants are untouched.
    y2 = vm["main"](_nd(xs * 2))
    np.testing.assert_allclose(y2.numpy(), (xs * 2) @ w + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y.numpy(), xs @ w + b, rtol=1e-5, atol=1e-5)  # y is its own tensor


def test_chain_sharing_the_arena(rng):
    shape = (64, 64)
    mul = _binary("C", lambda p, q: p * q, shape)
    add = _binary("C", lambda p, q: p + q, shape)
    x, y = GraphVar("x", t(*shape)), GraphVar("y", t(*shape))
    fb = FunctionBuilder([x, y])
    with fb.dataflow():
        v = x
        for k in range(9):
            v = fb.emit(call_tir("mul" if k % 2 else "add", [v, y], t(*shape)))
        gv = fb.emit_output(call_tir("add", [v, y], t(*shape)))
    ex = kiln_compile(IRModule({"mul": mul, "add": add, "main": fb.finish(gv)}), "llvm")
    assert ex.stats.arena_size == 2 * 64 * 64 * 4
    xs, ys = rng.standard_normal(shape).astype(F32), rng.uniform(0.5, 1.0, shape).astype(F32)
    expect = xs
    for k in range(9):
        expect = expect * ys if k % 2 else expect + ys
    expect = expect + ys
    out = VirtualMachine(ex, kiln.cpu())["main"](_nd(xs), _nd(ys))
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-5)


def test_extern_function(rng):
    @kiln.register_func("test_exe.relu", override=True)
    def relu(x, out):
        np.maximum(np.from_dlpack(x), 0, out=np.from_dlpack(out))

    x = GraphVar("x", t(3, 5))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        lv = fb.emit(call_dps_packed("test_exe.relu", [x], t(3, 5)))
        gv = fb.emit_output(call_tir("add", [lv, x], t(3, 5)))
    mod = IRModule({"add": _binary("C", lambda p, q: p + q, (3, 5)), "main": fb.finish(gv)})
    xs = rng.standard_normal((3, 5)).astype(F32)
    out = VirtualMachine(kiln_compile(mod, "llvm"), kiln.cpu())["main"](_nd(xs))
    np.testing.assert_allclose(out.numpy(), np.maximum(xs, 0) + xs, rtol=1e-6)


def test_tuples_in_and_out(rng):
    A = te.placeholder((4,), F32, name="A")
    split = te.create_prim_func([A, te.compute((4,), lambda i: A[i] + 1.0, name="B"),
                                 te.compute((4,), lambda i: A[i] * 2.0, name="C")])
    x = GraphVar("x", t(4))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        pair = fb.emit(call_tir("split", [x], TupleType((t(4), t(4)))))
        s = fb.emit(call_tir("add", [TupleGetItem(pair, 0), TupleGetItem(pair, 1)], t(4)))
        gv = fb.emit_output(GraphTuple((s, TupleGetItem(pair, 1))))
    mod = IRModule({"split": split, "add": _binary("C", lambda p, q: p + q, (4,)), "main": fb.finish(gv)})
    xs = rng.standard_normal(4).astype(F32)
    out = VirtualMachine(kiln_compile(mod, "llvm"), kiln.cpu())["main"](_nd(xs))
    first, second = out[0], out[1]
    np.testing.assert_allclose(first.numpy(), (xs + 1) + 2 * xs, rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), 2 * xs, rtol=1e-6)


def test_symbolic_batch(rng):
    n = Var("n", "int64")
    A = te.placeholder((n, 3), F32, name="A")
    double = te.create_prim_func([A, te.compute((n, 3), lambda i, j: A[i, j] * 2.0, name="B")])
    x = GraphVar("x", t(n, 3))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        lv = fb.emit(call_tir("double", [x], t(n, 3)))
        gv = fb.emit_output(call_tir("double", [lv], t(n, 3)))
    vm = VirtualMachine(kiln_compile(IRModule({"double": double, "main": fb.finish(gv)}), "llvm"), kiln.cpu())
    for rows in (1, 5):
        xs = rng.standard_normal((rows, 3)).astype(F32)
        np.testing.assert_allclose(vm["main"](_nd(xs)).numpy(), 4 * xs, rtol=1e-6)


def test_exported_library_runs(rng, tmp_path):
    x = GraphVar("x", t(6))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(call_tir("add", [x, Constant(np.arange(6, dtype=F32))], t(6)))
    ex = kiln_compile(IRModule({"add": _binary("C", lambda p, q: p + q, (6,)), "main": fb.finish(gv)}), "llvm")
    path = ex.export_library(tmp_path / "model.so")
    vm = VirtualMachine(kiln.load_module(path), kiln.cpu())
    xs = rng.standard_normal(6).astype(F32)
    np.testing.assert_allclose(vm["main"](_nd(xs)).numpy(), xs + np.arange(6), rtol=1e-6)


def test_wrong_argument_is_a_clear_error():
    x = GraphVar("x", t(1, 4))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(call_tir("add", [x, Constant(np.ones((1, 4), F32))], t(1, 4)))
    ex = kiln_compile(IRModule({"add": _binary("C", lambda p, q: p + q, (1, 4)), "main": fb.finish(gv)}), "llvm")
    vm = VirtualMachine(ex, kiln.cpu())
    with pytest.raises(Exception, match=r"main: argument 0 'x' expected shape \(1, 4\), got \(1, 5\)"):
        vm["main"](_nd(np.zeros((1, 5), F32)))


def test_api_section_3_script_bind_params_extern(rng):
    """API.md section 3: a script module with call_tir + call_dps_packed, weights bound as
    constants, compiled and run."""
    from kiln.script import T, R

    @kiln.script.ir_module
    class Net:
        @T.prim_func
        def linear0(X: T.Buffer((1, 16), "float32"), W: T.Buffer((8, 16), "float32"),
                    B: T.Buffer((8,), "float32"), Z: T.Buffer((1, 8), "float32")):
            for i, j, k in T.grid(1, 8, 16):
                with T.block("Z"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        Z[vi, vj] = B[vj]
                    Z[vi, vj] = Z[vi, vj] + X[vi, vk] * W[vj, vk]

        @R.function
        def main(x: R.Tensor((1, 16), "float32"), w0: R.Tensor((8, 16), "float32"),
                 b0: R.Tensor((8,), "float32")):
            with R.dataflow():
                lv0 = R.call_tir(Net.linear0, (x, w0, b0), R.Tensor((1, 8), "float32"))
                lv1 = R.call_dps_packed("env.relu", (lv0,), R.Tensor((1, 8), "float32"))
                R.output(lv1)
            return lv1

    @kiln.register_func("env.relu", override=True)
    def relu(x, out):
        np.maximum(np.from_dlpack(x), 0, out=np.from_dlpack(out))

    w0 = rng.standard_normal((8, 16)).astype(F32)
    b0 = rng.standard_normal(8).astype(F32)
    bound = kiln.transform.bind_params("main", {"w0": w0, "b0": b0})(Net)
    ex = kiln.compile(bound, "llvm")
    assert ex.stats.num_constants == 2 and ex.spec.externs == ["env.relu"]
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    xs = rng.standard_normal((1, 16)).astype(F32)
    np.testing.assert_allclose(vm["main"](_nd(xs)).numpy(), np.maximum(xs @ w0.T + b0, 0), rtol=1e-5, atol=1e-5)


def test_same_tensor_twice_as_input():
    # Read-only parameters may alias (kernel ABI v2 marks the written ones).
    x = GraphVar("x", t(4))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(call_tir("add", [x, x], t(4)))
    ex = kiln_compile(IRModule({"add": _binary("C", lambda p, q: p + q, (4,)), "main": fb.finish(gv)}), "llvm")
    xs = np.arange(4, dtype=F32)
    np.testing.assert_allclose(VirtualMachine(ex, kiln.cpu())["main"](_nd(xs)).numpy(), 2 * xs)
