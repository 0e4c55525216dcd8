"""layer_norm, rms_norm, group_norm, batch_norm (inference)."""
import pytest

from kiln import ops

LN_CASES = [((2, 5), (-1,)), ((3, 4, 6), (-1,)), ((2, 3, 4), (1, 2)), ((2, 3, 4), (-2,)),
            ((4, 3), (0,)), ((2, 3, 4), (0, 2))]


@pytest.mark.parametrize("shape,axes", LN_CASES)
def test_layer_norm(shape, axes, check_op, rand):
    pshape = tuple(shape[a] for a in sorted(a % len(shape) for a in axes))
    check_op("layer_norm", [rand(shape, seed=1) + 3, rand(pshape, seed=2), rand(pshape, seed=3)],
             {"axes": axes})


def test_layer_norm_defaults_eps_and_dtypes(check_op, rand):
    check_op("layer_norm", [rand((3, 8)), rand((8,), seed=2), rand((8,), seed=3)])
    check_op("layer_norm", [rand((3, 8)), rand((8,), seed=2), rand((8,), seed=3)], {"eps": 0.5})
    check_op("layer_norm", [rand((3, 16), "float16"), rand((16,), "float16", seed=2),
                            rand((16,), "float16", seed=3)])
    check_op("layer_norm", [rand((2, 4), "float64"), rand((4,), "float64", seed=2),
                            rand((4,), "float64", seed=3)])


def test_layer_norm_larger_compiled_only(check_op, rand):
    check_op("layer_norm", [rand((16, 256)), rand((256,), seed=2), rand((256,), seed=3)],
             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,axes", [((2, 6), (-1,)), ((2, 3, 4), (-1,)), ((2, 3, 4), (1, 2))])
def test_rms_norm(shape, axes, check_op, rand):
    pshape = tuple(shape[a] for a in sorted(a % len(shape) for a in axes))
    check_op("rms_norm", [rand(shape, seed=1), rand(pshape, seed=2)], {"axes": axes})


def test_rms_norm_eps_and_float16(check_op, rand):
    check_op("rms_norm", [rand((3, 8)), rand((8,), seed=2)], {"eps": 1e-2})
    check_op("rms_norm", [rand((3, 16), "float16"), rand((16,), "float16", seed=2)])


@pytest.mark.parametrize("shape,groups", [((2, 6, 3, 2), 3), ((2, 4, 5), 2), ((1, 4, 2, 2), 4),
                                          ((2, 4), 1), ((1, 6, 2, 2, 2), 2)])
def test_group_norm(shape, groups, check_op, rand):
    C = shape[1]
    check_op("group_norm", [rand(shape, seed=1), rand((C,), seed=2), rand((C,), seed=3)],
             {"num_groups": groups, "eps": 1e-5})


@pytest.mark.parametrize("shape,axis", [((2, 3, 4, 4), 1), ((4, 3), 1), ((2, 5, 3), -1), ((3, 2, 2), 0)])
def test_batch_norm(shape, axis, check_op, rand):
    C = shape[axis]
    var = rand((C,), low=0.1, high=2.0, seed=5)
    check_op("batch_norm", [rand(shape, seed=1), rand((C,), seed=2), rand((C,), seed=3),
                            rand((C,), seed=4), var], {"axis": axis})


def test_batch_norm_default_axis_and_float16(check_op, rand):
    var = rand((3,), "float16", low=0.5, high=2.0, seed=5)
    check_op("batch_norm", [rand((2, 3, 2), "float16", seed=1), rand((3,), "float16", seed=2),
                            rand((3,), "float16", seed=3), rand((3,), "float16", seed=4), var])


def test_patterns():
    assert ops.get("layer_norm").pattern == "reduce"
    assert ops.get("batch_norm").pattern == "broadcast"


def test_errors(typed, op_error):
    x = typed((2, 3, 4))
    with op_error("layer_norm: gamma must have shape (4,), got (3,)"):
        ops.call("layer_norm", x, typed((3,)), typed((4,)))
    with op_error("layer_norm: beta must have shape (3, 4), got (4,)"):
        ops.call("layer_norm", x, typed((3, 4)), typed((4,)), axes=(1, 2))
    with op_error("layer_norm: axes 3 is out of range for a 3-D input of shape (2, 3, 4)"):
        ops.call("layer_norm", x, typed((4,)), typed((4,)), axes=(3,))
    with op_error("layer_norm: eps=-1 must be a non-negative number"):
        ops.call("layer_norm", x, typed((4,)), typed((4,)), eps=-1)
    with op_error("layer_norm: dtypes do not match: x float32, gamma float16, beta float32"):
        ops.call("layer_norm", x, typed((4,), "float16"), typed((4,)))
    with op_error("rms_norm: weight must have shape (4,), got (2,)"):
        ops.call("rms_norm", x, typed((2,)))
    with op_error("group_norm: 3 channels of x (2, 3, 4) do not split into num_groups=2 groups"):
        ops.call("group_norm", x, typed((3,)), typed((3,)), num_groups=2)
    with op_error("group_norm: num_groups=None must be a positive int"):
        ops.call("group_norm", x, typed((3,)), typed((3,)))
    with op_error("batch_norm: moving_var must have shape (3,), got (4,)"):
        ops.call("batch_norm", x, typed((3,)), typed((3,)), typed((3,)), typed((4,)))
    with op_error("batch_norm: input dtype int32 is not supported"):
        ops.call("batch_norm", *[typed((3,), "int32")] * 5, axis=0)


def test_symbolic_layer_norm(check_op_symbolic):
    check_op_symbolic("layer_norm", [("b", "s", 8), (8,), (8,)], expect_shape=("b", "s", 8),
                      sizes=[{"b": 1, "s": 2}, {"b": 2, "s": 5}])


def test_symbolic_group_norm_spatial(check_op_symbolic):
    check_op_symbolic("group_norm", [("n", 4, "h"), (4,), (4,)], attrs={"num_groups": 2},
                      expect_shape=("n", 4, "h"), sizes=[{"n": 1, "h": 3}, {"n": 2, "h": 6}])
