"""Elementwise ATen ops: arithmetic, comparisons, activations, where/masked_fill, type
conversions, and the tensor factories (full, zeros, arange, ...)."""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ...ir.expr import PrimExpr
from ...ir.graph import GraphExpr
from .common import Ctx, NotComputed, converter, is_static, shape, sizes
from .errors import Unsupported

_UNARY = {"aten.relu": "relu", "aten.sigmoid": "sigmoid", "aten.tanh": "tanh", "aten.exp": "exp",
          "aten.log": "log", "aten.sqrt": "sqrt", "aten.rsqrt": "rsqrt", "aten.neg": "neg",
          "aten.abs": "abs", "aten.erf": "erf", "aten.sin": "sin", "aten.cos": "cos",
          "aten.floor": "floor", "aten.ceil": "ceil", "aten.round": "round", "aten.silu": "silu",
          "aten.logical_not": "logical_not", "aten.bitwise_not": "logical_not"}

_BINARY = {"aten.add": "add", "aten.sub": "subtract", "aten.mul": "multiply",
           "aten.maximum": "maximum", "aten.minimum": "minimum",
           "aten.logical_and": "logical_and", "aten.logical_or": "logical_or",
           "aten.bitwise_and": "logical_and", "aten.bitwise_or": "logical_or"}

_COMPARE = {"aten.eq": "equal", "aten.ne": "not_equal", "aten.lt": "less", "aten.le": "less_equal",
            "aten.gt": "greater", "aten.ge": "greater_equal"}


