"""Elementwise math, activations, comparisons, logic, Cast, Clip, Where."""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from . import narrow_float
from .common import Unsupported, converter, dim, dtype, kiln_dtype, ndim, norm_axis, scalar_like, static_shape

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Neg": "neg", "Abs": "abs", "Erf": "erf", "Floor": "floor",
          "Ceil": "ceil", "Round": "round", "Sin": "sin", "Cos": "cos", "Not": "logical_not",
          "BitwiseNot": "bitwise_not"}
_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Equal": "equal",
           "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
           "Xor": "not_equal", "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or",
           "BitwiseXor": "bitwise_xor"}


def _unary(kop):
    def fn(ctx, node, ins, attrs):
        x = ins[0]
        if kop == "abs" and dt.is_uint(dtype(x)):
            return x
        return ctx.op(kop, x)
    return fn


def _binary(kop):
    def fn(ctx, node, ins, attrs):
        if kop == "equal" and dtype(ins[0]) == "string":   # the string library (strings.py)
            from .strings import equal
            return equal(ctx, ins[0], ins[1])
        return ctx.op(kop, ins[0], ins[1])
    return fn


for _o, _k in _UNARY.items():
    converter(_o)(_unary(_k))
for _o, _k in _BINARY.items():
    converter(_o)(_binary(_k))


@converter("BitShift")
def bit_shift(ctx, node, ins, attrs):
    direction = attrs.get("direction", b"")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    if direction not in ("LEFT", "RIGHT"):
        raise Unsupported(f"direction={direction!r}; BitShift takes LEFT or RIGHT")
    return ctx.op("left_shift" if direction == "LEFT" else "right_shift", ins[0], ins[1])


@converter("BitCast")
def bit_cast(ctx, node, ins, attrs):
    """The bits of each element as dtype ``to`` (the same width)."""
    return ctx.op("bitcast", ins[0], dtype=kiln_dtype(int(attrs["to"]), "BitCast to: "))


@converter("Shrink")
def shrink(ctx, node, ins, attrs):
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    x = ins[0]
    bias, lambd = float(attrs.get("bias", 0.0)), float(attrs.get("lambd", 0.5))
    zero = scalar_like(ctx, 0, x)
    below = ctx.op("less", x, scalar_like(ctx, -lambd, x))
    above = ctx.op("greater", x, scalar_like(ctx, lambd, x))
    return ctx.op("where", below, ctx.op("add", x, scalar_like(ctx, bias, x)),
                  ctx.op("where", above, ctx.op("subtract", x, scalar_like(ctx, bias, x)), zero))


@converter("Div")
def div(ctx, node, ins, attrs):
    a, b = ins
    if dt.is_float(dtype(a)):
        return ctx.op("divide", a, b)
    # integer division truncates toward zero (C semantics, as onnxruntime)
    if ctx.is_symbolic(a) or ctx.is_symbolic(b):
        return ctx.op("trunc_divide", a, b)  # shape arithmetic: only symbolic.py has this op
    d = dtype(a)
    q = ctx.op("divide", ctx.op("cast", a, dtype="float64"), ctx.op("cast", b, dtype="float64"))
    return ctx.op("cast", q, dtype=d)


@converter("Pow")
def pow_(ctx, node, ins, attrs):
    a, b = ins
    d = dtype(a)
    if dtype(b) != d:
        b = ctx.op("cast", b, dtype=d)
    if dt.is_float(d):
        return ctx.op("power", a, b)
    r = ctx.op("power", ctx.op("cast", a, dtype="float64"), ctx.op("cast", b, dtype="float64"))
    return ctx.op("cast", r, dtype=d)


@converter("Reciprocal")
def reciprocal(ctx, node, ins, attrs):
    x = ins[0]
    return ctx.op("divide", scalar_like(ctx, 1.0, x), x)


def _variadic(kop):
    def fn(ctx, node, ins, attrs):
        y = ins[0]
        for x in ins[1:]:
            y = ctx.op(kop, y, x)
        return y
    return fn


converter("Max")(_variadic("maximum"))
converter("Min")(_variadic("minimum"))
converter("Sum")(_variadic("add"))


@converter("Mean")
def mean(ctx, node, ins, attrs):
    y = _variadic("add")(ctx, node, ins, attrs)
    return ctx.op("divide", y, scalar_like(ctx, len(ins), y))


@converter("Where")
def where(ctx, node, ins, attrs):
    return ctx.op("where", *ins)


