"""Math intrinsics against numpy over wide ranges, special values included (inf, -inf, NaN, -0,
denormals, overflow and underflow), scalar and vectorized; and against the evaluator on a
small sample. exp/log/tanh/sigmoid/erf are inline polynomials (see codegen/mathfuncs.py), so
their accuracy is checked in ulps too."""
from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.ir import Call

from cg_irbuild import buf, elementwise

F32_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 1.17549435e-38, 3.4e38, -3.4e38,
                88.7, 88.73, -87.4, -103.9, -104.5, 1.0, -1.0]


def inputs(op, dtype):
    big = 700.0 if dtype == "float64" else 100.0
    if op in ("log", "sqrt", "rsqrt"):
        lo = 5e-324 if dtype == "float64" else 1e-45
        hi = 1.7e308 if dtype == "float64" else 3.4e38
        x = np.concatenate([np.geomspace(lo, hi, 40000), np.linspace(0.25, 4, 20000)])
    elif op == "exp":
        x = np.linspace(-760 if dtype == "float64" else -110, 720 if dtype == "float64" else 95, 60000)
    elif op == "sigmoid":
        x = np.linspace(-big - 50, big + 50, 60000)
    elif op in ("sin", "cos"):
        x = np.linspace(-100, 100, 20000)
    else:
        x = np.concatenate([np.linspace(-12, 12, 50000), np.geomspace(1e-30, 1, 5000), -np.geomspace(1e-30, 1, 5000)])
    x = np.concatenate([x, F32_SPECIALS])
    if dtype == "float16":
        x = np.clip(x, -60000, 60000) if op not in ("exp", "sigmoid") else np.clip(x, -20, 20)
    return x.astype(dtype)


