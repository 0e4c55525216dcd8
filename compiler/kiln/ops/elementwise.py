"""Elementwise operators: unary math (pattern ``elemwise``) and binary / ternary operators
with numpy broadcasting (pattern ``broadcast``).

Each operator is one te compute named after the operator (block ``"add"``, ``"relu"``...), so
a default schedule sees a single spatial block.

Dtypes: the inputs of a binary operator must have the same dtype (no implicit promotion; cast
first), except ``where``'s condition, which is bool. Comparisons give bool. Transcendental
operators (exp, log, tanh, erf, gelu...), ``divide`` and ``power`` take floats only.
"""
from __future__ import annotations

import math

import numpy as np

from .. import te
from ..ir import dtype as dt
from ..ir.expr import Call as _Intrinsic
from ..ir.expr import Not
from ..ir.graph import TensorType
from .common import (ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, broadcast_indices,
                     broadcast_shapes, check_dtype, check_same_dtype, error, get_attrs, literal,
                     tensor_args)
from .registry import register

SIGNED_NUMERIC = ("int8", "int16", "int32", "int64") + FLOAT_DTYPES


def _intrinsic(name):
    return lambda v: _Intrinsic(name, (v,), v.dtype)


# ---- numpy helpers for the references ----------------------------------------------------

def _erf_np(x):
    return np.vectorize(math.erf, otypes=["float64"])(np.asarray(x, "float64"))


def _sigmoid_np(x):
    x64 = np.asarray(x, "float64")
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x64))).astype(x.dtype)


def _gelu_np(x, approximate="none"):
    x64 = np.asarray(x, "float64")
    if approximate == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1.0 + _erf_np(x64 / math.sqrt(2.0)))
    return y.astype(x.dtype)


# ---- unary -------------------------------------------------------------------------------

def _register_unary(name, expr, reference, dtypes, doc, out_dtype=None, check_attrs=None,
                    **defaults):
    """``expr(value, attrs) -> PrimExpr`` per element; ``out_dtype(in_dtype, attrs)``."""
    def infer(types, attrs):
        (x,) = tensor_args(name, types, count=1)
        a = get_attrs(name, attrs, **defaults)
        check_dtype(name, x.dtype, dtypes)
        if check_attrs:
            check_attrs(x.dtype, a)
        return TensorType(x.shape, out_dtype(x.dtype, a) if out_dtype else x.dtype)

    def compute(args, attrs):
        (x,) = args
        a = get_attrs(name, attrs, **defaults)
        return te.compute(x.shape, lambda *i: expr(x[i], a), name=name)

    register(name, infer=infer, compute=compute, reference=reference, pattern="elemwise",
             num_args=1, doc=doc)


_register_unary("neg", lambda v, a: -v, lambda x: np.negative(x), SIGNED_NUMERIC,
                "neg(x): -x elementwise.")
_register_unary("abs", lambda v, a: te.abs(v), lambda x: np.abs(x), SIGNED_NUMERIC,
                "abs(x): |x| elementwise.")
_register_unary("exp", lambda v, a: te.exp(v), lambda x: np.exp(x), FLOAT_DTYPES,
                "exp(x): e**x elementwise.")
_register_unary("log", lambda v, a: te.log(v), lambda x: np.log(x), FLOAT_DTYPES,
                "log(x): natural logarithm elementwise (nan below 0, -inf at 0).")
_register_unary("sqrt", lambda v, a: te.sqrt(v), lambda x: np.sqrt(x), FLOAT_DTYPES,
                "sqrt(x): square root elementwise.")
_register_unary("rsqrt", lambda v, a: te.rsqrt(v), lambda x: (1.0 / np.sqrt(x)).astype(x.dtype),
                FLOAT_DTYPES, "rsqrt(x): 1 / sqrt(x) elementwise.")
_register_unary("tanh", lambda v, a: te.tanh(v), lambda x: np.tanh(x), FLOAT_DTYPES,
                "tanh(x): hyperbolic tangent elementwise.")
_register_unary("sigmoid", lambda v, a: te.sigmoid(v), _sigmoid_np, FLOAT_DTYPES,
                "sigmoid(x): 1 / (1 + exp(-x)) elementwise.")
_register_unary("erf", lambda v, a: te.erf(v), lambda x: _erf_np(x).astype(x.dtype), FLOAT_DTYPES,
                "erf(x): the error function elementwise.")
