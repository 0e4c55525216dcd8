"""matmul (numpy semantics, batched, broadcast batch dims, 1-D cases) and linear."""
import pytest

from kiln import ops
from kiln.ir import Var
from kiln.ir.graph import GraphVar, TensorType

MATMUL_SHAPES = [((3, 4), (4, 5)), ((1, 7), (7, 1)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 2)),
                 ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 3)), ((2, 3, 4), (4,)),
                 ((5,), (5,)), ((4,), (2, 4, 3))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_shapes(sa, sb, check_op, rand):
    check_op("matmul", [rand(sa, seed=1), rand(sb, seed=2)])


def test_matmul_dtypes(check_op, rand):
    check_op("matmul", [rand((3, 8), "float16", seed=1), rand((8, 2), "float16", seed=2)])
    check_op("matmul", [rand((3, 4), "float64", seed=1), rand((4, 2), "float64", seed=2)])
    check_op("matmul", [rand((3, 4), "int32", -5, 5, seed=1), rand((4, 2), "int32", -5, 5, seed=2)])


def test_matmul_larger_compiled_only(check_op, rand):
    check_op("matmul", [rand((32, 64), seed=1), rand((64, 48), seed=2)], rtol=1e-4, atol=1e-4)


def test_matmul_is_one_reduction_block(check_op, rand):
    func = check_op("matmul", [rand((2, 3, 4), seed=1), rand((4, 5), seed=2)])
    text = func.script()
    assert text.count("T.block(") == 1
    assert 'T.block("matmul")' in text


@pytest.mark.parametrize("sx", [(5,), (3, 5), (2, 3, 5)])
def test_linear(sx, check_op, rand):
    check_op("linear", [rand(sx, seed=1), rand((4, 5), seed=2)])


def test_linear_float16_and_larger(check_op, rand):
    check_op("linear", [rand((2, 16), "float16", seed=1), rand((3, 16), "float16", seed=2)])
    check_op("linear", [rand((8, 128), seed=1), rand((64, 128), seed=2)], rtol=1e-4, atol=1e-4)


def test_errors(typed, op_error):
    with op_error("matmul: contracted dimensions 4 and 5 differ (a (3, 4) and b (5, 2))"):
        ops.call("matmul", typed((3, 4)), typed((5, 2)))
    with op_error("matmul: batch dimensions (2,) and (3,) do not broadcast (a (2, 3, 4) and b (3, 4, 5))"):
        ops.call("matmul", typed((2, 3, 4)), typed((3, 4, 5)))
    with op_error("matmul: inputs must have at least 1 dimension"):
        ops.call("matmul", typed(()), typed((3,)))
    with op_error("matmul: dtypes do not match: a float32, b float16"):
        ops.call("matmul", typed((3, 4)), typed((4, 2), "float16"))
    with op_error("linear: x (2, 3) has 3 input features but weight (4, 5) expects 5"):
        ops.call("linear", typed((2, 3)), typed((4, 5)))
    with op_error("linear: weight must be 2-D [out_features, in_features], got shape (5,)"):
        ops.call("linear", typed((2, 5)), typed((5,)))


def test_inferred_shapes(typed):
    assert ops.call("matmul", typed((2, 1, 3, 4)), typed((5, 4, 6))).ty.static_shape() == (2, 5, 3, 6)
    assert ops.call("matmul", typed((4,)), typed((4,))).ty.static_shape() == ()
    assert ops.call("linear", typed((7, 2, 3)), typed((9, 3))).ty.static_shape() == (7, 2, 9)


def test_symbolic_rules(op_error):
    n, k = Var("n", "int64"), Var("k", "int64")
    a = GraphVar("a", TensorType((n, k), "float32"))
    b = GraphVar("b", TensorType((k, 8), "float32"))
    ty = ops.call("matmul", a, b).ty
    assert ty.shape[0] is n and ty.shape[1].value == 8
    with op_error("matmul: contracted dimensions k and 8 cannot be proven equal"):
        ops.call("matmul", a, GraphVar("c", TensorType((8, 8), "float32")))


def test_symbolic_linear_runs_at_two_sizes(check_op_symbolic):
    check_op_symbolic("linear", [("b", "s", 16), (8, 16)], expect_shape=("b", "s", 8),
                      sizes=[{"b": 1, "s": 3}, {"b": 2, "s": 7}])


def test_symbolic_matmul_runs_at_two_sizes(check_op_symbolic):
    check_op_symbolic("matmul", [("n", "k"), ("k", 5)], expect_shape=("n", 5),
                      sizes=[{"n": 2, "k": 3}, {"n": 6, "k": 9}])