@converter("Cast")
def cast(ctx, node, ins, attrs):
    """To ``to``; float8 targets saturate unless ``saturate=0`` (narrow_float.cast)."""
    to = kiln_dtype(attrs["to"], "Cast to ")
    return narrow_float.cast(ctx, ins[0], to, bool(attrs.get("saturate", 1)), attrs.get("round_mode", "up"))


@converter("CastLike")
def cast_like(ctx, node, ins, attrs):
    x, like = ins
    return narrow_float.cast(ctx, x, dtype(like), bool(attrs.get("saturate", 1)), attrs.get("round_mode", "up"))


@converter("Identity", "Dropout")
def identity(ctx, node, ins, attrs):
    x = ins[0]
    if node.op_type == "Dropout" and len(ins) > 2 and ins[2] is not None:
        tm = ctx.need_value(ins[2], "training_mode")
        ratio = ctx.need_value(ins[1], "ratio") if bool(tm) and ins[1] is not None else 0.5
        if bool(tm) and float(np.asarray(ratio)) != 0:  # ratio 0 keeps every element, scale 1
            raise Unsupported("training_mode=True with a nonzero ratio draws a random mask; Kiln "
                              "has no random number generator")
    if node.op_type == "Dropout" and len(node.output) > 1:
        return [x, ctx.op("broadcast_to", ctx.const(np.ones((), bool)), shape=tuple(dim(s) for s in x.ty.shape))]
    return x


@converter("Clip", since=1)
def clip(ctx, node, ins, attrs):
    x = ins[0]
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo = ctx.value(ins[1]) if len(ins) > 1 and ins[1] is not None else None
        hi = ctx.value(ins[2]) if len(ins) > 2 and ins[2] is not None else None
        if (len(ins) > 1 and ins[1] is not None and lo is None) or (len(ins) > 2 and ins[2] is not None and hi is None):
            # dynamic bounds: max/min ops
            y = x
            if len(ins) > 1 and ins[1] is not None:
                y = ctx.op("maximum", y, ins[1])
            if len(ins) > 2 and ins[2] is not None:
                y = ctx.op("minimum", y, ins[2])
            return y
    if lo is None and hi is None:
        return x
    lo = None if lo is None else np.asarray(lo).item()
    hi = None if hi is None else np.asarray(hi).item()
    if lo is not None and hi is not None and lo > hi:
        # ONNX: min > max gives max everywhere
        return ctx.op("minimum", ctx.op("maximum", x, scalar_like(ctx, lo, x)), scalar_like(ctx, hi, x))
    return ctx.op("clip", x, min=lo, max=hi)


@converter("LeakyRelu")
def leaky_relu(ctx, node, ins, attrs):
    x = ins[0]
    alpha = attrs.get("alpha", 0.01)
    zero = scalar_like(ctx, 0, x)
    return ctx.op("where", ctx.op("less", x, zero), ctx.op("multiply", x, scalar_like(ctx, alpha, x)), x)


@converter("PRelu")
def prelu(ctx, node, ins, attrs):
    x, slope = ins
    zero = scalar_like(ctx, 0, x)
    return ctx.op("where", ctx.op("less", x, zero), ctx.op("multiply", x, slope), x)


@converter("ThresholdedRelu")
def thresholded_relu(ctx, node, ins, attrs):
    x = ins[0]
    a = scalar_like(ctx, attrs.get("alpha", 1.0), x)
    return ctx.op("where", ctx.op("greater", x, a), x, scalar_like(ctx, 0, x))


@converter("Elu")
def elu(ctx, node, ins, attrs):
    x = ins[0]
    a = scalar_like(ctx, attrs.get("alpha", 1.0), x)
    neg = ctx.op("multiply", a, ctx.op("subtract", ctx.op("exp", x), scalar_like(ctx, 1, x)))
    return ctx.op("where", ctx.op("less", x, scalar_like(ctx, 0, x)), neg, x)


@converter("Selu")
def selu(ctx, node, ins, attrs):
    x = ins[0]
    a = scalar_like(ctx, attrs.get("alpha", 1.67326319217681884765625), x)
    g = scalar_like(ctx, attrs.get("gamma", 1.05070102214813232421875), x)
    neg = ctx.op("multiply", a, ctx.op("subtract", ctx.op("exp", x), scalar_like(ctx, 1, x)))
    y = ctx.op("where", ctx.op("less_equal", x, scalar_like(ctx, 0, x)), neg, x)
    return ctx.op("multiply", g, y)


