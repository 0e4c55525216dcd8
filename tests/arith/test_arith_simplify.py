"""kiln.arith: constant folding, canonical affine forms, floordiv/floormod under bounds, proofs,
and a property test that simplification never changes a value."""
import random

import numpy as np
import pytest

from kiln import arith
from kiln.ir import (EQ, GE, GT, LE, LT, NE, Add, And, Cast, FloatImm, FloorDiv, FloorMod, IntImm,
                     Max, Min, Mul, Or, Range, Select, Sub, Var, assert_structural_equal, const)

_OPS = {Add: "+", Sub: "-", Mul: "*", FloorDiv: "//", FloorMod: "%", LT: "<", LE: "<=", GT: ">",
        GE: ">=", EQ: "==", NE: "!=", And: "and", Or: "or"}
_PREC = {Add: 1, Sub: 1, Mul: 2, FloorDiv: 2, FloorMod: 2, And: -2, Or: -3}


def fmt(e) -> str:
    """Print an expression with the usual precedence (tests should not depend on the printer)."""
    def go(e, prec=0):
        if isinstance(e, Var):
            return e.name
        if isinstance(e, IntImm):
            return str(bool(e.value)) if e.dtype == "bool" else str(e.value)
        if isinstance(e, FloatImm):
            return repr(e.value)
        if type(e) in _OPS:
            p = _PREC.get(type(e), 0)
            s = f"{go(e.a, p)} {_OPS[type(e)]} {go(e.b, p + 1)}"
            return f"({s})" if p < prec else s
        if isinstance(e, (Min, Max)):
            return f"{type(e).__name__.lower()}({go(e.a)}, {go(e.b)})"
        if isinstance(e, Select):
            return f"select({go(e.condition)}, {go(e.true_value)}, {go(e.false_value)})"
        if isinstance(e, Cast):
            return f"{e.dtype}({go(e.value)})"
        return type(e).__name__ + "(" + ", ".join(go(getattr(e, f)) for f in ("a", "b") if hasattr(e, f)) + ")"
    return go(e)


i, j, k, n = Var("i"), Var("j"), Var("k"), Var("n")
i0, i1, i2 = Var("i_0"), Var("i_1"), Var("i_2")


def s(e, **bounds):
    vs = {"i": i, "j": j, "k": k, "n": n, "i_0": i0, "i_1": i1, "i_2": i2}
    return fmt(arith.simplify(e, {vs[name]: r for name, r in bounds.items()}))


