"""Transcendental functions as inline LLVM IR, so loops that use them vectorize.

A call to libm inside a loop stops SIMD cold (each lane becomes a scalar call), so exp, log,
tanh, sigmoid and erf are written here as range reduction + polynomial on whatever value they
get: a scalar or a vector of any width. float16 is computed in float32. Accuracy (float32,
measured against float64 references over the whole range, see tests/codegen/test_math.py):
exp, log <= 1 ulp; sigmoid <= 2 ulp; tanh, erf <= 5 ulp (relative error < 4e-7).

Sources of the approximations (public, widely used):
  exp/log float32: Cephes ``expf``/``logf`` coefficients (as in sse_mathfun, Eigen ``pexp``).
  exp float64: Cody-Waite reduction by ln2 + degree-13 Taylor polynomial (|r| <= ln2/2).
  log float64: fdlibm's ``log`` reduction with the atanh series log(1+f) = 2 atanh(f/(2+f)).
  tanh/erf float32: Eigen's rational minimax approximations (also used by XLA and MLAS).
  tanh/erf float64: libm (scalar per lane).
"""
from __future__ import annotations

import math

from llvmlite import ir

from . import cgutils as cg


def _fmuladd(b, x, y, z):
    """x * y + z, fused where the target has FMA (and exactly rounded per op where not)."""
    return cg.call_intrinsic(b, "llvm.fmuladd", x, y, z)


def _poly(b, x, coeffs):
    """Horner: coeffs[0] * x^n + ... + coeffs[n]."""
    acc = cg.const_like(x, coeffs[0])
    for c in coeffs[1:]:
        acc = _fmuladd(b, acc, x, cg.const_like(x, c))
    return acc


def _clamp(b, x, lo, hi):
    """Clamp with selects that let NaN through (so callers need not special-case it)."""
    x = b.select(b.fcmp_ordered("<", x, cg.const_like(x, lo)), cg.const_like(x, lo), x)
    return b.select(b.fcmp_ordered(">", x, cg.const_like(x, hi)), cg.const_like(x, hi), x)


def _int_like(x):
    ity = cg.I64 if isinstance(cg.element_type(x.type), ir.DoubleType) else cg.I32
    return cg.with_lanes(ity, cg.lanes_of(x))


def _is_f64(x) -> bool:
    return isinstance(cg.element_type(x.type), ir.DoubleType)


def _exp_constants(x):
    """(lo, hi, magic, bias, mantissa bits, ln2 high, ln2 low) for ``x``'s float type."""
    if _is_f64(x):
        return (-708.3964185322641, 710.0, 6755399441055744.0, 1023, 52,
                6.93147180369123816490e-01, 1.90821492927058770002e-10)
    return -87.33654475, 89.0, 12582912.0, 127, 23, 0.693359375, -2.12194440e-4


def _exp_reduced(b: ir.IRBuilder, xc):
    """(t, y) for ``xc`` within exp's range: ``t = x / ln2 + magic``, whose low bits are the
    integer n = round(x / ln2) (the 1.5 * 2^mantissa trick: no float->int conversion, no SSE4.1
    rounding instruction), and ``y = e**r``, r = x - n*ln2 (Cody-Waite, in two steps), so that
    e**x = y * 2^n."""
    _, _, magic, _, _, c1, c2 = _exp_constants(xc)
    t = _fmuladd(b, xc, cg.const_like(xc, 1.4426950408889634), cg.const_like(xc, magic))
    n = b.fsub(t, cg.const_like(xc, magic))
    r = _fmuladd(b, n, cg.const_like(xc, -c1), xc)
    r = _fmuladd(b, n, cg.const_like(xc, -c2), r)
    if _is_f64(xc):
        return t, _poly(b, r, [1.0 / math.factorial(k) for k in range(13, -1, -1)])
    p = _poly(b, r, [1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2,
                     1.6666665459E-1, 5.0000001201E-1])
    return t, b.fadd(_fmuladd(b, p, b.fmul(r, r), r), cg.const_like(xc, 1.0))


def _exponent_of(b: ir.IRBuilder, t):
    """The integer n that ``_exp_reduced``'s ``t`` holds in its low bits."""
    ity = _int_like(t)
    return b.sub(b.bitcast(t, ity), b.bitcast(cg.const_like(t, _exp_constants(t)[2]), ity))


def _two_to(b: ir.IRBuilder, n, like):
    """The float 2^n (``like``'s type) for integers n within its normal exponents."""
    _, _, _, bias, mbits, _, _ = _exp_constants(like)
    return b.bitcast(b.shl(b.add(n, cg.const(n.type, bias)), cg.const(n.type, mbits)), like.type)


