"""Elementwise operators: unary, binary with broadcasting, where; shape rules and errors."""
import numpy as np
import pytest

from kiln import ops
from kiln.ir import Var
from kiln.ir.graph import GraphVar, TensorType

FLOAT_UNARY = ["exp", "tanh", "sigmoid", "erf", "silu", "floor", "ceil", "round", "sin", "cos",
               "neg", "abs", "relu"]


@pytest.mark.parametrize("name", FLOAT_UNARY)
def test_unary_float32(name, check_op, rand):
    check_op(name, [rand((3, 5), low=-3, high=3)])


@pytest.mark.parametrize("name", ["log", "sqrt", "rsqrt"])
def test_unary_positive_domain(name, check_op, rand):
    check_op(name, [rand((4, 3), low=0.1, high=5.0)])


@pytest.mark.parametrize("name", ["exp", "tanh", "relu", "sigmoid"])
def test_unary_float16_and_float64(name, check_op, rand):
    check_op(name, [rand((7,), "float16")])
    check_op(name, [rand((2, 3), "float64")])


@pytest.mark.parametrize("name", ["neg", "abs", "relu"])
def test_unary_int(name, check_op, rand):
    check_op(name, [rand((2, 5), "int32", low=-9, high=9)])


def test_round_is_half_to_even(check_op):
    check_op("round", [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, 3.7], "float32")])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate, check_op, rand):
    check_op("gelu", [rand((2, 8), low=-4, high=4)], {"approximate": approximate})


def test_gelu_default_is_erf(check_op, rand):
    check_op("gelu", [rand((6,))])


def test_logical_not(check_op, rand):
    check_op("logical_not", [rand((3, 4), "bool")])


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float32", "float16"),
                                     ("float32", "bool"), ("bool", "float32"), ("int64", "int8"),
                                     ("float64", "float32"), ("int32", "bool"), ("float32", "uint8")])
def test_cast(src, dst, check_op, rand):
    low = 0 if dst == "uint8" else -5
    x = rand((3, 4), src, low=low, high=5)
    if src.startswith("float"):
        x[0, :2] = 0  # exact zeros for the bool case
    check_op("cast", [x], {"dtype": dst})


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_dtypes(dtype, check_op, rand):
    """uint16/32/64 (ONNX UINT16/32/64): arithmetic wraps as unsigned, compares
    as unsigned (values above the signed range included), casts to and from float."""
    big = np.iinfo(dtype).max
    a = rand((3, 5), dtype, low=0, high=1000)
    b = rand((3, 5), dtype, low=1, high=1000)
    a[0, :3] = [big, big - 1, big // 2 + 3]   # past the signed range of the same width
    for op in ("add", "subtract", "multiply", "maximum", "minimum"):
        check_op(op, [a, b])
    check_op("less", [a, b])
    check_op("cast", [a], {"dtype": "float64"})
    check_op("cast", [rand((4,), "float32", low=0, high=60000)], {"dtype": dtype})


@pytest.mark.parametrize("attrs", [{"min": -1.0, "max": 0.5}, {"min": 0.0}, {"max": 1.0}])
def test_clip(attrs, check_op, rand):
    check_op("clip", [rand((4, 4))], attrs)


def test_clip_int(check_op, rand):
    check_op("clip", [rand((10,), "int32", low=-10, high=10)], {"min": -3, "max": 4})


def test_zero_dim_tensor(check_op):
    check_op("exp", [np.array(0.5, "float32")])
    check_op("add", [np.array(1.5, "float32"), np.arange(3, dtype="float32")])


# ---- binary ---------------------------------------------------------------------------------
BINARY_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 5)), ((2, 1, 3), (4, 1)),
                 ((1,), (3, 2)), ((), (2, 2))]


@pytest.mark.parametrize("sa,sb", BINARY_SHAPES)
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "maximum", "minimum"])
def test_binary_arith_broadcast(name, sa, sb, check_op, rand):
    check_op(name, [rand(sa, seed=1), rand(sb, seed=2)])


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "maximum", "minimum"])
def test_binary_int(name, check_op, rand):
    check_op(name, [rand((3, 4), "int32", -50, 50, seed=1), rand((4,), "int32", -50, 50, seed=2)])


