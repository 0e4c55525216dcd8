"""Reductions: sum/mean/max/min/prod, argmax/argmin, softmax/log_softmax."""
import numpy as np
import pytest

from kiln import ops
from kiln.ir import Var
from kiln.ir.graph import GraphVar, TensorType

AXES = [None, 0, 1, -1, (0, 2), (-1, -3), ()]


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reduce_axes_keepdims(name, axis, keepdims, check_op, rand):
    check_op(name, [rand((2, 3, 4))], {"axis": axis, "keepdims": keepdims})


@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, True), ((0, 1), False), (-1, False)])
def test_prod(axis, keepdims, check_op, rand):
    check_op("prod", [rand((3, 4), low=0.5, high=1.5)], {"axis": axis, "keepdims": keepdims})


def test_prod_int(check_op, rand):
    check_op("prod", [rand((2, 5), "int32", -3, 3)], {"axis": 1})


@pytest.mark.parametrize("name", ["sum", "max", "min"])
def test_reduce_int(name, check_op, rand):
    check_op(name, [rand((3, 5), "int32", -100, 100)], {"axis": -1})
    check_op(name, [rand((4, 2), "int64", -100, 100)], {"axis": None})


def test_reduce_float16_and_float64(check_op, rand):
    check_op("sum", [rand((4, 16), "float16")], {"axis": 1})
    check_op("mean", [rand((4, 16), "float16")], {"axis": -1, "keepdims": True})
    check_op("max", [rand((3, 3), "float64")], {"axis": 0})


def test_reduce_defaults_reduce_everything(check_op, rand):
    check_op("sum", [rand((2, 3))])
    check_op("max", [rand((5,))])


def test_reduce_larger_compiled_only(check_op, rand):
    check_op("sum", [rand((64, 100))], {"axis": 1}, rtol=1e-5, atol=1e-4)
    check_op("mean", [rand((32, 17, 9))], {"axis": (0, 2)})


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), (-1, False), (None, True)])
def test_argmax_argmin(name, axis, keepdims, check_op, rand):
    check_op(name, [rand((3, 4, 2), seed=4)], {"axis": axis, "keepdims": keepdims})


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_first_occurrence_with_ties(name, check_op):
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [0, -1, 5, -1]], "int32")
    check_op(name, [x], {"axis": 1})
    check_op(name, [x], {"axis": None})
    check_op(name, [x], {"axis": 0})


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax(name, axis, check_op, rand):
    check_op(name, [rand((3, 5, 4), low=-5, high=5)], {"axis": axis})


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_is_numerically_stable(name, check_op):
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.5, -999.0]], "float32")
    check_op(name, [x])


def test_softmax_float16_and_float64(check_op, rand):
    check_op("softmax", [rand((4, 8), "float16")])
    check_op("log_softmax", [rand((2, 6), "float64")])


def test_softmax_blocks_are_max_exp_sum_div(check_op, rand):
    func = check_op("softmax", [rand((2, 3))])
    text = func.script()
    for block in ("softmax_max", "softmax_exp", "softmax_sum", '"softmax"'):
        assert block in text


# ---- shape rules and errors -----------------------------------------------------------------
def test_inferred_shapes(typed):
    x = typed((2, 3, 4))
    assert ops.call("sum", x).ty.static_shape() == ()
    assert ops.call("sum", x, axis=(0, -1), keepdims=True).ty.static_shape() == (1, 3, 1)
    assert ops.call("argmax", x, axis=1).ty.dtype == "int64"
    assert ops.call("argmin", x, axis=None, keepdims=True).ty.static_shape() == (1, 1, 1)
    assert ops.call("softmax", x, axis=0).ty.static_shape() == (2, 3, 4)


def test_errors(typed, op_error):
    x = typed((2, 3))
    with op_error("sum: axis 2 is out of range for a 2-D input of shape (2, 3)"):
        ops.call("sum", x, axis=2)
    with op_error("mean: axis (1, -1) repeats an axis"):
        ops.call("mean", x, axis=(1, -1))
    with op_error("sum: unknown attribute(s) keepdim; it takes: axis, keepdims"):
        ops.call("sum", x, keepdim=True)
    with op_error("mean: input dtype int32 is not supported"):
        ops.call("mean", typed((2,), "int32"))
    with op_error("argmax: axis=(0, 1) must be an int or None"):
        ops.call("argmax", x, axis=(0, 1))
    with op_error("softmax: axis -3 is out of range for a 2-D input of shape (2, 3)"):
        ops.call("softmax", x, axis=-3)
    with op_error("softmax: input dtype int32 is not supported"):
        ops.call("softmax", typed((2,), "int32"))
    with op_error("sum: axis must be an int, got 'x'"):
        ops.call("sum", x, axis="x")


# ---- symbolic ---------------------------------------------------------------------------------
def test_symbolic_sum_keeps_var():
    n = Var("n", "int64")
    x = GraphVar("x", TensorType((n, 8), "float32"))
    assert ops.call("sum", x, axis=1).ty.shape[0] is n
    assert ops.call("sum", x, axis=0, keepdims=True).ty.static_shape() == (1, 8)


def test_symbolic_mean_over_symbolic_axis(check_op_symbolic):
    check_op_symbolic("mean", [(3, "n")], attrs={"axis": -1}, expect_shape=(3,),
                      sizes=[{"n": 2}, {"n": 11}])


def test_symbolic_softmax(check_op_symbolic):
    check_op_symbolic("softmax", [("n", "m")], attrs={"axis": -1}, expect_shape=("n", "m"),
                      sizes=[{"n": 2, "m": 3}, {"n": 5, "m": 16}])


def test_symbolic_argmax(check_op_symbolic):
    check_op_symbolic("argmax", [("n", 4)], attrs={"axis": None}, expect_shape=(),
                      sizes=[{"n": 1}, {"n": 6}])