def exp(b: ir.IRBuilder, x):
    """e**x for float32/float64 scalars or vectors (inf, -inf and NaN exact). A result below
    the smallest normal number is 0 (as under flush-to-zero): computing a denormal result
    costs a microcode assist per lane on Intel cores (~100 cycles), which made a masked
    softmax (exp of -1e4) 3.3x slower. No arithmetic here comes near one: a lane below the
    range computes e**0 and is then set to 0."""
    lo, hi = _exp_constants(x)[:2]
    # Below lo the result is 0 (selected at the end); those lanes compute e**0 meanwhile. Clamped
    # to lo instead, they computed e**lo, which rounds to just under the smallest normal number
    # about half the time: a denormal product, and on Intel cores running AVX2 (VEX) code a
    # microcode assist per lane. exp of -1e4 took 10x as long as exp of 0 there, and a causal
    # attention (its masked scores' exp) ran 1.9x slower.
    below = b.fcmp_ordered("<", x, cg.const_like(x, lo))
    xc = b.select(below, cg.const_like(x, 0.0), x)
    xc = b.select(b.fcmp_ordered(">", xc, cg.const_like(x, hi)), cg.const_like(x, hi), xc)
    t, y = _exp_reduced(b, xc)
    # Scale by 2^n as two factors 2^(n/2) * 2^(n - n/2): each stays a normal number even when
    # the result is denormal or overflows to inf.
    n = _exponent_of(b, t)
    n1 = b.ashr(n, cg.const(n.type, 1))
    res = b.fmul(b.fmul(y, _two_to(b, n1, x)), _two_to(b, b.sub(n, n1), x))
    res = b.select(below, cg.const_like(x, 0.0), res)
    return b.select(b.fcmp_unordered("uno", x, x), x, res)


def _exp_of_nonpositive(b: ir.IRBuilder, x):
    """e**x for ``x <= 0`` or NaN (sigmoid's e**-|x|), with ``exp``'s results, in 9 fewer
    vector instructions: no overflow to guard against, so n >= -126 and 2^n is one normal
    factor; NaN propagates through the arithmetic by itself. (Sigmoid went 25 -> ~20 cycles a
    16-lane vector on an AVX-512 Xeon, bound by the count of vector instructions on its two
    vector ports.)"""
    lo = _exp_constants(x)[0]
    below = b.fcmp_ordered("<", x, cg.const_like(x, lo))
    xc = b.select(below, cg.const_like(x, 0.0), x)
    t, y = _exp_reduced(b, xc)
    res = b.fmul(y, _two_to(b, _exponent_of(b, t), x))
    return b.select(below, cg.const_like(x, 0.0), res)


def log(b: ir.IRBuilder, x):
    """Natural log for float32/float64 scalars or vectors (0 -> -inf, <0 -> NaN, denormals ok)."""
    f64 = _is_f64(x)
    ity = _int_like(x)
    if f64:
        tiny, scale, sbits, mbits, emask, mant, half_bits = \
            2.2250738585072014e-308, 2.0 ** 52, 52, 52, 0x7ff, (1 << 52) - 1, 0x3fe0000000000000
        ebias = 1022
    else:
        tiny, scale, sbits, mbits, emask, mant, half_bits = \
            1.17549435e-38, 2.0 ** 23, 23, 23, 0xff, (1 << 23) - 1, 0x3f000000
        ebias = 126
    small = b.fcmp_ordered("<", x, cg.const_like(x, tiny))
    xs = b.select(small, b.fmul(x, cg.const_like(x, scale)), x)   # denormals: normalise first
    bits = b.bitcast(xs, ity)
    e = b.sub(b.and_(b.lshr(bits, cg.const(ity, mbits)), cg.const(ity, emask)), cg.const(ity, ebias))
    e = b.sub(e, b.select(small, cg.const(ity, sbits), cg.const(ity, 0)))
    m = b.bitcast(b.or_(b.and_(bits, cg.const(ity, mant)), cg.const(ity, half_bits)), x.type)  # [0.5, 1)
    lt = b.fcmp_ordered("<", m, cg.const_like(x, 0.7071067811865476))
    e = b.sitofp(b.sub(e, b.zext(lt, ity)), x.type)
    f = b.fsub(b.select(lt, b.fadd(m, m), m), cg.const_like(x, 1.0))   # m in [sqrt(.5), sqrt(2)) - 1
    if f64:
        s = b.fdiv(f, b.fadd(f, cg.const_like(x, 2.0)))
        z = b.fmul(s, s)
        big_r = b.fmul(z, _poly(b, z, [2.0 / (2 * k + 1) for k in range(10, 0, -1)]))
        hfsq = b.fmul(cg.const_like(x, 0.5), b.fmul(f, f))
        inner = _fmuladd(b, e, cg.const_like(x, 1.90821492927058770002e-10),
                         b.fmul(s, b.fadd(hfsq, big_r)))
        res = _fmuladd(b, e, cg.const_like(x, 6.93147180369123816490e-01),
                       b.fsub(f, b.fsub(hfsq, inner)))
    else:
        z = b.fmul(f, f)
        y = _poly(b, f, [7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1,
                         1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1,
                         3.3333331174E-1])
        y = b.fmul(b.fmul(y, f), z)
        y = _fmuladd(b, e, cg.const_like(x, -2.12194440e-4), y)
        y = _fmuladd(b, z, cg.const_like(x, -0.5), y)
        res = _fmuladd(b, e, cg.const_like(x, 0.693359375), b.fadd(f, y))
    res = b.select(b.fcmp_ordered("==", x, cg.const_like(x, 0.0)), cg.const_like(x, -math.inf), res)
    res = b.select(b.fcmp_ordered("==", x, cg.const_like(x, math.inf)), x, res)
    return b.select(b.fcmp_unordered("<", x, cg.const_like(x, 0.0)), cg.const_like(x, math.nan), res)