def _unary(kop):
    def conv(ctx: Ctx, node, args, kwargs):
        x = args[0]
        if kop == "logical_not" and x.ty.dtype != "bool":
            raise Unsupported(f"not of a {x.ty.dtype} tensor is not supported (bool only)")
        if kop in ("sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "erf", "sin", "cos", "silu"):
            x = ctx.cast(x, ctx.out_dtype())        # torch computes these on ints as floats
        return ctx.op(kop, x)
    return conv


for _name, _kop in _UNARY.items():
    converter(_name)(_unary(_kop))


def _binary(kop):
    def conv(ctx: Ctx, node, args, kwargs):
        out = ctx.out_dtype()
        a, b = ctx.tensor(args[0], out), ctx.tensor(args[1], out)
        alpha = kwargs.get("alpha", 1)
        if alpha != 1:
            b = ctx.op("multiply", b, ctx.const(alpha, out))
        if kop.startswith("logical") and out != "bool":
            raise Unsupported(f"bitwise ops on {out} are not supported (bool only)")
        return ctx.op(kop, a, b)
    return conv


for _name, _kop in _BINARY.items():
    converter(_name)(_binary(_kop))


def common_dtype(a, b) -> str:
    """torch's promotion for two operands, either a tensor or a Python number."""
    ta, tb = (x.ty.dtype if isinstance(x, GraphExpr) else None for x in (a, b))
    if ta is None and tb is None:
        raise Unsupported("an op on two Python numbers")
    if ta is None or tb is None:
        t, s = (ta, b) if ta is not None else (tb, a)
        if isinstance(s, float) and not dt.is_float(t):
            return "float32"
        if isinstance(s, (int, float)) and not isinstance(s, bool) and t == "bool":
            return "int64" if isinstance(s, int) else "float32"
        return t
    return str(np.promote_types(dt.to_numpy(ta), dt.to_numpy(tb)))


def _compare(kop):
    def conv(ctx: Ctx, node, args, kwargs):
        c = common_dtype(args[0], args[1])
        return ctx.op(kop, ctx.tensor(args[0], c), ctx.tensor(args[1], c))
    return conv


for _name, _kop in _COMPARE.items():
    converter(_name)(_compare(_kop))


@converter("aten.div")
def div(ctx: Ctx, node, args, kwargs):
    out = ctx.out_dtype()
    mode = kwargs.get("rounding_mode")
    if mode is None:
        return ctx.op("divide", ctx.tensor(args[0], out), ctx.tensor(args[1], out))
    # floor / trunc division: in float, then back (exact for the sizes models divide)
    c = out if dt.is_float(out) else "float64"
    q = ctx.op("divide", ctx.tensor(args[0], c), ctx.tensor(args[1], c))
    if mode == "floor":
        q = ctx.op("floor", q)
    else:   # trunc: toward zero
        q = ctx.op("where", ctx.op("less", q, ctx.const(0, c)), ctx.op("ceil", q), ctx.op("floor", q))
    return ctx.cast(q, out)


@converter("aten.remainder")
def remainder(ctx: Ctx, node, args, kwargs):
    out = ctx.out_dtype()
    return ctx.op("remainder", ctx.tensor(args[0], out), ctx.tensor(args[1], out))


@converter("aten.fmod")
def fmod(ctx: Ctx, node, args, kwargs):
    """a - trunc(a / b) * b (the sign of a); integers go through float64, exact below 2**53."""
    out = ctx.out_dtype()
    c = out if dt.is_float(out) else "float64"
    a, b = ctx.tensor(args[0], c), ctx.tensor(args[1], c)
    q = ctx.op("divide", a, b)
    q = ctx.op("where", ctx.op("less", q, ctx.const(0, c)), ctx.op("ceil", q), ctx.op("floor", q))
    return ctx.cast(ctx.op("subtract", a, ctx.op("multiply", q, b)), out)


def _float_in(ctx, x):
    return ctx.cast(x, ctx.out_dtype())


@converter("aten.log1p")
def log1p(ctx, node, args, kwargs):
    x = _float_in(ctx, args[0])
    return ctx.op("log", ctx.op("add", x, ctx.const(1, x.ty.dtype)))


@converter("aten.expm1")
def expm1(ctx, node, args, kwargs):
    x = _float_in(ctx, args[0])
    return ctx.op("subtract", ctx.op("exp", x), ctx.const(1, x.ty.dtype))


@converter("aten.tan")
def tan(ctx, node, args, kwargs):
    x = _float_in(ctx, args[0])
    return ctx.op("divide", ctx.op("sin", x), ctx.op("cos", x))


@converter("aten.sign")
def sign(ctx, node, args, kwargs):
    x = args[0]
    d = x.ty.dtype
    if d == "bool":
        return x
    one, zero = ctx.const(1, d), ctx.const(0, d)
    neg = ctx.op("where", ctx.op("less", x, zero), ctx.const(-1, d), zero)
    return ctx.op("where", ctx.op("greater", x, zero), one, neg)


@converter("aten.trunc")
def trunc(ctx, node, args, kwargs):
    x = args[0]
    if not dt.is_float(x.ty.dtype):
        return x
    return ctx.op("where", ctx.op("less", x, ctx.const(0, x.ty.dtype)), ctx.op("ceil", x), ctx.op("floor", x))


@converter("aten.isnan")
def isnan(ctx, node, args, kwargs):
    x = args[0]
    return ctx.op("not_equal", x, x)          # NaN is the one value unequal to itself


@converter("aten.reciprocal")
def reciprocal(ctx, node, args, kwargs):
    out = ctx.out_dtype()
    return ctx.op("divide", ctx.const(1, out), ctx.cast(args[0], out))


@converter("aten.pow")
def pow_(ctx: Ctx, node, args, kwargs):
    out = ctx.out_dtype()
    a, b = args[0], args[1]
    if isinstance(a, GraphExpr) and isinstance(b, (int, float)):
        a = ctx.cast(a, out)
        if b == 2:
            return ctx.op("multiply", a, a)
        if b == 1:
            return a
        if b == 0.5:
            return ctx.op("sqrt", a)
    if not dt.is_float(out):
        raise Unsupported(f"integer power ({out}) is not supported")
    return ctx.op("power", ctx.tensor(a, out), ctx.tensor(b, out))


@converter("aten.gelu")
def gelu(ctx, node, args, kwargs):
    return ctx.op("gelu", args[0], approximate=kwargs.get("approximate", args[1] if len(args) > 1 else "none"))


def _clip(ctx, x, lo, hi):
    return ctx.op("clip", x, min=lo, max=hi)


@converter("aten.hardtanh")
def hardtanh(ctx, node, args, kwargs):
    lo = args[1] if len(args) > 1 else -1.0
    hi = args[2] if len(args) > 2 else 1.0
    return _clip(ctx, args[0], float(lo), float(hi))


@converter("aten.hardswish")
def hardswish(ctx, node, args, kwargs):
    x = args[0]
    d = x.ty.dtype
    r6 = _clip(ctx, ctx.op("add", x, ctx.const(3, d)), 0.0, 6.0)
    return ctx.op("divide", ctx.op("multiply", x, r6), ctx.const(6, d))


@converter("aten.hardsigmoid")
def hardsigmoid(ctx, node, args, kwargs):
    x = args[0]
    d = x.ty.dtype
    return ctx.op("divide", _clip(ctx, ctx.op("add", x, ctx.const(3, d)), 0.0, 6.0), ctx.const(6, d))


@converter("aten.clamp")
def clamp(ctx: Ctx, node, args, kwargs):
    x = args[0]
    lo = kwargs.get("min", args[1] if len(args) > 1 else None)
    hi = kwargs.get("max", args[2] if len(args) > 2 else None)
    out = ctx.out_dtype()
    x = ctx.cast(x, out)
    if isinstance(lo, GraphExpr) or isinstance(hi, GraphExpr):      # clamp.Tensor
        if lo is not None:
            x = ctx.op("maximum", x, ctx.tensor(lo, out))
        if hi is not None:
            x = ctx.op("minimum", x, ctx.tensor(hi, out))
        return x
    if lo is None and hi is None:
        return x
    return _clip(ctx, x, None if lo is None else float(lo), None if hi is None else float(hi))


@converter("aten.clamp_min")
def clamp_min(ctx, node, args, kwargs):
    return clamp(ctx, node, [args[0], args[1], None], {})


@converter("aten.clamp_max")
def clamp_max(ctx, node, args, kwargs):
    return clamp(ctx, node, [args[0], None, args[1]], {})


@converter("aten.leaky_relu")
def leaky_relu(ctx, node, args, kwargs):
    x = args[0]
    slope = args[1] if len(args) > 1 else 0.01
    neg = ctx.op("multiply", x, ctx.const(slope, x.ty.dtype))
    return ctx.op("where", ctx.op("greater", x, ctx.const(0, x.ty.dtype)), x, neg)


@converter("aten.elu")
def elu(ctx, node, args, kwargs):
    x = args[0]
    alpha, scale, in_scale = (list(args[1:]) + [1.0, 1.0, 1.0][len(args) - 1:])[:3]
    d = x.ty.dtype
    xs = ctx.op("multiply", x, ctx.const(in_scale, d))
    neg = ctx.op("multiply", ctx.op("subtract", ctx.op("exp", xs), ctx.const(1, d)), ctx.const(alpha, d))
    y = ctx.op("where", ctx.op("greater", x, ctx.const(0, d)), x, neg)
    return y if scale == 1.0 else ctx.op("multiply", y, ctx.const(scale, d))


@converter("aten.where")
def where(ctx: Ctx, node, args, kwargs):
    out = ctx.out_dtype()
    cond = ctx.cast(args[0], "bool")
    return ctx.op("where", cond, ctx.tensor(args[1], out), ctx.tensor(args[2], out))


@converter("aten.masked_fill")
def masked_fill(ctx: Ctx, node, args, kwargs):
    x, mask, value = args
    out = ctx.out_dtype()
    return ctx.op("where", ctx.cast(mask, "bool"), ctx.tensor(value, out), ctx.cast(x, out))


# ---- type conversions and copies ---------------------------------------------------------
@converter("aten._to_copy", "aten.to", "aten.type_as")
def to_copy(ctx: Ctx, node, args, kwargs):
    return ctx.cast(args[0], ctx.out_dtype())


@converter("aten.clone", "aten.alias", "aten.detach", "aten.lift_fresh_copy", "aten.contiguous",
           "aten.dropout")
def identity(ctx, node, args, kwargs):
    return args[0]      # inference: dropout is the identity


@converter("aten.native_dropout")
def native_dropout(ctx, node, args, kwargs):
    if args[2] if len(args) > 2 else kwargs.get("train"):
        raise Unsupported("dropout in training mode (call model.eval() before exporting)")
    return args[0], NotComputed("the dropout mask")


# ---- factories ---------------------------------------------------------------------------
def _filled(ctx: Ctx, dims, value, dtype):
    dims = sizes(dims)
    if all(is_static(d) for d in dims):
        return ctx.const(np.full(dims, value), dtype)
    return ctx.op("broadcast_to", ctx.const(value, dtype), shape=tuple(dims))


@converter("aten.full")
def full(ctx, node, args, kwargs):
    return _filled(ctx, args[0], args[1], ctx.out_dtype())


@converter("aten.full_like")
def full_like(ctx, node, args, kwargs):
    return _filled(ctx, shape(args[0]), args[1], ctx.out_dtype())


@converter("aten.zeros", "aten.empty", "aten.new_zeros", "aten.new_empty")
def zeros(ctx, node, args, kwargs):
    dims = args[1] if str(node.target).startswith("aten.new_") else args[0]
    return _filled(ctx, dims, 0, ctx.out_dtype())


@converter("aten.ones", "aten.new_ones")
def ones(ctx, node, args, kwargs):
    dims = args[1] if str(node.target).startswith("aten.new_") else args[0]
    return _filled(ctx, dims, 1, ctx.out_dtype())


@converter("aten.zeros_like", "aten.empty_like")
def zeros_like(ctx, node, args, kwargs):
    return _filled(ctx, shape(args[0]), 0, ctx.out_dtype())


@converter("aten.ones_like")
def ones_like(ctx, node, args, kwargs):
    return _filled(ctx, shape(args[0]), 1, ctx.out_dtype())


@converter("aten.scalar_tensor")
def scalar_tensor(ctx, node, args, kwargs):
    return ctx.const(args[0], ctx.out_dtype())


@converter("aten.arange")
def arange(ctx: Ctx, node, args, kwargs):
    nums = [a for a in args if isinstance(a, (int, float, PrimExpr))]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums + [1])[:3]
    out = ctx.out_dtype()
    if not any(isinstance(v, PrimExpr) for v in (start, end, step)):
        return ctx.const(np.arange(start, end, step), out)
    if not (isinstance(step, int) and step == 1 and isinstance(start, (int, PrimExpr))):
        raise Unsupported("a symbolic arange needs integer start and step 1")
    # torch's recorded length (s70), not end - start: an unsimplified ``seq - 0`` beside a plain
    # ``seq`` is a second unknown to every kernel that sees it (GPT-2's position ids), which a
    # fused kernel reading (1, seq - 0) and writing (1, seq + 1) could not bind seq from
    length = ctx.out_size(0)
    r = ctx.op("arange", *ctx.witnesses_of(start, end), start=start, step=1, length=length, dtype="int64")
    return ctx.cast(r, out)


