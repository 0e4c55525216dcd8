"""Conversions between float32 and the narrow float formats (bfloat16, the float8 family,
float4_e2m1fn), as integer arithmetic on their bits in LLVM IR.

Kernels hold a narrow float as its bits (an ``i16``, ``i8`` or ``i4``, ``cgutils.scalar_type``;
float4 is packed two to a byte in memory like int4, ``dtype.is_subbyte``) and never compute
with it: the graph computes in float32 and rounds back (``dtype.is_narrow_float``).
So the only codegen these formats need is the conversion to and from float32, written here once
with selects and shifts only, so that it works on scalars and vectors alike (a vectorized cast
loop converts 8 lanes at a time, no table lookups).

Every conversion matches ml_dtypes' ``astype`` bit for bit (the tests check every bit pattern
of each format and the rounding edges):

- to float32: exact; NaN encodings become a quiet NaN, e5m2's infinities stay infinities,
  e8m0's 0 is 2^-127 (a float32 subnormal).
- from float32: round to nearest, ties to even; a value past the largest finite one becomes
  infinity where the format has one (bfloat16, e5m2), NaN otherwise (``fn``/``fnuz``), as
  numpy's ``astype`` does without saturation. ONNX's saturating Cast clips before converting
  (frontend). The ``fnuz`` formats have no negative zero (-0 becomes +0) and one NaN, 0x80.
  float4_e2m1fn saturates to +-6 and turns NaN into a zero, as ml_dtypes does.
  float8_e8m0fnu (an exponent only, no sign, no zero) rounds to the nearest power of two as
  ml_dtypes does (zero and negatives are NaN); ONNX's round modes are built in the frontend.

Other source and destination dtypes go through float32 (float64 sources are rounded twice, to
float32 first).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..ir import dtype as dt
from . import cgutils as cg


@dataclass(frozen=True)
class SmallFloat:
    """A sign + exponent + mantissa format of ``width`` bits (ml_dtypes' float8_*, float4)."""
    mant: int          # mantissa bits
    bias: int
    max_mag: int       # the bits (without sign) of the largest finite value
    has_inf: bool      # e5m2: exponent all ones, mantissa 0 is +-inf, the rest NaN
    fnuz: bool         # finite, no negative zero: 0x80 is the only NaN
    nan_mag: int       # the NaN encoding (without sign) produced from float32; -1: no NaN
    width: int = 8

    @property
    def sign_bit(self) -> int:
        return self.width - 1


FORMATS = {
    "float8_e4m3fn": SmallFloat(3, 7, 0x7E, False, False, 0x7F),
    "float8_e4m3fnuz": SmallFloat(3, 8, 0x7F, False, True, 0),
    "float8_e5m2": SmallFloat(2, 15, 0x7B, True, False, 0x7E),
    "float8_e5m2fnuz": SmallFloat(2, 16, 0x7F, False, True, 0),
    # no inf, no NaN: overflow saturates to +-6; NaN becomes a zero (of the opposite sign, as
    # ml_dtypes has it)
    "float4_e2m1fn": SmallFloat(1, 1, 0x7, False, False, -1, width=4),
}


def _i32(v, c):
    """An i32 constant (scalar or splat) matching ``v``'s lanes."""
    return cg.const(cg.with_lanes(cg.I32, cg.lanes_of(v)), c)


def _ty(v, elem):
    return cg.with_lanes(elem, cg.lanes_of(v))


def to_float32(b: ir.IRBuilder, v, src: str):
    """The float32 value of ``v``, the bits (an integer, scalar or vector) of narrow ``src``."""
    e = dt.element(src)
    f32 = _ty(v, cg.F32)
    u = b.zext(v, _ty(v, cg.I32))
    if e == "bfloat16":
        return b.bitcast(b.shl(u, _i32(u, 16)), f32)
    if e == "float8_e8m0fnu":
        bits = b.shl(u, _i32(u, 23))
        bits = b.select(b.icmp_unsigned("==", u, _i32(u, 0)), _i32(u, 0x00400000), bits)
        bits = b.select(b.icmp_unsigned("==", u, _i32(u, 0xFF)), _i32(u, 0x7FC00000), bits)
        return b.bitcast(bits, f32)
    fmt = FORMATS[e]
    m, top_bit = fmt.mant, fmt.sign_bit
    mag = b.and_(u, _i32(u, (1 << top_bit) - 1))
    expo = b.lshr(mag, _i32(u, m))
    frac = b.and_(mag, _i32(u, (1 << m) - 1))
    # normal: rebias the exponent and move the fraction to float32's place
    normal = b.add(b.shl(mag, _i32(u, 23 - m)), _i32(u, (127 - fmt.bias) << 23))
    # subnormal: frac * 2^(1 - bias - m), exact in float32
    sub = b.fmul(b.uitofp(frac, f32), cg.const(f32, 2.0 ** (1 - fmt.bias - m)))
    is_sub = b.icmp_unsigned("==", expo, _i32(u, 0))
    bits = b.select(is_sub, b.bitcast(sub, _ty(v, cg.I32)), normal)
    if fmt.has_inf:
        top = b.icmp_unsigned("==", expo, _i32(u, (1 << (top_bit - m)) - 1))
        special = b.select(b.icmp_unsigned("==", frac, _i32(u, 0)), _i32(u, 0x7F800000), _i32(u, 0x7FC00000))
        bits = b.select(top, special, bits)
    elif fmt.nan_mag >= 0 and not fmt.fnuz:
        bits = b.select(b.icmp_unsigned("==", mag, _i32(u, fmt.nan_mag)), _i32(u, 0x7FC00000), bits)
    bits = b.or_(bits, b.shl(b.lshr(u, _i32(u, top_bit)), _i32(u, 31)))   # the sign
    if fmt.fnuz:
        bits = b.select(b.icmp_unsigned("==", u, _i32(u, 0x80)), _i32(u, 0x7FC00000), bits)
    return b.bitcast(bits, f32)


def from_float32(b: ir.IRBuilder, x, dst: str):
    """The bits of narrow ``dst`` nearest to float32 ``x`` (ties to even; saturating only for
    float4, which has neither inf nor NaN)."""
    e = dt.element(dst)
    i32 = _ty(x, cg.I32)
    out_ty = _ty(x, cg.scalar_type(e))
    u = b.bitcast(x, i32)
    a = b.and_(u, _i32(u, 0x7FFFFFFF))
    is_nan = b.icmp_unsigned(">", a, _i32(u, 0x7F800000))
    if e == "bfloat16":
        odd = b.and_(b.lshr(u, _i32(u, 16)), _i32(u, 1))
        r = b.lshr(b.add(b.add(u, _i32(u, 0x7FFF)), odd), _i32(u, 16))
        quiet = b.or_(b.lshr(u, _i32(u, 16)), _i32(u, 0x40))
        return b.trunc(b.select(is_nan, quiet, r), out_ty)
    if e == "float8_e8m0fnu":
        return b.trunc(_e8m0_nearest(b, u, a, is_nan), out_ty)
    fmt = FORMATS[e]
    m, s = fmt.mant, 23 - fmt.mant
    # normal range: round float32's bits at the target's last mantissa bit (a carry moves into
    # the exponent, as it should), then rebias the exponent
    odd = b.and_(b.lshr(a, _i32(u, s)), _i32(u, 1))
    r = b.lshr(b.add(b.add(a, _i32(u, (1 << (s - 1)) - 1)), odd), _i32(u, s))
    normal = b.sub(r, _i32(u, (127 - fmt.bias) << m))
    # subnormal range (|x| < 2^(1 - bias)): |x| / 2^(1 - bias - m) rounded to an integer is the
    # encoding (2^m, the smallest normal, included); the scaling is exact
    min_normal = (128 - fmt.bias) << 23
    small = b.icmp_unsigned("<", a, _i32(u, min_normal))
    ax = b.bitcast(b.select(small, a, _i32(u, 0)), x.type)
    scaled = b.fmul(ax, cg.const(x.type, 2.0 ** (fmt.bias - 1 + m)))
    sub = b.fptoui(cg.call_intrinsic(b, "llvm.roundeven", scaled), i32)
    mag = b.select(small, sub, normal)
    over = b.icmp_signed(">", mag, _i32(u, fmt.max_mag))
    sign = b.shl(b.lshr(u, _i32(u, 31)), _i32(u, fmt.sign_bit))
    if fmt.nan_mag < 0:   # saturating, no NaN: NaN is a zero of the other sign
        mag = b.select(over, _i32(u, fmt.max_mag), mag)
        bits = b.select(is_nan, b.xor(sign, _i32(u, 1 << fmt.sign_bit)), b.or_(mag, sign))
    elif fmt.fnuz:
        bits = b.select(b.icmp_unsigned("==", mag, _i32(u, 0)), _i32(u, 0), b.or_(mag, sign))
        bits = b.select(b.or_(is_nan, over), _i32(u, 0x80), bits)
    else:
        mag = b.select(over, _i32(u, 0x7C if fmt.has_inf else fmt.nan_mag), mag)
        mag = b.select(is_nan, _i32(u, fmt.nan_mag), mag)
        bits = b.or_(mag, sign)
    return b.trunc(bits, out_ty)


def _e8m0_nearest(b, u, a, is_nan):
    """float8_e8m0fnu bits of float32 bits ``u``: the exponent of the nearest power of two;
    NaN, infinities, negatives, zeros and overflow -> 0xFF (NaN), underflow -> 0 (2^-127)."""
    expo = b.lshr(a, _i32(u, 23))
    # round half to even, the significand kept being the implicit bit: a normal's (1, odd) rounds
    # up from half-way (mantissa >= 0x400000); a float32 subnormal's (0, even) rounds to 2^-126
    # (1) only past half-way (above 2^-127), else to 2^-127 (0)
    up = b.zext(b.icmp_unsigned(">=", b.and_(a, _i32(u, 0x7FFFFF)), _i32(u, 0x400000)), u.type)
    r = b.add(expo, up)
    sub = b.select(b.icmp_unsigned(">", a, _i32(u, 0x00400000)), _i32(u, 1), _i32(u, 0))
    r = b.select(b.icmp_unsigned("==", expo, _i32(u, 0)), sub, r)
    bad = b.or_(b.or_(is_nan, b.icmp_unsigned(">", r, _i32(u, 0xFE))),
                b.or_(b.icmp_unsigned(">=", u, _i32(u, 0x7F800000)), b.icmp_unsigned("==", a, _i32(u, 0))))
    return b.select(bad, _i32(u, 0xFF), r)


def convert(b: ir.IRBuilder, v, src: str, dst: str, convert_wide):
    """``v`` of dtype ``src`` as ``dst`` where either is narrow, through float32;
    ``convert_wide(b, v, src, dst)`` converts between the other dtypes."""
    if dt.is_narrow_float(src):
        v = to_float32(b, v, src)
        src = "float32"
        if dt.element(dst) == "float32":
            return v
        if not dt.is_narrow_float(dst):
            return convert_wide(b, v, src, dst)
    if dt.element(src) != "float32":
        v = convert_wide(b, v, src, "float32")
    return from_float32(b, v, dst)