def sigmoid(b: ir.IRBuilder, x):
    """1 / (1 + e**-x), computed from e**-|x| so neither tail overflows or loses its digits."""
    ax = cg.call_intrinsic(b, "llvm.fabs", x)
    e = _exp_of_nonpositive(b, b.fneg(ax))
    one = cg.const_like(x, 1.0)
    r = b.fdiv(one, b.fadd(one, e))
    return b.select(b.fcmp_ordered(">=", x, cg.const_like(x, 0.0)), r, b.fmul(e, r))


def tanh(b: ir.IRBuilder, x):
    """tanh: a 13/6 odd rational approximation in float32, libm's tanh in float64."""
    if _is_f64(x):
        return cg.call_intrinsic(b, "llvm.tanh", x)
    xc = _clamp(b, x, -7.90531110763549805, 7.90531110763549805)
    x2 = b.fmul(xc, xc)
    p = _poly(b, x2, [-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                      5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                      4.89352455891786e-03])
    q = _poly(b, x2, [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                      4.89352518554385e-03])
    r = b.fmul(xc, b.fdiv(p, q))  # x * (p/q), not (x*p)/q: no denormal intermediate for tiny x
    ax = cg.call_intrinsic(b, "llvm.fabs", x)
    return b.select(b.fcmp_ordered("<", ax, cg.const_like(x, 0.0004)), x, r)


def erf(b: ir.IRBuilder, x):
    """erf: a 13/8 odd rational approximation on [-4, 4] in float32, libm's erf in float64."""
    if _is_f64(x):
        fn = cg.declare(b.module, "erf", cg.F64, [cg.F64])
        return map_lanes(b, lambda v: b.call(fn, [v]), x)
    xc = _clamp(b, x, -4.0, 4.0)
    x2 = b.fmul(xc, xc)
    p = _poly(b, x2, [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                      -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                      -1.60960333262415e-02])
    q = _poly(b, x2, [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                      -7.37332916720468e-03, -1.42647390514189e-02])
    return b.fmul(xc, b.fdiv(p, q))  # x * (p/q): no denormal intermediate for tiny x


def map_lanes(b: ir.IRBuilder, fn, x):
    """Apply a scalar function to each lane of a vector (or to a scalar)."""
    if not cg.is_vector(x):
        return fn(x)
    out = ir.Constant(x.type, ir.Undefined)
    for k in range(x.type.count):
        out = b.insert_element(out, fn(b.extract_element(x, cg.I32(k))), cg.I32(k))
    return out


_FUNCS = {"exp": exp, "log": log, "sigmoid": sigmoid, "tanh": tanh, "erf": erf}


def apply(b: ir.IRBuilder, name: str, x):
    """Compute intrinsic ``name`` (exp, log, sigmoid, tanh, erf) on a float value of any width;
    float16 goes through float32."""
    if isinstance(cg.element_type(x.type), ir.HalfType):
        wide = b.fpext(x, cg.with_lanes(cg.F32, cg.lanes_of(x)))
        return b.fptrunc(_FUNCS[name](b, wide), x.type)
    return _FUNCS[name](b, x)