_register_unary("relu", lambda v, a: te.max(v, literal(0, v.dtype)),
                lambda x: np.maximum(x, np.zeros((), x.dtype)), SIGNED_NUMERIC,
                "relu(x): max(x, 0) elementwise.")


def _gelu(v, a):
    if a["approximate"] == "tanh":
        inner = literal(math.sqrt(2.0 / math.pi), v.dtype) * (v + literal(0.044715, v.dtype) * v * v * v)
        return literal(0.5, v.dtype) * v * (literal(1.0, v.dtype) + te.tanh(inner))
    return literal(0.5, v.dtype) * v * (literal(1.0, v.dtype) + te.erf(v * literal(1 / math.sqrt(2.0), v.dtype)))


def _gelu_attrs(dtype, a):
    if a["approximate"] not in ("none", "tanh"):
        raise error("gelu", f"approximate={a['approximate']!r}; expected 'none' or 'tanh'")


_register_unary("gelu", _gelu, _gelu_np, FLOAT_DTYPES,
                "gelu(x, approximate='none'|'tanh'): x * Phi(x) with the exact erf form "
                "0.5*x*(1+erf(x/sqrt(2))), or the tanh approximation "
                "0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3))).",
                check_attrs=_gelu_attrs, approximate="none")
_register_unary("silu", lambda v, a: v * te.sigmoid(v), lambda x: (x * _sigmoid_np(x)).astype(x.dtype),
                FLOAT_DTYPES, "silu(x): x * sigmoid(x) elementwise (a.k.a. swish).")
_register_unary("floor", lambda v, a: _intrinsic("floor")(v), lambda x: np.floor(x), FLOAT_DTYPES,
                "floor(x): largest integer <= x, as a float.")
_register_unary("ceil", lambda v, a: _intrinsic("ceil")(v), lambda x: np.ceil(x), FLOAT_DTYPES,
                "ceil(x): smallest integer >= x, as a float.")
_register_unary("round", lambda v, a: _intrinsic("round")(v), lambda x: np.round(x), FLOAT_DTYPES,
                "round(x): nearest integer, halves to even (numpy's round), as a float.")
_register_unary("sin", lambda v, a: _intrinsic("sin")(v), lambda x: np.sin(x), FLOAT_DTYPES,
                "sin(x) elementwise (radians).")
_register_unary("cos", lambda v, a: _intrinsic("cos")(v), lambda x: np.cos(x), FLOAT_DTYPES,
                "cos(x) elementwise (radians).")
_register_unary("logical_not", lambda v, a: Not(v), lambda x: np.logical_not(x), ("bool",),
                "logical_not(x): not x, for bool tensors.")


# cast(x, dtype=...): numpy's astype. Floats to ints truncate toward zero (out of range is
# undefined, as in C); anything to bool is "!= 0".
def _cast(v, a):
    to = a["dtype"]
    if to == v.dtype:
        return v
    if to == "bool":
        if dt.is_narrow_float(v.dtype):   # compared as a value (-0 is false), not as bits
            v = v.astype("float32")
        return v != literal(0, v.dtype)
    return v.astype(to)


# cast also converts to and from the narrow floats (bfloat16, float8): float32 is their
# arithmetic, cast is their only operator.
_CAST_DTYPES = ALL_DTYPES + dt.NARROW_FLOAT_DTYPES


def _cast_attrs(dtype, a):
    to = a["dtype"]
    if to not in _CAST_DTYPES:
        raise error("cast", f"dtype={to!r} is not a tensor dtype; expected one of {', '.join(_CAST_DTYPES)}")


def _cast_ref(x, dtype=None):
    return np.asarray(x).astype(dt.to_numpy(dtype))


_register_unary("cast", _cast, _cast_ref, _CAST_DTYPES,
                "cast(x, dtype=...): x converted to dtype (numpy astype: floats to ints truncate "
                "toward zero; to bool is x != 0).",
                out_dtype=lambda d, a: a["dtype"], check_attrs=_cast_attrs, dtype=None)


def _clip_attrs(dtype, a):
    lo, hi = a["min"], a["max"]
    if lo is None and hi is None:
        raise error("clip", "needs min= or max= (or both)")
    for k in ("min", "max"):
        v = a[k]
        if v is None:
            continue
        if not isinstance(v, (int, float, np.number)) or isinstance(v, bool):
            raise error("clip", f"{k}={v!r} must be a number")
        if dt.is_int(dtype) and float(v) != int(v):
            raise error("clip", f"{k}={v!r} is not an integer but the input is {dtype}")
    if lo is not None and hi is not None and lo > hi:
        raise error("clip", f"min={lo} is greater than max={hi}")


