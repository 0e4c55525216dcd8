"""``scatter_nd`` (kiln/ops/scatter.py) through check_op: shape rule, the hand-written PrimFunc
(reference evaluator and compiled) and the numpy reference agree; plus the reference against
a direct numpy loop and the shape errors."""
import numpy as np
import pytest

from kiln import ops


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_elements(check_op, rand, reduction):
    data = rand((4, 3))
    idx = np.array([[0, 1], [3, 2], [-1, 0], [0, 1]], "int64")      # a duplicate, a negative
    check_op("scatter_nd", [data, idx, rand((4,), seed=1)], {"reduction": reduction})


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_slices(check_op, rand, reduction):
    data = rand((4, 2, 3))
    idx = np.array([[[1], [3]], [[0], [1]]], "int32")               # (2, 2, 1): rows of (2, 3)
    check_op("scatter_nd", [data, idx, rand((2, 2, 2, 3), seed=2)], {"reduction": reduction})


def test_scatter_nd_int_data(check_op, rand):
    check_op("scatter_nd", [rand((5,), "int32", -5, 5), np.array([[4], [0]], "int64"),
                            rand((2,), "int32", -5, 5, seed=3)], {"reduction": "add"})


def test_scatter_nd_reference_matches_a_loop(rand):
    data, upd = rand((3, 4)), rand((2, 4), seed=4)
    idx = np.array([[2], [0]], "int64")
    want = data.copy()
    want[2], want[0] = upd[0], upd[1]
    np.testing.assert_array_equal(ops.get("scatter_nd").reference(data, idx, upd), want)


def test_scatter_nd_errors(op_error, typed):
    with op_error("scatter_nd: updates (3,) must have shape (2,)"):
        ops.call("scatter_nd", typed((4, 3)), typed((2, 2), "int64", "i"), typed((3,), name="u"))
    with op_error("scatter_nd: indices (2, 3) need a static last dim between 1 and the rank of data (4, 3)"):
        ops.call("scatter_nd", typed((4, 3)), typed((2, 3), "int64", "i"), typed((2,), name="u"))
    with op_error("scatter_nd: reduction must be one of none, add, mul, max, min, got 'sum'"):
        ops.call("scatter_nd", typed((4,)), typed((1, 1), "int64", "i"), typed((1,), name="u"),
                 reduction="sum")
