"""The combine loop of an rfactor-ed row reduction (``codegen/tree_combine.py``): lowered as a
tree of vector halves when it matches, with the same results as numpy (sum, max, min, either
operand order, NaN and infinities); a whole reduction loop the rfactor left (a symbolic extent,
or a constant one no vector width divides) lowered as vectors with a masked last one; and a
serial loop when neither matches."""
from __future__ import annotations

import numpy as np
import pytest

from kiln import codegen
from kiln.codegen.tree_combine import match_combine
from kiln.ir import FloatImm, For, Max, Min, Var
from kiln.ir.functor import pre_order_visit
from kiln.lower import lower_prim_func

from cg_irbuild import buf, nest, prim_func, realize, store

OPS = {
    "sum": (lambda a, b: a + b, 0.0, np.sum),
    "max": (lambda a, b: Max(a, b), float("-inf"), np.max),
    "min": (lambda a, b: Min(a, b), float("inf"), np.min),
}


def combine(rows, lanes, op="sum", x_first=False, start=0):
    """S[r] = reduce(op, R[r, start:lanes]) as a scheduled program writes a row reduction's
    combine step (a block with an init and a reduce iterator bound to a serial loop), lowered
    as a model's kernels are (``lower_prim_func``: the init before the loop, no blocks)."""
    fn, identity, _ = OPS[op]
    R, S = buf("R", (rows, lanes)), buf("S", (rows,))
    r, k = Var("r"), Var("k")

    def body(vr, vk):
        return store(S, fn(R[vr, vk], S[vr]) if x_first else fn(S[vr], R[vr, vk]), vr)

    blk = realize("S", [("S", rows, r), ("R", lanes - start, k + start if start else k)], body,
                  init_fn=lambda vr, vk: store(S, FloatImm(identity), vr))
    return lower_prim_func(prim_func([R, S], nest([(r, rows, "parallel"), (k, lanes - start, "serial")], blk)))


def combine_loops(func):
    """For each serial loop of ``func`` after lowering: whether it matches as a combine."""
    found = []
    pre_order_visit(func.body, lambda n: found.append(match_combine(n) is not None)
                    if isinstance(n, For) and n.kind == "serial" else None)
    return found