@converter("Celu")
def celu(ctx, node, ins, attrs):
    x = ins[0]
    a = scalar_like(ctx, attrs.get("alpha", 1.0), x)
    neg = ctx.op("multiply", a, ctx.op("subtract", ctx.op("exp", ctx.op("divide", x, a)), scalar_like(ctx, 1, x)))
    return ctx.op("add", ctx.op("relu", x), ctx.op("minimum", scalar_like(ctx, 0, x), neg))


@converter("HardSigmoid")
def hard_sigmoid(ctx, node, ins, attrs):
    x = ins[0]
    t = ctx.op("add", ctx.op("multiply", x, scalar_like(ctx, attrs.get("alpha", 0.2), x)),
               scalar_like(ctx, attrs.get("beta", 0.5), x))
    return ctx.op("clip", t, min=0.0, max=1.0)


@converter("HardSwish")
def hard_swish(ctx, node, ins, attrs):
    x = ins[0]
    t = ctx.op("add", ctx.op("multiply", x, scalar_like(ctx, 1.0 / 6, x)), scalar_like(ctx, 0.5, x))
    return ctx.op("multiply", x, ctx.op("clip", t, min=0.0, max=1.0))


@converter("Softplus")
def softplus(ctx, node, ins, attrs):
    x = ins[0]
    # log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|))
    t = ctx.op("log", ctx.op("add", scalar_like(ctx, 1, x), ctx.op("exp", ctx.op("neg", ctx.op("abs", x)))))
    return ctx.op("add", ctx.op("relu", x), t)


@converter("Softsign")
def softsign(ctx, node, ins, attrs):
    x = ins[0]
    return ctx.op("divide", x, ctx.op("add", scalar_like(ctx, 1, x), ctx.op("abs", x)))


@converter("Mish")
def mish(ctx, node, ins, attrs):
    x = ins[0]
    return ctx.op("multiply", x, ctx.op("tanh", softplus(ctx, node, ins, attrs)))


@converter("Gelu", since=20)
def gelu(ctx, node, ins, attrs):
    return ctx.op("gelu", ins[0], approximate=attrs.get("approximate", "none"))


@converter("Sign")
def sign(ctx, node, ins, attrs):
    x = ins[0]
    z = scalar_like(ctx, 0, x)
    pos = ctx.op("cast", ctx.op("greater", x, z), dtype=dtype(x))
    neg = ctx.op("cast", ctx.op("less", x, z), dtype=dtype(x))
    return ctx.op("subtract", pos, neg)


@converter("Mod")
def mod(ctx, node, ins, attrs):
    a, b = ins
    d = dtype(a)
    fmod = attrs.get("fmod", 0)
    if dt.is_float(d) and not fmod:
        return ctx.op("remainder", a, b)   # numpy's, exact for infinities and signed zeros
    if dt.is_float(d):
        q = ctx.op("divide", a, b)
        if fmod:
            t = ctx.op("where", ctx.op("less", q, scalar_like(ctx, 0, q)), ctx.op("ceil", q), ctx.op("floor", q))
        else:
            t = ctx.op("floor", q)
        return ctx.op("subtract", a, ctx.op("multiply", t, b))
    fa, fb = ctx.op("cast", a, dtype="float64"), ctx.op("cast", b, dtype="float64")
    q = ctx.op("divide", fa, fb)
    if not fmod:
        q = ctx.op("floor", q)
    qi = ctx.op("cast", q, dtype=d)  # truncates toward zero
    return ctx.op("subtract", a, ctx.op("multiply", qi, b))


def _one(ctx, x):
    return scalar_like(ctx, 1, x)


@converter("Tan")
def tan(ctx, node, ins, attrs):
    return ctx.op("divide", ctx.op("sin", ins[0]), ctx.op("cos", ins[0]))


@converter("Sinh", "Cosh")
def sinh_cosh(ctx, node, ins, attrs):
    x = ins[0]
    e, en = ctx.op("exp", x), ctx.op("exp", ctx.op("neg", x))
    t = ctx.op("subtract" if node.op_type == "Sinh" else "add", e, en)
    return ctx.op("multiply", t, scalar_like(ctx, 0.5, x))


@converter("Asinh", "Acosh")
def asinh_acosh(ctx, node, ins, attrs):
    x = ins[0]
    sq = ctx.op("multiply", x, x)
    sq = ctx.op("add" if node.op_type == "Asinh" else "subtract", sq, _one(ctx, x))
    return ctx.op("log", ctx.op("add", x, ctx.op("sqrt", sq)))


