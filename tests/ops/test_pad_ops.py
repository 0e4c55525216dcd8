"""``pad`` in its reflect, edge and wrap modes (kiln/ops/pad.py) against numpy.pad, through
check_op (shape rule, te definition on the reference evaluator and compiled, numpy reference).
Constant padding is tested with the other data-movement ops in test_transform_ops.py."""
import numpy as np
import pytest

from kiln import ops

MODES = ["reflect", "edge", "wrap"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,pads", [
    ((5,), ((2, 3),)),
    ((2, 4), ((1, 0), (3, 2))),
    ((2, 3, 4), ((0, 0), (2, 2), (1, 3))),
    ((3, 4), ((0, 0), (0, 0))),
])
def test_pad_modes(check_op, rand, mode, shape, pads):
    x = rand(shape)
    check_op("pad", [x], {"pad_width": pads, "mode": mode})
    np.testing.assert_array_equal(ops.get("pad").reference(x, pads, mode=mode), np.pad(x, pads, mode=mode))


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_larger_than_the_dim(check_op, rand, mode):
    """Pads longer than the dim repeat the pattern, as numpy.pad does."""
    check_op("pad", [rand((3, 2))], {"pad_width": ((7, 5), (4, 3)), "mode": mode})


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_size_one_dim(check_op, rand, mode):
    check_op("pad", [rand((1, 3))], {"pad_width": ((2, 3), (1, 1)), "mode": mode})


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_int_and_bool(check_op, rand, mode):
    check_op("pad", [rand((3, 3), "int32", -5, 5)], {"pad_width": ((1, 2), (2, 1)), "mode": mode})
    check_op("pad", [rand((2, 3), "bool")], {"pad_width": ((1, 1), (1, 2)), "mode": mode})


@pytest.mark.parametrize("mode", MODES)
def test_pad_modes_symbolic(check_op_symbolic, mode):
    # a padded symbolic dim would make the output dim n + k, which a standalone kernel's
    # parameters cannot have; the symbolic dim rides along unpadded
    check_op_symbolic("pad", [("n", 4)], attrs={"pad_width": ((0, 0), (3, 1)), "mode": mode},
                      sizes=({"n": 1}, {"n": 2}, {"n": 5}))


def test_pad_mode_errors(op_error, typed):
    with op_error("pad: mode must be one of constant, reflect, edge, wrap, got 'symmetric'"):
        ops.call("pad", typed((2, 3)), pad_width=((1, 1), (0, 0)), mode="symmetric")
    with op_error("pad: mode=reflect needs pads >= 0, got ((-1, 1), (0, 0))"):
        ops.call("pad", typed((2, 3)), pad_width=((-1, 1), (0, 0)), mode="reflect")
    with op_error("pad: mode=edge cannot pad dimension 0 of (0, 3): it is empty"):
        ops.call("pad", typed((0, 3)), pad_width=((1, 0), (0, 0)), mode="edge")