@pytest.mark.parametrize("lanes", [4, 8, 16, 32, 64])
@pytest.mark.parametrize("op", sorted(OPS))
def test_tree_matches_numpy(check, op, lanes):
    rows = 5
    r = np.random.default_rng(lanes).standard_normal((rows, lanes)).astype("float32")
    want = OPS[op][2](r, axis=1)
    check(combine(rows, lanes, op), r, np.zeros(rows, "float32"), expected=[None, want],
          rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("lanes, nan_at", [(32, 0), (32, 5), (32, 16), (32, 31), (60, 59), (60, 3)])
@pytest.mark.parametrize("op", sorted(OPS))
def test_special_values_as_the_serial_loop(check, op, lanes, nan_at):
    """Rows holding +-inf, all-equal values, a NaN, all NaNs: the same as the evaluator's
    serial loop (a sum is NaN; max and min skip the NaN, as the loop's selects do, and keep
    their start value when every element is NaN). 32 lanes: a combine step; 60: a whole
    reduction, its last vector masked (the NaN at 59 in that vector)."""
    r = np.random.default_rng(3).standard_normal((5, lanes)).astype("float32")
    r[0, 7] = np.inf
    r[1, 30] = -np.inf
    r[2, :] = 1.5
    r[3, nan_at] = np.nan
    r[4, :] = np.nan
    out = check(combine(5, lanes, op), r, np.zeros(5, "float32"))[1]
    np.testing.assert_allclose(out[:3], OPS[op][2](r[:3], axis=1), rtol=1e-6)
    if op == "sum":
        assert np.isnan(out[3:]).all()
    else:
        assert out[3] == OPS[op][2](r[3][~np.isnan(r[3])]) and out[4] == OPS[op][1]


def test_sum_with_the_partial_on_the_left(check):
    """``S = x + S`` is matched too (an add commutes); ``S = max(x, S)`` is not (its selects
    keep a NaN that lands in S, which a tree would not reproduce)."""
    assert combine_loops(combine(3, 16, "sum", x_first=True)) == [True]
    assert combine_loops(combine(3, 16, "max", x_first=True)) == [False]
    r = np.random.default_rng(4).standard_normal((3, 16)).astype("float32")
    check(combine(3, 16, "sum", x_first=True), r, np.zeros(3, "float32"),
          expected=[None, r.sum(axis=1)], rtol=1e-6, atol=1e-6)


def test_matched_loops_become_vector_halves():
    """The 32-lane sum is matched and its LLVM IR combines vector halves (16, 8, 4, 2 lanes),
    where a serial chain would have none."""
    func = combine(8, 32)
    assert combine_loops(func) == [True]
    text = codegen.compile_module(func, "llvm -mcpu=skylake-avx512").llvm_ir()
    assert "shufflevector" in text


@pytest.mark.parametrize("lanes, start", [(12, 0), (128, 0), (2, 0), (32, 4), (60, 0), (197, 0)])
def test_other_constant_loops_are_whole_reductions(check, lanes, start):
    """Not a power of two from 4 to 64, or not from 0: not a combine step but a reduction the
    schedule's rfactor left whole (no vector width divides it), read contiguously, so lowered
    in vectors with a masked last one (a row shorter than a vector stays serial): the same
    sums."""
    func = combine(3, lanes, start=start)
    assert combine_loops(func) == [True] and reductions(func) == [True]
    r = np.random.default_rng(lanes).standard_normal((3, lanes)).astype("float32")
    check(func, r, np.zeros(3, "float32"), expected=[None, r[:, start:].sum(axis=1)], rtol=1e-5, atol=1e-6)


def reductions(func):
    """For each matched serial loop of ``func``: whether it is a whole reduction."""
    found = []
    pre_order_visit(func.body, lambda n: found.append(c.reduction) if isinstance(n, For) and (
        c := match_combine(n)) is not None else None)
    return found


def test_a_strided_constant_reduction_stays_serial(check):
    """S[r] = sum(R[:, r]): the loop walks R's rows, so its lanes would be gathers; it stays a
    serial loop, with numpy's sums."""
    rows, length = 3, 60
    R, S = buf("R", (length, rows)), buf("S", (rows,))
    r, k = Var("r"), Var("k")
    blk = realize("S", [("S", rows, r), ("R", length, k)], lambda vr, vk: store(S, S[vr] + R[vk, vr], vr),
                  init_fn=lambda vr, vk: store(S, FloatImm(0.0), vr))
    func = lower_prim_func(prim_func([R, S], nest([(r, rows, "parallel"), (k, length, "serial")], blk)))
    assert combine_loops(func) == [False]
    x = np.random.default_rng(5).standard_normal((length, rows)).astype("float32")
    check(func, x, np.zeros(rows, "float32"), expected=[None, x.sum(axis=0)], rtol=1e-5, atol=1e-6)


def symbolic_reduction(rows, op="sum"):
    """S[r] = reduce(op, R[r, 0:n]) over a symbolic n, as a kernel left unscheduled over a
    prompt's keys has it: a serial loop of ``S = S op x`` after the init."""
    fn, identity, _ = OPS[op]
    n = Var("n")
    R, S = buf("R", (rows, n)), buf("S", (rows,))
    r, k = Var("r"), Var("k")
    blk = realize("S", [("S", rows, r), ("R", n, k)], lambda vr, vk: store(S, fn(S[vr], R[vr, vk] * 2.0), vr),
                  init_fn=lambda vr, vk: store(S, FloatImm(identity), vr))
    return lower_prim_func(prim_func([R, S], nest([(r, rows, "serial"), (k, n, "serial")], blk)))


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_reduction_over_a_symbolic_extent_runs_in_vectors(build, op):
    """Whole vectors, then a masked last one whose idle lanes are the op's identity, then the
    tree: numpy's result for every length, the empty one included (the start value)."""
    func = symbolic_reduction(3, op)
    assert combine_loops(func) == [False, True]     # the row loop stays, the reduction matches
    assert "llvm.masked.load" in codegen.compile_module(func, "llvm -mcpu=skylake-avx512").llvm_ir()
    lib = build(func)
    for n in (0, 1, 5, 16, 17, 33, 100):
        r = np.random.default_rng(n).standard_normal((3, n)).astype("float32")
        s = np.full(3, np.nan, "float32")
        assert lib.call("main", r, s) == 0
        want = OPS[op][2](r * 2, axis=1) if n else np.full(3, OPS[op][1], "float32")
        np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)


def test_a_symbolic_max_skips_nans_as_the_serial_loop_does(build):
    lib = build(symbolic_reduction(2, "max"))
    r = np.random.default_rng(1).standard_normal((2, 21)).astype("float32")
    r[0, 3] = r[0, 20] = np.nan
    r[1, :] = np.nan
    s = np.zeros(2, "float32")
    assert lib.call("main", r, s) == 0
    assert s[0] == np.nanmax(r[0]) * 2 and s[1] == -np.inf


@pytest.mark.parametrize("target, lanes", [("llvm -mtriple=aarch64-linux-gnu", 4),
                                           ("llvm -mcpu=haswell", 8), ("llvm -mcpu=skylake-avx512", 16)])
def test_symbolic_reduction_partials_follow_the_target(target, lanes):
    """The partials are one natural vector of the target: 4 lanes on NEON, 8 on AVX2, 16 on
    AVX-512 (its masked last load names the width)."""
    text = codegen.compile_module(symbolic_reduction(2, "sum"), target).llvm_ir()
    assert f"llvm.masked.load.v{lanes}f32" in text
