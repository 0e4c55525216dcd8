"""Schedule rules state their choices as named decisions (``schedule/decisions.py``): the
default pipeline records them in ``kiln.decisions``, a record replays them to the same
program, a changed value gives another program that computes the same thing, a value that no
longer applies falls back to the default, and a sampler only ever sees legal options."""
from __future__ import annotations

import random

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import assert_structural_equal
from kiln.ir.graph import Constant
from kiln.schedule.decisions import Decisions, parse_decisions
from kiln.transform.default_schedule import schedule_kernel

from transform_helpers import AVX2, AVX2_CTX, attr, graph_module, kernels, reference, typed


def _unscheduled(kind="linear", seed=0):
    rng = np.random.default_rng(seed)
    if kind == "linear":
        w = Constant(rng.standard_normal((64, 48)).astype("float32"))
        mod = graph_module([typed("x", (20, 48))], lambda emit, x: ops.call("linear", x, w))
    else:
        w = Constant(rng.standard_normal((32, 16, 3, 3)).astype("float32"))
        mod = graph_module([typed("x", (1, 16, 14, 14))],
                           lambda emit, x: ops.call("conv2d", x, w, padding=(1, 1)))
    mod = kiln.get_pipeline("default", AVX2_CTX.replace(disabled_passes=("default_schedule",)))(mod)
    (name,) = kernels(mod)
    return mod, name


def _run(mod, name, func, x):
    funcs = dict(mod.functions)
    funcs[name] = func
    ex = kiln.compile(kiln.IRModule(funcs, mod.attrs), target=AVX2)
    return np.asarray(kiln.VirtualMachine(ex, kiln.cpu())["main"](x))


def test_decisions_api():
    d = Decisions(fixed={"mr": 4, "gone": 3})
    assert d.choose("mr", [1, 2, 4, 6], default=6) == 4
    assert d.choose("gone", [1, 2], default=2) == 2 and d.stale == ["gone"]
    assert d.choose("flag", [False, True], default=True) is True
    assert parse_decisions(d.text()) == {"mr": 4, "gone": 2, "flag": True}
    with pytest.raises(ValueError, match="made twice"):
        d.choose("mr", [1], default=1)
    with pytest.raises(ValueError, match="not among the options"):
        Decisions().choose("x", [1, 2], default=3)


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_default_decisions_are_recorded_and_replay_to_the_same_program(kind):
    mod, name = _unscheduled(kind)
    first = schedule_kernel(mod[name], AVX2_CTX)
    text = attr(first, "kiln.decisions")
    assert text and "parallel=" in text, text
    replayed = schedule_kernel(mod[name], AVX2_CTX, Decisions(fixed=parse_decisions(text)))
    assert_structural_equal(replayed, first)


@pytest.mark.parametrize("kind,changes", [
    ("linear", {"mr": 3}), ("linear", {"mr": 1, "parallel": 0}),
    ("conv", {"xt": 3}), ("conv", {"ci": 16, "rows_outer": True}),
])
def test_other_decisions_compute_the_same_result(kind, changes):
    mod, name = _unscheduled(kind)
    default = schedule_kernel(mod[name], AVX2_CTX)
    fixed = dict(parse_decisions(attr(default, "kiln.decisions")), **changes)
    other = schedule_kernel(mod[name], AVX2_CTX, Decisions(fixed=fixed))
    got = parse_decisions(attr(other, "kiln.decisions"))
    assert {k: got[k] for k in changes} == changes
    x = np.random.default_rng(4).standard_normal(mod["main"].params[0].ty.static_shape())
    x = x.astype("float32")
    want = reference(mod, [x])
    np.testing.assert_allclose(_run(mod, name, other, x), want, rtol=1e-4, atol=1e-4)


def test_a_value_that_no_longer_applies_falls_back_to_the_default():
    mod, name = _unscheduled("linear")
    default = schedule_kernel(mod[name], AVX2_CTX)
    d = Decisions(fixed={"mr": 999})
    again = schedule_kernel(mod[name], AVX2_CTX, d)
    assert d.stale == ["mr"]
    assert_structural_equal(again, default)


@pytest.mark.parametrize("seed", range(4))
def test_sampled_decisions_are_legal_and_correct(seed):
    rng = random.Random(seed)
    seen = []

    def sample(name, options, default):
        seen.append((name, options))
        return rng.choice(options)
    mod, name = _unscheduled("conv" if seed % 2 else "linear", seed)
    d = Decisions(sampler=sample)
    func = schedule_kernel(mod[name], AVX2_CTX, d)
    assert seen and all(d.made[n] in opts for n, opts in seen)
    x = np.random.default_rng(seed).standard_normal(mod["main"].params[0].ty.static_shape())
    x = x.astype("float32")
    np.testing.assert_allclose(_run(mod, name, func, x), reference(mod, [x]), rtol=1e-4, atol=1e-4)
