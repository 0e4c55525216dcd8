"""Every expression kind, compiled, against numpy and the reference evaluator: arithmetic per
dtype (int8/uint8 wrap-around, float16), floor division/modulo with negative operands, min/max
(Python's NaN semantics, which the evaluator defines), comparisons, logic, select and casts
between all dtypes. Each case runs scalar, as one vectorized loop, and split with a vectorized
inner loop and a tail predicate (n = 37 is not a multiple of any lane count)."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.ir import FloatImm, IntImm, Max, Min, Not, Select, Var
from kiln.ir import dtype as dt

from cg_irbuild import buf, elementwise, nest, prim_func, realize, store

N = 37
STRUCTURES = ["serial", "vectorized", "split"]
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.5], "float64")


def data(dtype, seed, specials=False, nonzero=False, small=False):
    rng = np.random.default_rng(seed)
    if dt.is_float(dtype):
        x = rng.normal(0, 10, N)
        if specials:
            x[:len(SPECIALS)] = SPECIALS
        x = x.astype(dtype)
    elif dtype == "bool":
        x = rng.random(N) < 0.5
    else:
        info = np.iinfo(dtype)
        lo, hi = (max(info.min, -1000), min(info.max, 1000)) if small else (info.min, info.max)
        x = rng.integers(lo, hi, N, endpoint=True).astype(dtype)
    if nonzero:
        x[x == 0] = 3
    return x


def case(in_dtypes, out_dtype, fn, ref, structure, inputs=None):
    """(func, arrays, expected) for ``out[i] = fn(*inputs[i])``, for ``check_many``."""
    ins = [buf(f"A{k}", (N,), d) for k, d in enumerate(in_dtypes)]
    out = buf("C", (N,), out_dtype)
    func = elementwise(N, ins, out, fn, structure)
    arrays = inputs or [data(d, k) for k, d in enumerate(in_dtypes)]
    with np.errstate(all="ignore"):
        expected = np.asarray(ref(*arrays)).astype(out_dtype)
    return func, list(arrays) + [np.zeros(N, out_dtype)], [None] * len(arrays) + [expected]


def run_case(check, *args, **kwargs):
    func, arrays, expected = case(*args, **kwargs)
    check(func, *arrays, expected=expected)


ARITH_DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64"]


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", ARITH_DTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_arithmetic_wraps_like_numpy(check, op, dtype, structure):
    fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}[op]
    small = dtype in ("int32", "int64")  # int32/int64 overflow is undefined; 8/16-bit wraps
    inputs = [data(dtype, 1, small=small), data(dtype, 2, small=small)]
    run_case(check, [dtype, dtype], dtype, fn, fn, structure, inputs)


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_float_division_and_constants(check, dtype, structure):
    fn = lambda a, b: a / b + FloatImm(0.25, dtype)  # noqa: E731
    run_case(check, [dtype, dtype], dtype, fn, lambda a, b: a / b + np.asarray(0.25, dtype), structure)


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_floordiv_floormod_by_variables(check, dtype, structure):
    a, b = data(dtype, 3), data(dtype, 4, nonzero=True)
    if dtype != "uint8":
        a[:4], b[:4] = np.array([-7, 7, -7, 7], dtype), np.array([2, -2, -2, 2], dtype)
        b[b == -1] = 3  # avoid INT_MIN // -1
    run_case(check, [dtype, dtype], dtype, lambda x, y: x // y, np.floor_divide, structure, [a, b])
    run_case(check, [dtype, dtype], dtype, lambda x, y: x % y, np.remainder, structure, [a, b])


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("divisor", [1, 2, 8, 7, -3, -4])
def test_floordiv_floormod_by_constants(check, divisor, structure):
    a = np.arange(-18, -18 + N, dtype="int32")
    run_case(check, ["int32"], "int32", lambda x: x // IntImm(divisor), lambda x: x // divisor, structure, [a])
    run_case(check, ["int32"], "int32", lambda x: x % IntImm(divisor), lambda x: x % divisor, structure, [a])


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floordiv_floormod_match_numpy(check, dtype, structure):
    a = data(dtype, 5)
    b = data(dtype, 6, nonzero=True)
    a[:4], b[:4] = [-7.5, 7.5, -7.5, 0.0], [2.0, -2.0, -2.0, -3.0]
    run_case(check, [dtype, dtype], dtype, lambda x, y: x // y, np.floor_divide, structure, [a, b])
    run_case(check, [dtype, dtype], dtype, lambda x, y: x % y, np.remainder, structure, [a, b])


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int32"])
def test_min_max_python_semantics(check, dtype, structure):
    a, b = data(dtype, 7, specials=True), data(dtype, 8)
    if dt.is_float(dtype):
        b[3:8] = [np.nan, 1.0, np.nan, -np.inf, 0.0]
    # Python's min(a, b) keeps a unless b < a: min(nan, 1) is nan, min(1, nan) is 1.
    run_case(check, [dtype, dtype], dtype, Min, lambda x, y: np.where(y < x, y, x), structure, [a, b])
    run_case(check, [dtype, dtype], dtype, Max, lambda x, y: np.where(y > x, y, x), structure, [a, b])


CMP = {"lt": (lambda a, b: a < b, np.less), "le": (lambda a, b: a <= b, np.less_equal),
       "gt": (lambda a, b: a > b, np.greater), "ge": (lambda a, b: a >= b, np.greater_equal),
       "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal)}


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int64"])
def test_comparisons_write_bool(check_many, dtype, structure):
    a, b = data(dtype, 9, specials=True), data(dtype, 10)
    b[::3] = a[::3]  # some equal pairs (NaN == NaN stays False, NaN != NaN True)
    check_many({op: case([dtype, dtype], "bool", fn, ref, structure, [a, b])
                for op, (fn, ref) in CMP.items()})


@pytest.mark.parametrize("structure", STRUCTURES)
def test_logic_on_bools(check, structure):
    p, q = data("bool", 11), data("bool", 12)
    run_case(check, ["bool", "bool"], "bool", lambda x, y: x & y, np.logical_and, structure, [p, q])
    run_case(check, ["bool", "bool"], "bool", lambda x, y: x | y, np.logical_or, structure, [p, q])
    run_case(check, ["bool"], "bool", lambda x: Not(x), np.logical_not, structure, [p])


@pytest.mark.parametrize("structure", STRUCTURES)
def test_select_mixes_types(check, structure):
    fn = lambda c, x, y: Select(c, x * 2.0, y.astype("float32"))  # noqa: E731
    ref = lambda c, x, y: np.where(c, x * 2, y.astype("float32"))  # noqa: E731
    run_case(check, ["bool", "float32", "int8"], "float32", fn, ref, structure)


CAST_DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"]


def cast_input(src, dst, seed):
    """Values every conversion defines: ints in range of the target where it is a float->int."""
    x = data(src, seed)
    if dt.is_float(src):
        x = (x * 10).astype(src)
        if dt.is_int(dst):
            x[0], x[1] = np.nan, -0.0  # NaN converts to 0 (saturating conversion)
            if dst == "uint8":
                x[2:6] = [-1.0, -3.7, 300.2, 255.9]  # wraps through int32 like numpy's astype
            if dst == "int8":
                x[2:4] = [200.5, -129.0]
        else:
            x[:3] = [np.nan, np.inf, -0.0]
    return x


def cast_reference(src, dst):
    def ref(v):
        if dt.is_float(src) and dt.is_int(dst):
            v = np.nan_to_num(v.astype("float64"), nan=0.0)
            return np.trunc(v).astype("int64").astype(dst)
        if dst == "bool":
            return v != 0 if not dt.is_float(src) else (v != 0) | np.isnan(v)
        return v.astype(dst)
    return ref


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("src", CAST_DTYPES)
def test_cast_between_all_dtypes(check_many, src, structure):
    check_many({f"{src}_to_{dst}": case([src], dst, lambda v, d=dst: v.astype(d), cast_reference(src, dst),
                                        structure, [cast_input(src, dst, 13)])
                for dst in CAST_DTYPES})


@pytest.mark.parametrize("structure", STRUCTURES)
def test_symbolic_extent_and_index_arithmetic(build, structure):
    """A symbolic dimension used in index arithmetic: out[i] = A[n - 1 - i] * i."""
    n = Var("n")
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    kind = "vectorized" if structure != "serial" else "serial"
    body = realize("R", [("S", n, i)], lambda vi: store(B, A[n - 1 - vi] * vi.astype("float32"), vi))
    lib = build(prim_func([A, B], nest([(i, n, kind)], body)))
    assert lib.sym_names("main") == ["n"]
    for size in (0, 1, 7, 8, 9, 100):
        a = np.random.default_rng(size).random(size).astype("float32")
        b = np.zeros(size, "float32")
        assert lib.call("main", a, b) == 0
        np.testing.assert_allclose(b, a[::-1] * np.arange(size), rtol=1e-6)
