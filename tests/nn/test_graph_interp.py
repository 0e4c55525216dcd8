"""kiln.ir.graph_interp: the reference interpreter for graph functions."""
import numpy as np
import pytest

from kiln import ops, te
from kiln.ir import IRModule, Var
from kiln.ir.graph import (Constant, GraphVar, TensorType, Tuple, TupleGetItem,
                           call_dps_packed, call_tir)
from kiln.ir.graph_builder import FunctionBuilder
from kiln.ir.graph_interp import InterpretError, interpret


def relu_func(shape=("n", 3)):
    n = Var("n")
    x = GraphVar("x", TensorType(tuple(n if d == "n" else d for d in shape), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit(ops.call("relu", x))
        z = fb.emit_output(ops.call("add", y, Constant(np.float32(1))))
    return fb.finish(z), n


def test_operator_calls():
    f, _ = relu_func()
    x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    np.testing.assert_array_equal(interpret(f, [x]), np.maximum(x, 0) + 1)


def test_argument_checks():
    f, _ = relu_func()
    with pytest.raises(InterpretError, match=r"takes 1 argument\(s\) \(x\), got 2"):
        interpret(f, [np.zeros((1, 3), "float32")] * 2)
    with pytest.raises(InterpretError, match="argument 0 'x': expected dtype float32, got float64"):
        interpret(f, [np.zeros((1, 3))])
    with pytest.raises(InterpretError, match=r"expected shape \(n, 3\)"):
        interpret(f, [np.zeros((1, 4), "float32")])


def test_symbolic_dims_must_agree():
    n = Var("n")
    x = GraphVar("x", TensorType((n,), "float32"))
    y = GraphVar("y", TensorType((n,), "float32"))
    fb = FunctionBuilder([x, y])
    with fb.dataflow():
        z = fb.emit_output(ops.call("add", x, y))
    f = fb.finish(z)
    np.testing.assert_array_equal(interpret(f, [np.ones(2, "float32")] * 2), np.full(2, 2, "float32"))
    with pytest.raises(InterpretError, match=r"argument 1 'y': expected shape \(n,\) \(= \(2,\)\), got \(3,\)"):
        interpret(f, [np.ones(2, "float32"), np.ones(3, "float32")])


def test_tuples_and_body():
    x = GraphVar("x", TensorType((6,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        parts = fb.emit(ops.call("split", x, indices_or_sections=3))
        a = fb.emit_output(TupleGetItem(parts, 2))
    f = fb.finish(Tuple((a, x)))
    xs = np.arange(6, dtype="float32")
    out = interpret(f, [xs])
    assert isinstance(out, tuple)
    np.testing.assert_array_equal(out[0], xs[4:])


def test_call_tir_and_dps_packed():
    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    prim = te.create_prim_func([A, B])
    x = GraphVar("x", TensorType((4,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit(call_tir("double", [x], TensorType((4,), "float32")))
        z = fb.emit_output(call_dps_packed("env.neg", [y], TensorType((4,), "float32")))
    f = fb.finish(z)
    mod = IRModule({"double": prim, "main": f})

    def neg(a, out):
        np.negative(a, out=out)
    xs = np.arange(4, dtype="float32")
    np.testing.assert_array_equal(interpret(mod, [xs], extern={"env.neg": neg}), -2 * xs)
    with pytest.raises(InterpretError, match="no Python function for 'env.neg'"):
        interpret(mod, [xs])
    with pytest.raises(InterpretError, match="call_tir needs the IRModule"):
        interpret(f, [xs])


def test_value_checked_against_its_type():
    x = GraphVar("x", TensorType((2,), "float32"))
    # a call whose recorded type disagrees with what the reference computes is caught
    from kiln.ir.graph import Call
    wrong = Call("relu", (x,), (), TensorType((3,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit_output(wrong)
    with pytest.raises(InterpretError, match=r"gv0 = relu: expected shape \(3,\)"):
        interpret(fb.finish(y), [np.ones(2, "float32")])