@converter("Atanh")
def atanh(ctx, node, ins, attrs):
    x = ins[0]
    r = ctx.op("divide", ctx.op("add", _one(ctx, x), x), ctx.op("subtract", _one(ctx, x), x))
    return ctx.op("multiply", ctx.op("log", r), scalar_like(ctx, 0.5, x))


def _atan(ctx, x):
    """atan(x) to float32 precision (Cephes atanf): reduce |x| below tan(pi/8) with
    atan(t) = pi/2 + atan(-1/t) past tan(3pi/8) and pi/4 + atan((t-1)/(t+1)) past tan(pi/8),
    then an odd polynomial. Every branch is computed; ``where`` picks (the others may be
    inf or nan, which where drops)."""
    c = lambda v: scalar_like(ctx, v, x)  # noqa: E731
    t = ctx.op("abs", x)
    big = ctx.op("greater", t, c(2.414213562373095))
    mid = ctx.op("greater", t, c(0.4142135623730950))
    r = ctx.op("where", big, ctx.op("neg", ctx.op("divide", c(1.0), t)),
               ctx.op("where", mid, ctx.op("divide", ctx.op("subtract", t, c(1.0)), ctx.op("add", t, c(1.0))), t))
    base = ctx.op("where", big, c(np.pi / 2), ctx.op("where", mid, c(np.pi / 4), c(0.0)))
    z = ctx.op("multiply", r, r)
    poly = c(8.05374449538e-2)
    for k in (-1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1):
        poly = ctx.op("add", ctx.op("multiply", poly, z), c(k))
    y = ctx.op("add", base, ctx.op("add", ctx.op("multiply", ctx.op("multiply", poly, z), r), r))
    return ctx.op("where", ctx.op("less", x, c(0.0)), ctx.op("neg", y), y)


@converter("Atan")
def atan(ctx, node, ins, attrs):
    return _atan(ctx, ins[0])


@converter("Asin")
def asin(ctx, node, ins, attrs):
    """asin(x) = 2 atan(x / (1 + sqrt(1 - x^2))), stable up to |x| = 1."""
    x = ins[0]
    root = ctx.op("sqrt", ctx.op("subtract", _one(ctx, x), ctx.op("multiply", x, x)))
    return ctx.op("multiply", scalar_like(ctx, 2.0, x),
                  _atan(ctx, ctx.op("divide", x, ctx.op("add", _one(ctx, x), root))))


@converter("Acos")
def acos(ctx, node, ins, attrs):
    """acos(x) = 2 atan(sqrt((1 - x) / (1 + x))), accurate near x = 1 (acos(-1) = 2 atan(inf))."""
    x = ins[0]
    q = ctx.op("divide", ctx.op("subtract", _one(ctx, x), x), ctx.op("add", _one(ctx, x), x))
    return ctx.op("multiply", scalar_like(ctx, 2.0, x), _atan(ctx, ctx.op("sqrt", q)))


@converter("Swish")
def swish(ctx, node, ins, attrs):
    x = ins[0]
    a = attrs.get("alpha", 1.0)
    return ctx.op("multiply", x, ctx.op("sigmoid", ctx.op("multiply", x, scalar_like(ctx, a, x))))


@converter("SwiGLU")
def swiglu(ctx, node, ins, attrs):
    """``Swish_alpha(A) * B`` (A and B of one shape)."""
    return ctx.op("multiply", swish(ctx, node, ins[:1], attrs), ins[1])


@converter("IsNaN")
def isnan(ctx, node, ins, attrs):
    return ctx.op("not_equal", ins[0], ins[0])


@converter("IsInf")
def isinf(ctx, node, ins, attrs):
    x = ins[0]
    pos = ctx.op("equal", x, scalar_like(ctx, np.inf, x))
    neg = ctx.op("equal", x, scalar_like(ctx, -np.inf, x))
    dp, dn = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if dp and dn:
        return ctx.op("logical_or", pos, neg)
    if dp:
        return pos
    if dn:
        return neg
    return ctx.op("logical_and", pos, neg)