def test_binary_int64_and_float16(check_op, rand):
    check_op("add", [rand((2, 3), "int64", -9, 9), rand((2, 1), "int64", -9, 9)])
    check_op("multiply", [rand((5,), "float16"), rand((5,), "float16", seed=3)])


def test_divide_and_power(check_op, rand):
    check_op("divide", [rand((3, 4)), rand((4,), low=0.5, high=2.0)])
    check_op("power", [rand((3, 4), low=0.1, high=3.0), rand((3, 1), low=-2, high=2)])
    check_op("divide", [rand((4,), "float64"), rand((4,), "float64", low=1, high=2)])


@pytest.mark.parametrize("name", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"])
def test_comparisons(name, check_op, rand):
    a = rand((3, 4), "int32", -2, 2, seed=1)
    b = rand((4,), "int32", -2, 2, seed=2)
    check_op(name, [a, b])
    check_op(name, [a.astype("float32"), b.astype("float32")])


def test_equal_on_bool(check_op, rand):
    check_op("equal", [rand((6,), "bool", seed=1), rand((6,), "bool", seed=2)])


@pytest.mark.parametrize("name", ["logical_and", "logical_or"])
def test_logical(name, check_op, rand):
    check_op(name, [rand((2, 4), "bool", seed=1), rand((1, 4), "bool", seed=2)])


def test_where(check_op, rand):
    check_op("where", [rand((3, 1), "bool"), rand((3, 4), seed=1), rand((4,), seed=2)])
    check_op("where", [rand((2, 3), "bool"), rand((2, 3), "int32", -5, 5), rand((), "int32", -5, 5)])


# ---- errors ---------------------------------------------------------------------------------
def test_shape_mismatch_error(typed, op_error):
    with op_error("add: shapes (2, 3) and (4,) do not broadcast"):
        ops.call("add", typed((2, 3)), typed((4,)))
    with op_error("where: shapes (2,) and (3,) and (3,) do not broadcast"):
        ops.call("where", typed((2,), "bool"), typed((3,)), typed((3,)))


def test_dtype_errors(typed, op_error):
    with op_error("add: dtypes do not match: float32 and int32"):
        ops.call("add", typed((2,)), typed((2,), "int32"))
    with op_error("exp: input dtype int32 is not supported"):
        ops.call("exp", typed((2,), "int32"))
    with op_error("divide: input dtype int32 is not supported"):
        ops.call("divide", typed((2,), "int32"), typed((2,), "int32"))
    with op_error("where: cond must be bool, got float32"):
        ops.call("where", typed((2,)), typed((2,)), typed((2,)))
    with op_error("where: dtypes do not match: x float32, y float16"):
        ops.call("where", typed((2,), "bool"), typed((2,)), typed((2,), "float16"))
    with op_error("logical_and: input dtype float32 is not supported"):
        ops.call("logical_and", typed((2,)), typed((2,)))


def test_attr_errors(typed, op_error):
    with op_error("gelu: approximate='fast'"):
        ops.call("gelu", typed((2,)), approximate="fast")
    with op_error("clip: needs min= or max="):
        ops.call("clip", typed((2,)))
    with op_error("clip: min=2 is greater than max=1"):
        ops.call("clip", typed((2,)), min=2, max=1)
    with op_error("clip: min=0.5 is not an integer but the input is int32"):
        ops.call("clip", typed((2,), "int32"), min=0.5)
    with op_error("cast: dtype='float128'"):
        ops.call("cast", typed((2,)), dtype="float128")
    with op_error("relu: unknown attribute(s) inplace; it takes: none"):
        ops.call("relu", typed((2,)), inplace=True)
    with op_error("add: expected 2 argument(s), got 1"):
        ops.call("add", typed((2,)))


# ---- symbolic shapes ------------------------------------------------------------------------
def test_symbolic_broadcast_rule(op_error):
    n, m = Var("n", "int64"), Var("m", "int64")
    x = GraphVar("x", TensorType((n, 4), "float32"))
    ty = ops.call("add", x, GraphVar("b", TensorType((4,), "float32"))).ty
    assert ty.shape[0] is n and ty.shape[1].value == 4
    ty = ops.call("multiply", x, GraphVar("y", TensorType((1, 1), "float32"))).ty
    assert ty.shape[0] is n
    assert ops.call("add", x, x).ty.shape[0] is n
    with op_error("add: shapes (n, 4) and (m, 4) do not broadcast (cannot prove n == m"):
        ops.call("add", x, GraphVar("y", TensorType((m, 4), "float32")))
    with op_error("add: shapes (n, 4) and (3, 4) do not broadcast"):
        ops.call("add", x, GraphVar("y", TensorType((3, 4), "float32")))


def test_symbolic_add_runs_at_two_sizes(check_op_symbolic):
    _, ty = check_op_symbolic("add", [("n", 4), (4,)], expect_shape=("n", 4),
                              sizes=[{"n": 2}, {"n": 7}])
    assert isinstance(ty.shape[0], Var)


def test_symbolic_unary_and_where(check_op_symbolic):
    check_op_symbolic("gelu", [("n", "m")], expect_shape=("n", "m"),
                      sizes=[{"n": 1, "m": 3}, {"n": 4, "m": 9}])
    check_op_symbolic("where", [("n", 1), (1, 3), ("n", 3)], dtypes=["bool", "float32", "float32"],
                      expect_shape=("n", 3), sizes=[{"n": 2}, {"n": 5}])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_bitwise(dtype, check_op, rand):
    info = np.iinfo(dtype)
    a = rand((4, 6), dtype, low=max(info.min, -1000), high=min(info.max, 1000))
    b = rand((6,), dtype, low=max(info.min, -1000), high=min(info.max, 1000))
    a[0, :2] = [info.max, info.min]
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        check_op(op, [a, b])
    check_op("bitwise_not", [a])


def test_bitwise_bool(check_op, rand):
    a, b = rand((3, 4), "bool", seed=1), rand((3, 4), "bool", seed=2)
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        check_op(op, [a, b])
    check_op("bitwise_not", [a])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32", "uint64"])
def test_shifts_give_zero_past_the_width(dtype, check_op, rand):
    """Shift amounts from -3 to width + 2: in range they shift (right: arithmetic for signed),
    outside every bit is shifted out, 0 or the sign, as ONNX BitShift defines (LLVM would give
    poison)."""
    width = np.dtype(dtype).itemsize * 8
    amounts = np.arange(-3 if dtype.startswith("int") else 0, width + 3).astype(dtype)
    a = rand((5, amounts.size), dtype, low=max(np.iinfo(dtype).min, -100), high=100)
    for op in ("left_shift", "right_shift"):
        check_op(op, [a, np.broadcast_to(amounts, a.shape).copy()])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_remainder(dtype, check_op, rand):
    a, b = rand((4, 6), dtype, low=-20, high=20, seed=1), rand((6,), dtype, low=1, high=7, seed=2)
    b[::2] *= -1
    if dtype.startswith("float"):
        a[0, :4] = [np.inf, -1.0, 3.0, -0.0]
        b[:4] = [3.0, np.inf, -np.inf, 5.0]
    check_op("remainder", [a, b])


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float64", "int64"),
                                     ("uint16", "int16"), ("int8", "uint8"), ("bool", "uint8"),
                                     ("uint8", "bool")])
def test_bitcast(src, dst, check_op, rand):
    x = rand((3, 5), src, low=0 if src == "uint8" and dst == "bool" else -50,
             high=1 if src == "uint8" and dst == "bool" else 50)
    if src.startswith("float"):
        x[0, :3] = [-0.0, np.inf, np.nan]
    check_op("bitcast", [x], {"dtype": dst})


def test_bitcast_needs_the_same_width(typed, op_error):
    with op_error("bitcast: float32 (32 bits) and int16 (16 bits) differ in width"):
        ops.call("bitcast", typed((3,), "float32"), dtype="int16")
