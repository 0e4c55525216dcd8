"""bfloat16 and the float8 formats in ONNX graphs: Cast to them (with ONNX's ``saturate`` and,
for float8e8m0, ``round_mode``), and every other operator computed in float32.

Kiln's operators do not compute in the narrow floats (``kiln.ir.dtype.is_narrow_float``): an
ONNX node that takes one gets its narrow inputs cast to float32, and its float32 outputs are
rounded back to that narrow dtype (round to nearest even), which is how ONNX's reference
computes them too (ml_dtypes works in float32 and rounds each result). Cast, CastLike,
QuantizeLinear and DequantizeLinear handle the narrow floats themselves (``NATIVE_OPS``).
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, dtype

# The operators whose converters take narrow floats as they are.
NATIVE_OPS = frozenset({"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear"})

# The float8 formats ONNX's saturate attribute applies to (clipped to +-max before rounding).
SATURATING = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def largest(to: str) -> float:
    """The largest finite value of narrow float ``to`` (448 for float8_e4m3fn)."""
    import ml_dtypes
    return float(ml_dtypes.finfo(dt.to_numpy(to)).max)


def _tensor_dtype(e):
    """The dtype of a tensor value; None for anything else (a sequence, a missing input)."""
    return getattr(getattr(e, "ty", None), "dtype", None)


def _is_narrow(e) -> bool:
    d = _tensor_dtype(e)
    return d is not None and dt.is_narrow_float(d)


def convert(fn, ctx, node, ins, attrs):
    """Run converter ``fn`` on ``node``; when the node is not one of NATIVE_OPS and takes narrow
    floats, it sees them as float32 and its float32 outputs come back as the (first) narrow
    input's dtype."""
    narrow = [_tensor_dtype(x) for x in ins if _is_narrow(x)]
    if node.op_type in NATIVE_OPS or not narrow or node.domain not in ("", "ai.onnx"):
        return fn(ctx, node, ins, attrs)
    wide = [ctx.op("cast", x, dtype="float32") if _is_narrow(x) else x for x in ins]
    try:
        out = fn(ctx, node, wide, attrs)
    except Unsupported as e:
        # a value needed at compile time names the graph input, not its float32 copy
        for x, w in zip(ins, wide):
            if w is not x and e.needs_constant == getattr(w, "name", None):
                e.needs_constant = getattr(x, "name", None)
        raise

    def back(y):
        return ctx.op("cast", y, dtype=narrow[0]) if _tensor_dtype(y) == "float32" else y

    if isinstance(out, (list, tuple)):
        return type(out)(back(y) for y in out)
    return back(out)


def cast(ctx, x, to: str, saturate: bool = True, round_mode: str = "up"):
    """ONNX Cast of ``x`` to ``to``: to a float8 with ``saturate`` clipped to +-max first (NaN
    stays NaN; without it, out-of-range values become NaN or e5m2's inf); to float8e8m0 rounded
    by ``round_mode``; anything else a plain ``cast``."""
    src = dtype(x)
    if src == to:
        return x
    if to == "float8_e8m0fnu":
        return _to_e8m0(ctx, x, saturate, round_mode)
    if to in SATURATING and saturate:
        if src not in ("float16", "float32", "float64"):
            x = ctx.op("cast", x, dtype="float32")
        m = largest(to)
        x = ctx.op("clip", x, min=-m, max=m)
    return ctx.op("cast", x, dtype=to)


def _u32(ctx, v):
    return ctx.const(np.asarray(v, np.uint32))


def _to_e8m0(ctx, x, saturate: bool, round_mode: str):
    """float8e8m0 (a power of two's biased exponent) as ONNX's reference computes it: float32's
    exponent field, plus one when ``round_mode`` rounds up ("up": any fraction; "nearest": the
    half-way bit and the bits below or the exponent's parity; "down": never); with saturate, 254
    (2^127) never rounds up to 255 (NaN); NaN and infinities are 255. The sign is dropped."""
    if round_mode not in ("up", "down", "nearest"):
        raise Unsupported(f"round_mode={round_mode!r} is not one of up, down, nearest")
    if dtype(x) != "float32":
        x = ctx.op("cast", x, dtype="float32")
    bits = ctx.op("bitcast", x, dtype="uint32")
    expo = ctx.op("bitwise_and", ctx.op("right_shift", bits, _u32(ctx, 23)), _u32(ctx, 0xFF))
    special = ctx.op("equal", expo, _u32(ctx, 0xFF))

    def has(mask):
        return ctx.op("not_equal", ctx.op("bitwise_and", bits, _u32(ctx, mask)), _u32(ctx, 0))

    if round_mode == "up":
        up = has(0x7FFFFF)
    elif round_mode == "nearest":
        lsb = ctx.op("not_equal", expo, _u32(ctx, 0))
        up = ctx.op("logical_and", has(0x400000),
                    ctx.op("logical_or", ctx.op("logical_or", has(0x200000), has(0x1FFFFF)), lsb))
    else:
        up = None
    if up is not None:
        if saturate:
            up = ctx.op("logical_and", up, ctx.op("not_equal", expo, _u32(ctx, 0xFE)))
        expo = ctx.op("add", expo, ctx.op("cast", up, dtype="uint32"))
    expo = ctx.op("where", special, _u32(ctx, 0xFF), expo)
    return ctx.op("bitcast", ctx.op("cast", expo, dtype="uint8"), dtype="float8_e8m0fnu")