def reference(op, x):
    x64 = x.astype("float64")
    with np.errstate(all="ignore"):
        if op == "erf":
            return np.array([math.erf(v) if not math.isnan(v) else math.nan for v in x64])
        if op == "sigmoid":
            return np.where(x64 >= 0, 1 / (1 + np.exp(-x64)), np.exp(x64) / (1 + np.exp(x64)))
        if op == "rsqrt":
            return 1 / np.sqrt(x64)
        return {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "abs": np.abs,
                "floor": np.floor, "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos}[op](x64)


def ulps(got, want, dtype):
    want_t = want.astype(dtype)
    spacing = np.spacing(np.abs(want_t)).astype("float64")
    ok = np.isfinite(want_t) & (want_t != 0) & (np.abs(want_t) >= np.finfo(dtype).tiny)
    return (np.abs(got.astype("float64") - want)[ok] / spacing[ok]).max()


POLY = ["exp", "log", "tanh", "sigmoid", "erf"]
LIBM_LIKE = ["sqrt", "rsqrt", "abs", "floor", "ceil", "round", "sin", "cos"]
# Worst error measured over these inputs (float32), with a little headroom.
MAX_ULPS = {"exp": 2, "log": 2, "sigmoid": 3, "tanh": 6, "erf": 6}
TOL = {"float32": 1e-5, "float64": 1e-13, "float16": 2e-3}


@pytest.fixture(scope="module")
def math_lib(build):
    """All intrinsics for all float dtypes, scalar and vectorized, in one library."""
    from kiln.ir import IRModule
    funcs = {}
    for op in POLY + LIBM_LIKE:
        for dtype in ("float32", "float64", "float16"):
            for structure in ("serial", "vectorized"):
                n = len(inputs(op, dtype))
                A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
                funcs[f"{op}_{dtype}_{structure}"] = elementwise(
                    n, [A], B, lambda a, op=op, d=dtype: Call(op, (a,), d), structure)
    return build(IRModule(funcs))


@pytest.mark.parametrize("structure", ["serial", "vectorized"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", POLY + LIBM_LIKE)
def test_intrinsic_matches_numpy(math_lib, op, dtype, structure):
    x = inputs(op, dtype)
    out = np.zeros_like(x)
    assert math_lib.call(f"{op}_{dtype}_{structure}", x, out) == 0
    want = reference(op, x)
    with np.errstate(all="ignore"):
        compare(op, dtype, structure, out, want)


def compare(op, dtype, structure, out, want):
    rtol = TOL[dtype]
    tiny = float(np.finfo(dtype).tiny)
    # Results in the denormal range carry fewer significant bits: compare those absolutely.
    np.testing.assert_allclose(out.astype("float64"), want.astype(dtype).astype("float64"), rtol=rtol,
                               atol=tiny * (1 if op not in ("sin", "cos") else 1e-7 / tiny * 1e-9),
                               err_msg=f"{op} {dtype} {structure}")
    assert np.array_equal(np.isnan(out), np.isnan(want.astype(dtype))), "NaN where numpy has none or v.v."
    if op in MAX_ULPS and dtype == "float32" or op in ("exp", "log") and dtype == "float64":
        assert ulps(out, want, dtype) <= MAX_ULPS[op]


def test_pow_matches_numpy(check):
    n = 500
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 10, n).astype("float32")
    y = rng.uniform(-4, 4, n).astype("float32")
    for structure in ("serial", "vectorized"):
        A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
        func = elementwise(n, [A, B], C, lambda a, b: Call("pow", (a, b), "float32"), structure)
        check(func, x, y, np.zeros(n, "float32"), expected=[None, None, np.power(x, y)], rtol=1e-5, atol=1e-30)


def test_intrinsics_match_evaluator(check_many):
    n = 37
    x = np.linspace(-3, 3, n).astype("float32")
    x[0], x[1] = np.nan, -np.inf
    cases = {}
    for op in POLY + LIBM_LIKE:
        xin = np.abs(x) if op in ("log", "sqrt", "rsqrt") else x
        A, B = buf("A", (n,)), buf("B", (n,))
        cases[op] = (elementwise(n, [A], B, lambda a, op=op: Call(op, (a,), "float32"), "split"),
                     [xin, np.zeros(n, "float32")], None)
    check_many(cases, rtol=1e-5, atol=1e-7)


def test_abs_of_integers(check):
    n = 37
    for dtype in ("int8", "int32", "int64", "uint8"):
        x = np.random.default_rng(1).integers(-100 if dtype != "uint8" else 0, 100, n).astype(dtype)
        A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
        check(elementwise(n, [A], B, lambda a, d=dtype: Call("abs", (a,), d), "split"), x, np.zeros(n, dtype),
              expected=[None, np.abs(x)])


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exp_below_the_normal_range_computes_nothing_near_it(build, target, dtype):
    """exp of an argument below ln(smallest normal) is 0, and its lane computes e**0 meanwhile
    (codegen/mathfuncs.exp), not e**lo: that value sits at the edge of the denormal range, and
    an Intel core running AVX2 code takes a microcode assist per lane for it (a causal
    attention's masked scores ran 3x slower per exp). e**0 is exact, so the processor's sticky
    inexact and underflow flags stay clear; e**lo rounds, and raised the inexact flag."""
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    fe_underflow, fe_inexact = 0x10, 0x20         # x86-64 <fenv.h>; every CPU the tests run on
    lo = -87.3366 if dtype == "float32" else -708.3965   # just below ln(smallest normal)
    x = np.array([lo, lo - 3, -1e4, -np.inf, -1e30, lo - 1e-3, 2 * lo, 10 * lo] * 8, dtype)
    n = len(x)
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    lib = build(elementwise(n, [A], B, lambda a: Call("exp", (a,), dtype), "vectorized"), target)
    out = np.ones_like(x)
    libm.feclearexcept(fe_underflow | fe_inexact)
    assert lib.call("main", x, out) == 0
    raised = libm.fetestexcept(fe_underflow | fe_inexact)
    np.testing.assert_array_equal(out, 0)
    assert raised == 0, f"flags {raised:#x}: the lanes below the range computed a rounded value"