@converter("Hardmax")
def hardmax(ctx, node, ins, attrs):
    x = ins[0]
    n = ndim(x)
    axis = norm_axis(attrs.get("axis", -1), n)
    if ctx.opset < 13:
        raise Unsupported("opset < 13 (2-D coercion) is not supported")
    am = ctx.op("argmax", x, axis=axis, keepdims=True)
    d = dim(x.ty.shape[axis])
    iota = np.arange(d, dtype=np.int64).reshape([d if i == axis else 1 for i in range(n)])
    return ctx.op("cast", ctx.op("equal", am, ctx.const(iota)), dtype=dtype(x))


def _scan(ctx, ins, attrs):
    """What CumSum and CumProd share: ``x`` with the scanned axis moved last (``t``), the
    permutation that did it, and the mask ``m[i, j]``: input position i contributes to output
    position j (``exclusive`` leaves out j itself, ``reverse`` scans from the end)."""
    x = ins[0]
    n = ndim(x)
    if n == 1 and ctx.value(ins[1]) is None and not ctx.is_symbolic(ins[1]):
        axis = 0  # a 1-D input's only axis: a run-time axis can name no other (0 or -1)
    else:
        axis = norm_axis(int(np.asarray(ctx.need_value(ins[1], "axis")).reshape(-1)[0]), n)
    d = static_shape(x)[axis]
    i = np.arange(d)[:, None]
    j = np.arange(d)[None, :]
    excl, rev = attrs.get("exclusive", 0), attrs.get("reverse", 0)
    if rev:
        m = (i > j) if excl else (i >= j)
    else:
        m = (i < j) if excl else (i <= j)
    perm = [k for k in range(n) if k != axis] + [axis]
    t = ctx.op("permute_dims", x, axes=tuple(perm)) if axis != n - 1 else x
    return x, t, m, perm


def _unscan(ctx, y, perm):
    if perm != sorted(perm):
        y = ctx.op("permute_dims", y, axes=tuple(int(a) for a in np.argsort(perm)))
    return y


@converter("CumSum")
def cumsum(ctx, node, ins, attrs):
    """``out[..., j] = sum_i x[..., i] * M[i, j]``: a matmul with the triangular mask."""
    x, t, m, perm = _scan(ctx, ins, attrs)
    if dt.is_float(dtype(x)):
        y = ctx.op("matmul", t, ctx.const(m.astype(dt.to_numpy(dtype(x)))))
    else:
        y = ctx.op("matmul", ctx.op("cast", t, dtype="float64"), ctx.const(m.astype(np.float64)))
        y = ctx.op("cast", y, dtype=dtype(x))
    return _unscan(ctx, y, perm)


@converter("CumProd")
def cumprod(ctx, node, ins, attrs):
    """The running product along ``axis``: ``out[..., j] = prod_i where(M[i, j], x[..., i], 1)``
    with the mask of CumSum (O(n^2) work along the axis, fine for short axes)."""
    x, t, m, perm = _scan(ctx, ins, attrs)
    n = ndim(x)
    t = ctx.op("expand_dims", t, axis=n - 1)                     # (..., 1, d): broadcast over j
    y = ctx.op("prod", ctx.op("where", ctx.const(m.T), t, scalar_like(ctx, 1, x)), axis=n)
    return _unscan(ctx, y, perm)


@converter("OneHot")
def one_hot(ctx, node, ins, attrs):
    idx, depth, values = ins
    d = int(np.asarray(ctx.need_value(depth, "depth")).reshape(-1)[0])
    n = ndim(idx) + 1
    axis = norm_axis(attrs.get("axis", -1), n)
    if not dt.is_int(dtype(idx)):
        idx = ctx.op("cast", idx, dtype="int64")
    idx = ctx.op("where", ctx.op("less", idx, scalar_like(ctx, 0, idx)), ctx.op("add", idx, scalar_like(ctx, d, idx)), idx)
    e = ctx.op("expand_dims", idx, axis=axis)
    iota = np.arange(d).astype(dt.to_numpy(dtype(idx))).reshape([d if i == axis else 1 for i in range(n)])
    hit = ctx.op("equal", e, ctx.const(iota))
    off = ctx.op("take", values, ctx.const(np.array(0, np.int64)))
    on = ctx.op("take", values, ctx.const(np.array(1, np.int64)))
    return ctx.op("where", hit, on, off)


@converter("EyeLike")
def eye_like(ctx, node, ins, attrs):
    r, c = static_shape(ins[0])
    to = kiln_dtype(attrs["dtype"]) if "dtype" in attrs else dtype(ins[0])
    return ctx.const(np.eye(r, c, k=attrs.get("k", 0), dtype=dt.to_numpy(to)))