def _clip(v, a):
    if a["min"] is not None:
        v = te.max(v, literal(a["min"], v.dtype))
    if a["max"] is not None:
        v = te.min(v, literal(a["max"], v.dtype))
    return v


def _clip_ref(x, min=None, max=None):  # noqa: A002 - the attribute names
    lo = None if min is None else np.asarray(min).astype(x.dtype)
    hi = None if max is None else np.asarray(max).astype(x.dtype)
    return np.clip(x, lo, hi)


_register_unary("clip", _clip, _clip_ref, NUMERIC_DTYPES,
                "clip(x, min=None, max=None): x limited to [min, max] (scalars; either may be "
                "omitted, not both).", check_attrs=_clip_attrs, min=None, max=None)


# ---- binary and ternary with broadcasting ------------------------------------------------

def _register_broadcast(name, expr, reference, dtypes, doc, bool_out=False):
    def infer(types, attrs):
        a, b = tensor_args(name, types, count=2)
        get_attrs(name, attrs)
        dtype = check_same_dtype(name, [a, b])
        check_dtype(name, dtype, dtypes)
        return TensorType(broadcast_shapes(name, a.shape, b.shape), "bool" if bool_out else dtype)

    def compute(args, attrs):
        a, b = args
        shape = broadcast_shapes(name, a.shape, b.shape)
        return te.compute(shape, lambda *i: expr(a[broadcast_indices(i, a.shape, shape)],
                                                 b[broadcast_indices(i, b.shape, shape)]), name=name)

    register(name, infer=infer, compute=compute, reference=reference, pattern="broadcast",
             num_args=2, doc=doc)


def _same(fn):
    """A numpy binary function whose result keeps the inputs' dtype (numpy may widen)."""
    def ref(a, b):
        return np.asarray(fn(a, b)).astype(np.result_type(a.dtype, b.dtype))
    return ref


_register_broadcast("add", lambda x, y: x + y, _same(np.add), NUMERIC_DTYPES,
                    "add(a, b): a + b with numpy broadcasting.")
_register_broadcast("subtract", lambda x, y: x - y, _same(np.subtract), NUMERIC_DTYPES,
                    "subtract(a, b): a - b with numpy broadcasting.")
_register_broadcast("multiply", lambda x, y: x * y, _same(np.multiply), NUMERIC_DTYPES,
                    "multiply(a, b): a * b with numpy broadcasting.")
_register_broadcast("divide", lambda x, y: x / y, _same(np.divide), FLOAT_DTYPES,
                    "divide(a, b): a / b (true division, floats only; cast integers first) with "
                    "numpy broadcasting.")
_register_broadcast("power", lambda x, y: te.pow(x, y), _same(np.power), FLOAT_DTYPES,
                    "power(a, b): a ** b (floats) with numpy broadcasting.")
_register_broadcast("remainder", lambda x, y: x % y, _same(np.remainder), NUMERIC_DTYPES,
                    "remainder(a, b): numpy's remainder (the sign of b; a - floor(a / b) * b, exact "
                    "for floats: remainder(-1, inf) is inf, remainder(inf, b) nan) with numpy "
                    "broadcasting. Integer division by zero is undefined.")
_register_broadcast("maximum", lambda x, y: te.max(x, y), _same(np.maximum), NUMERIC_DTYPES,
                    "maximum(a, b): the larger of a and b with numpy broadcasting.")
_register_broadcast("minimum", lambda x, y: te.min(x, y), _same(np.minimum), NUMERIC_DTYPES,
                    "minimum(a, b): the smaller of a and b with numpy broadcasting.")
for _name, _fn, _np_fn, _sym in (("equal", lambda x, y: x == y, np.equal, "=="),
                                 ("not_equal", lambda x, y: x != y, np.not_equal, "!="),
                                 ("less", lambda x, y: x < y, np.less, "<"),
                                 ("less_equal", lambda x, y: x <= y, np.less_equal, "<="),
                                 ("greater", lambda x, y: x > y, np.greater, ">"),
                                 ("greater_equal", lambda x, y: x >= y, np.greater_equal, ">=")):
    _register_broadcast(_name, _fn, _np_fn, ALL_DTYPES if _sym in ("==", "!=") else NUMERIC_DTYPES,
                        f"{_name}(a, b): a {_sym} b as bool, with numpy broadcasting.", bool_out=True)