def test_constant_folding():
    assert s(const(3) + 4 * const(5)) == "23"
    assert s(const(7) // 2) == "3" and s(const(-7) // 2) == "-4" and s(const(-7) % 2) == "1"
    assert s(Min(const(3), const(9))) == "3" and s(Max(const(3), const(9))) == "9"
    assert s(const(5) // 0) == "5 // 0"  # left for the program to show
    assert s(Cast("float32", const(3))) == "3.0" and s(Cast("int32", const(2.9))) == "2"
    assert s(Cast("int8", const(200))) == "-56"  # wraps as the machine does
    assert s(Select(const(2) < 3, i, j)) == "i"
    assert s((const(1) < 2) & (i < j)) == "i < j"
    # Floats fold in their own precision.
    f = arith.simplify(FloatImm(0.1) + FloatImm(0.2))
    assert f.value == float(np.float32(0.1) + np.float32(0.2))
    assert arith.simplify(FloatImm(0.1, "float64") + FloatImm(0.2, "float64")).value == 0.1 + 0.2


def test_canonical_affine_form():
    e = arith.simplify((i0 * 2 + i1) * 2 + i2)
    assert fmt(e) == "i_0 * 4 + i_1 * 2 + i_2"
    assert_structural_equal(e, i0 * 4 + i1 * 2 + i2)
    assert s(i * 1) == "i" and s(i + 0) == "i" and s(i * 0) == "0" and s(i - i) == "0"
    assert s(j + i + 3 - j) == "i + 3"
    assert s((i + 1) * 3 - i * 3) == "3"
    assert s(i * 4 - j * 2 - 5) == "i * 4 - j * 2 - 5"
    assert s(8 - i) == "8 - i"
    assert s(0 - i - 1) == "i * -1 - 1"
    assert s(i * j + i * j) == "i * j * 2"
    # Idempotent.
    once = arith.simplify(j * 3 + i * 2 - 1)
    assert fmt(arith.simplify(once)) == fmt(once) == "j * 3 + i * 2 - 1"


def test_floats_never_reassociate():
    x, y = Var("x", "float32"), Var("y", "float32")
    e = (x + 1.0) + 2.0
    assert arith.simplify(e) is e
    assert fmt(arith.simplify(x * 0.0)) == "x * 0.0"  # NaN * 0 is NaN: not 0
    assert fmt(arith.simplify((x + y) - y)) == "x + y - y"
    assert fmt(arith.simplify(x * (FloatImm(2.0) + 1.0))) == "x * 3.0"


def test_floordiv_floormod_under_bounds():
    assert s((i0 * 4 + i1) // 4, i_1=(0, 4)) == "i_0"
    assert s((i0 * 4 + i1) % 4, i_1=(0, 4)) == "i_1"
    assert s((i * 8) % 4) == "0" and s((i * 8) // 4) == "i * 2"
    assert s((i * 8 + j) // 4, j=(0, 4)) == "i * 2"
    assert s((i * 8 + j + 5) // 4, j=(0, 3)) == "i * 2 + 1"
    assert s((i * 8 + j + 5) % 4, j=(0, 3)) == "j + 1"
    # Unknown remainder: the multiple of the divisor is still pulled out.
    assert s((i * 8 + j) // 4) == "i * 2 + j // 4"
    assert s((i * 8 + j) % 4) == "j % 4"
    assert s((i * 6 + j * 2) // 4) == "(i * 3 + j) // 2"
    assert s((i * 6 + j * 2) % 4) == "(i * 3 + j) % 2 * 2"
    assert s(i // 4 // 2) == "i // 8"
    assert s(i % 8 % 4) == "i % 4"
    assert s(i % 4 // 4) == "0" and s(i % 4 % 4) == "i % 4"
    assert s(i // 4, i=(0, 4)) == "0" and s(i % 16, i=(0, 16)) == "i"
    assert s((i + 16) // 4, i=(2, 2)) == "4"  # i in [2, 4)


def test_fuse_then_split():
    # fuse(i in [0,4), j in [0,8)) -> f; split f by 4 -> (fo, fi); i = f // 8, j = f % 8.
    fo, fi = Var("fo"), Var("fi")
    b = {fo: (0, 8), fi: (0, 4)}
    f = fo * 4 + fi
    assert fmt(arith.simplify(f // 8, b)) == "fo // 2"
    assert fmt(arith.simplify(f % 8, b)) == "fo % 2 * 4 + fi"
    # split by 16: the inner part straddles the divisor.
    b16 = {fo: (0, 2), fi: (0, 16)}
    f16 = fo * 16 + fi
    assert fmt(arith.simplify(f16 // 8, b16)) == "fo * 2 + fi // 8"
    assert fmt(arith.simplify(f16 % 8, b16)) == "fi % 8"
    # split i by 4 then fuse the pieces again: i = (f // 4) * 4 + f % 4 -> f
    fused = Var("fused")
    assert fmt(arith.simplify((fused // 4) * 4 + fused % 4)) == "fused"
    assert fmt(arith.simplify(((fused // 4) * 4 + fused % 4) * 2 + 1)) == "fused * 2 + 1"
    # three-way fuse of (a in [0,2), b in [0,3), c in [0,4)) then unfuse
    a_, b_, c_ = Var("a"), Var("b"), Var("c")
    g = Var("g")
    bg = {g: (0, 24)}
    rebuilt = (g // 12) * 12 + (g % 12 // 4) * 4 + g % 4
    assert fmt(arith.simplify(rebuilt, bg)) == "g"
    del a_, b_, c_


def test_comparisons_and_proofs():
    assert s(i < 8, i=(0, 8)) == "True"
    assert s(i < 7, i=(0, 8)) == "i < 7"
    assert s(i >= 8, i=(0, 8)) == "False"
    assert s(i * 4 + j < 32, i=(0, 8), j=(0, 4)) == "True"
    assert s(i * 4 + j < 31, i=(0, 8), j=(0, 4)) == "i * 4 + j < 31"
    assert s(i + 1 == 1 + i) == "True" and s(i + 1 != i) == "True"
    assert arith.can_prove(i < n, {i: Range(0, n)})
    assert arith.can_prove(i * 4 + j < n * 4, {i: Range(0, n), j: (0, 4)})
    assert not arith.can_prove(i < n - 1, {i: Range(0, n)})
    assert not arith.can_prove(i < 8)
    assert arith.can_prove((i < 8) & (i >= 0), {i: (0, 8)})
    assert not arith.can_prove((i < 8) & (i >= 1), {i: (0, 8)})
    assert s(Min(i, const(8)), i=(0, 8)) == "i" and s(Max(i, const(8)), i=(0, 8)) == "8"
    assert s(Min(i * 4 + j, const(31)), i=(0, 8), j=(0, 4)) == "i * 4 + j"
    assert s(Min(i, j)) == "min(i, j)"
    assert s(Min(i + 1, i)) == "i"


def test_const_int_bound():
    assert arith.const_int_bound(i * 4 + j, {i: (0, 8), j: (0, 4)}) == (0, 31)
    assert arith.const_int_bound(i * -2 + 3, {i: (0, 8)}) == (-11, 3)
    assert arith.const_int_bound((i * 4 + j) // 3, {i: (0, 8), j: (0, 4)}) == (0, 10)
    assert arith.const_int_bound(i % 5) == (0, 4)
    lo, hi = arith.const_int_bound(i + j, {i: (0, 8)})
    assert lo == -float("inf") and hi == float("inf")
    assert arith.const_int_bound(i - i) == (0, 0)
    assert arith.const_int_bound(Cast("int32", Var("b", "int8"))) == (-128, 127)


def test_analyzer_scopes():
    ana = arith.Analyzer()
    with ana.scope({i: Range(0, 4)}):
        assert ana.can_prove(i < 4)
    assert not ana.can_prove(i < 4)


# ---- property test -----------------------------------------------------------------------

def _eval(e, env):
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, IntImm):
        return e.value
    a, b = _eval(e.a, env), _eval(e.b, env)
    return {Add: lambda: a + b, Sub: lambda: a - b, Mul: lambda: a * b, FloorDiv: lambda: a // b,
            FloorMod: lambda: a % b, Min: lambda: min(a, b), Max: lambda: max(a, b)}[type(e)]()


def _random_expr(rng, vars_, depth):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(vars_) if rng.random() < 0.7 else const(rng.randint(-6, 12))
    op = rng.choice([Add, Add, Sub, Mul, FloorDiv, FloorMod, Min, Max])
    a = _random_expr(rng, vars_, depth - 1)
    if op in (FloorDiv, FloorMod):
        return op(a, const(rng.choice([1, 2, 3, 4, 8, 16])))
    if op is Mul:
        return Mul(a, const(rng.randint(-3, 8))) if rng.random() < 0.8 else Mul(a, rng.choice(vars_))
    return op(a, _random_expr(rng, vars_, depth - 1))


@pytest.mark.parametrize("seed", range(12))
def test_simplify_preserves_values(seed):
    rng = random.Random(seed)
    vars_ = [Var(f"x{t}") for t in range(3)]
    for _ in range(60):
        bounds = {v: (rng.randint(-4, 4), rng.randint(1, 9)) for v in vars_}
        e = _random_expr(rng, vars_, 4)
        simp = arith.simplify(e, bounds)
        lo, hi = arith.const_int_bound(e, bounds)
        for _ in range(20):
            env = {v: rng.randrange(m, m + ext) for v, (m, ext) in bounds.items()}
            want = _eval(e, env)
            assert _eval(simp, env) == want, (fmt(e), fmt(simp), env)
            assert lo <= want <= hi, (fmt(e), lo, hi, env)
