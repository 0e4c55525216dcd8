"""bfloat16, the float8 formats and float4_e2m1fn converted by compiled kernels
(codegen/narrow_float.py), against ml_dtypes' astype, bit for bit (any NaN matches any NaN):

- every bit pattern of each format (all 65,536 of bfloat16, all 256 of each float8, all 16 of
  float4) to float32 and back;
- float32 to each format at its rounding edges: every representable value, every half-way
  point between neighbours (ties go to even), the float32 values just beside each half-way
  point, overflow (inf or NaN, as the format has), underflow, -0, infinities, NaN, and random
  values across the whole range;
- float16 and float64 through float32, and casts to bool and int32.

Each conversion runs as a serial loop and as a split loop whose inner loop is vectorized
(8 lanes) with a tail, so the scalar and the vector code are both checked (float4's loops stay
scalar: its elements are fields of a byte).
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import IRModule

from cg_irbuild import buf, elementwise

ml_dtypes = pytest.importorskip("ml_dtypes")

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]
NARROW = ["bfloat16"] + FLOAT8 + ["float4_e2m1fn"]   # float4: packed two to a byte
STRUCTURES = ["serial", "split"]
N = 1 << 19   # room for every input below (zero-padded)


def _uint(dtype):
    return np.dtype(f"uint{np.dtype(dtype).itemsize * 8}")


def _all_patterns(dtype):
    n = 16 if dtype == "float4_e2m1fn" else 1 << (8 * np.dtype(dtype).itemsize)
    return np.arange(n, dtype=_uint(dtype)).view(dtype)


def _edges(dtype):
    """float32 inputs at the rounding edges of ``dtype`` (see the module doc)."""
    finite = _all_patterns(dtype).astype(np.float32)
    finite = np.unique(finite[np.isfinite(finite)])
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    mids = mids[np.abs(mids) < 3e38].astype(np.float32)   # exact: one more bit than the format
    beside = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    big = float(finite.max())
    with np.errstate(over="ignore"):
        specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, big * 1.0001, -big * 1.0001,
                             big * 1.07, big * 2, 3e38, -3e38, 1e-45, -1e-45, 1.1754944e-38, 2.0 ** -127,
                             2.0 ** -126 * 1.5, 2.0 ** -127 * 1.5], np.float32)
    rng = np.random.default_rng(18)
    rand = (rng.choice([-1.0, 1.0], 4000) * 2.0 ** rng.uniform(-40, 20, 4000)).astype(np.float32)
    return np.concatenate([finite, mids, beside, specials, rand]).astype(np.float32)


def _expected(x, dst):
    with np.errstate(all="ignore"):
        return x.astype(dst)


def _assert_same(got, want, what):
    got_f = got.astype(np.float32)
    want_f = want.astype(np.float32)
    nan = np.isnan(want_f)
    bad = np.flatnonzero(np.isnan(got_f) != nan)
    assert bad.size == 0, f"{what}: NaN at {bad[:5]}: got {got[bad[:5]]}, want {want[bad[:5]]}"
    g, w = got.view(_uint(got.dtype))[~nan], want.view(_uint(want.dtype))[~nan]
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{what}: {bad.size} differ, e.g. bits {g[bad[:5]]} instead of {w[bad[:5]]} "
                           f"(values {got[~nan][bad[:5]]} instead of {want[~nan][bad[:5]]})")


def _kernel_name(src, dst, structure):
    return f"{src}_to_{dst}_{structure}"


PAIRS = ([(d, "float32") for d in NARROW] + [("float32", d) for d in NARROW]
         + [("float16", d) for d in NARROW] + [("float64", d) for d in NARROW]
         + [(d, "float16") for d in NARROW] + [(d, "float64") for d in NARROW]
         + [(d, "bool") for d in NARROW] + [(d, "int32") for d in NARROW]
         + [("float8_e4m3fn", "bfloat16"), ("bfloat16", "float8_e5m2")])


@pytest.fixture(scope="module")
def library():
    """Every conversion of PAIRS in both loop structures, compiled into one library (kernel
    ``src_to_dst_structure(A, C)``)."""
    funcs = {}
    for src, dst in PAIRS:
        for structure in STRUCTURES:
            a, c = buf("A", (N,), src), buf("C", (N,), dst)
            convert = lambda v, dst=dst: v.astype(dst)   # noqa: E731
            funcs[_kernel_name(src, dst, structure)] = elementwise(N, [a], c, convert, structure)
    return kiln.build(IRModule(funcs))


def _run(library, src, dst, x, structure):
    x = np.asarray(x, dtype=src)
    padded = np.zeros(N, dtype=src)
    padded[:x.size] = x
    out = kiln.nd.empty((N,), dst)
    library[_kernel_name(src, dst, structure)](kiln.nd.array(padded), out)
    return out.numpy()[:x.size]


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", NARROW)
def test_every_bit_pattern_to_float32_and_back(library, dtype, structure):
    x = _all_patterns(dtype)
    f = _run(library, dtype, "float32", x, structure)
    _assert_same(f, x.astype(np.float32), f"{dtype} -> float32")
    back = _run(library, "float32", dtype, f, structure)
    _assert_same(back, _expected(f, dtype), f"{dtype} -> float32 -> {dtype}")
    finite = np.isfinite(f)
    _assert_same(back[finite], x[finite], f"{dtype} round trip")


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", NARROW)
def test_float32_rounds_to_nearest_even_at_the_edges(library, dtype, structure):
    x = _edges(dtype)
    _assert_same(_run(library, "float32", dtype, x, structure), _expected(x, dtype), f"float32 -> {dtype}")


@pytest.mark.parametrize("dtype", NARROW)
def test_float16_and_float64_sources(library, dtype):
    rng = np.random.default_rng(3)
    x16 = np.concatenate([_all_patterns("float16"), rng.normal(0, 100, 1000).astype(np.float16)])
    _assert_same(_run(library, "float16", dtype, x16, "split"), _expected(x16.astype(np.float32), dtype),
                 f"float16 -> {dtype}")
    # float64 is rounded to float32 first; these values are float32 values, so once is exact
    x64 = _edges(dtype).astype(np.float64)
    _assert_same(_run(library, "float64", dtype, x64, "split"), _expected(x64, dtype), f"float64 -> {dtype}")


@pytest.mark.parametrize("dtype", NARROW)
def test_to_float16_float64_bool_int32(library, dtype):
    x = _all_patterns(dtype)
    f = x.astype(np.float32)
    with np.errstate(all="ignore"):   # bfloat16's range overflows float16: inf, as numpy's
        _assert_same(_run(library, dtype, "float16", x, "split"), f.astype(np.float16), f"{dtype} -> float16")
        _assert_same(_run(library, dtype, "float64", x, "split"), f.astype(np.float64), f"{dtype} -> float64")
    np.testing.assert_array_equal(_run(library, dtype, "bool", x, "split"), f != 0)   # NaN is true
    ok = np.isfinite(f) & (np.abs(f) < 2 ** 31)
    np.testing.assert_array_equal(_run(library, dtype, "int32", x, "split")[ok], f[ok].astype(np.int32))


def test_narrow_to_narrow(library):
    x = _all_patterns("float8_e4m3fn")
    _assert_same(_run(library, "float8_e4m3fn", "bfloat16", x, "split"),
                 x.astype(np.float32).astype("bfloat16"), "float8_e4m3fn -> bfloat16")
    y = _all_patterns("bfloat16")
    _assert_same(_run(library, "bfloat16", "float8_e5m2", y, "split"),
                 _expected(y.astype(np.float32), "float8_e5m2"), "bfloat16 -> float8_e5m2")


@pytest.mark.parametrize("dtype", NARROW)
def test_reference_evaluator_converts_as_ml_dtypes(dtype):
    """kiln.ir.evaluator (the reference the other codegen tests compare with) rounds through the
    narrow dtype like ml_dtypes."""
    from kiln.ir.evaluator import evaluate
    x = np.concatenate([_edges(dtype)[::97], [np.nan, -0.0, np.inf]]).astype(np.float32)
    a, mid, c = buf("A", (x.size,), "float32"), buf("M", (x.size,), dtype), buf("C", (x.size,), "float32")
    down = elementwise(x.size, [a], mid, lambda v: v.astype(dtype))
    up = elementwise(x.size, [mid], c, lambda v: v.astype("float32"))
    m = np.zeros(x.size, dtype)
    out = np.zeros(x.size, np.float32)
    evaluate(down, x, m)
    evaluate(up, m, out)
    _assert_same(m, _expected(x, dtype), f"evaluator float32 -> {dtype}")
    _assert_same(out, _expected(x, dtype).astype(np.float32), f"evaluator {dtype} -> float32")