_register_broadcast("logical_and", lambda x, y: x & y, np.logical_and, ("bool",),
                    "logical_and(a, b): a and b for bool tensors, with numpy broadcasting.")
_register_broadcast("logical_or", lambda x, y: x | y, np.logical_or, ("bool",),
                    "logical_or(a, b): a or b for bool tensors, with numpy broadcasting.")


def _bitwise(op):
    return lambda *xs: _Intrinsic(op, xs)


def _shift_ref(left: bool):
    """numpy's shift; an amount outside [0, width) shifts every bit out (ONNX BitShift): 0, or
    the sign for a signed right shift."""
    def ref(a, b):
        a, b = np.asarray(a), np.asarray(b)
        width = a.dtype.itemsize * 8
        ok = (b >= 0) & (b < width)
        if not left and np.issubdtype(a.dtype, np.signedinteger):
            return np.right_shift(a, np.where(ok, b, width - 1).astype(a.dtype))
        amount = np.where(ok, b, 0).astype(a.dtype)
        r = np.left_shift(a, amount) if left else np.right_shift(a, amount)
        return np.where(ok, r, 0).astype(np.result_type(a.dtype, b.dtype))
    return ref


def _storage_bits(dtype: str) -> int:
    return 8 if dt.is_bool(dtype) else dt.bits(dtype)


def _check_bitcast(src, a):
    dst = a["dtype"]
    if not isinstance(dst, str) or dst not in _CAST_DTYPES:
        raise error("bitcast", f"dtype={dst!r} is not one of {', '.join(_CAST_DTYPES)}")
    if _storage_bits(src) != _storage_bits(dst):
        raise error("bitcast", f"{src} ({_storage_bits(src)} bits) and {dst} "
                               f"({_storage_bits(dst)} bits) differ in width")


_register_unary("bitcast", lambda x, a: _Intrinsic("reinterpret", (x,), a["dtype"]),
                lambda x, dtype: np.asarray(x).view(dt.to_numpy(dtype)), _CAST_DTYPES,
                "bitcast(x, dtype): the bits of each element as dtype, of the same width (bool is "
                "one byte); numpy's view.", out_dtype=lambda d, a: a["dtype"],
                check_attrs=_check_bitcast, dtype=None)


_BITWISE_DTYPES = INT_DTYPES + ("bool",)
for _name, _np_fn in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                      ("bitwise_xor", np.bitwise_xor)):
    _register_broadcast(_name, _bitwise(_name), _same(_np_fn), _BITWISE_DTYPES,
                        f"{_name}(a, b): numpy's {_name} for integers and bools, with numpy "
                        "broadcasting.")
_register_unary("bitwise_not", lambda x, a: _Intrinsic("bitwise_not", (x,)),
                lambda x: np.invert(x), _BITWISE_DTYPES,
                "bitwise_not(x): ~x for integers (numpy's invert), not x for bools.")
_register_broadcast("left_shift", _bitwise("shift_left"), _shift_ref(True), INT_DTYPES,
                    "left_shift(a, b): a << b for integers, 0 where b is negative or at least the "
                    "bit width; numpy broadcasting.")
_register_broadcast("right_shift", _bitwise("shift_right"), _shift_ref(False), INT_DTYPES,
                    "right_shift(a, b): a >> b for integers (arithmetic for signed a); where b "
                    "is negative or at least the bit width every bit is shifted out (0, or the "
                    "sign of a signed a); numpy broadcasting.")


def _where_infer(types, attrs):
    cond, x, y = tensor_args("where", types, names=("cond", "x", "y"), count=3)
    get_attrs("where", attrs)
    if cond.dtype != "bool":
        raise error("where", f"cond must be bool, got {cond.dtype}")
    dtype = check_same_dtype("where", [x, y], names=("x", "y"))
    return TensorType(broadcast_shapes("where", cond.shape, x.shape, y.shape), dtype)


def _where_compute(args, attrs):
    c, x, y = args
    shape = broadcast_shapes("where", c.shape, x.shape, y.shape)

    def at(t, i):
        return t[broadcast_indices(i, t.shape, shape)]
    return te.compute(shape, lambda *i: te.if_then_else(at(c, i), at(x, i), at(y, i)), name="where")


register("where", infer=_where_infer, compute=_where_compute,
         reference=lambda c, x, y: np.where(c, x, y).astype(x.dtype), pattern="broadcast", num_args=3,
         doc="where(cond, x, y): x where cond else y (cond bool; x, y of one dtype), all three "
             "broadcast together as in numpy.")

del _name, _fn, _np_fn, _sym
