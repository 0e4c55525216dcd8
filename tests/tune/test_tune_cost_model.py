"""The cost model (kiln/tune/cost_model.py): loop-nest features of scheduled candidates, a
LightGBM model fitted to measured times, and the search proposing what it predicts fastest."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from kiln.schedule.decisions import Decisions
from kiln.transform.default_schedule import schedule_kernel
from kiln.tune import extract_tasks
from kiln.tune.cost_model import CostModel, features
from kiln.tune.database import decisions_key
from kiln.tune.search import Space

from tune_helpers import mm_module

pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def task():
    (t,), _ = extract_tasks(mm_module(), "llvm", threads=2, pipeline=False)
    return t


def _sample(task, n, seed):
    rng = random.Random(seed)
    out = {}
    for _ in range(20 * n):
        d = Decisions(sampler=lambda name, options, default: rng.choice(list(options)))
        f = schedule_kernel(task.func, task.ctx, d)
        out.setdefault(decisions_key(d.made), (d.made, f))
        if len(out) == n:
            break
    return list(out.values())


def test_features_describe_the_loop_nest(task):
    made = {}
    for mr in (1, 4):
        d = Decisions(fixed={"mr": mr, "parallel": 0})
        f = features(schedule_kernel(task.func, task.ctx, d), d.made)
        made[mr] = f
        assert f["d:mr"] == mr and f["loops"] > 0 and f["stores"] > 0
        assert f["vector"] >= 3          # the register tile's row is vectorized (>= 8 lanes)
        assert f["parallel"] == 0        # parallel=0: nothing runs in parallel
    assert made[4]["unroll"] > made[1]["unroll"]     # 4 rows unrolled vs none
    d = Decisions(fixed={"mr": 4, "parallel": 1})
    assert features(schedule_kernel(task.func, task.ctx, d), d.made)["parallel"] > 0


def test_the_model_learns_times_and_the_search_follows_it(task):
    # A made-up but deterministic law of the candidates' times: best at mr = 3, serial.
    def seconds(d):
        return 1e-5 * (1 + (d["mr"] - 3) ** 2 + 2 * d.get("parallel", 0))
    train = _sample(task, 14, seed=0)
    model = CostModel(min_samples=8)
    assert not model.fit([features(f, d) for d, f in train[:4]], [1.0] * 4)   # too few
    assert model.fit([features(f, d) for d, f in train], [seconds(d) for d, _ in train])
    test = _sample(task, 30, seed=1)
    pred = model.predict([features(f, d) for d, f in test])
    true = np.log([seconds(d) for d, _ in test])
    assert np.corrcoef(pred, true)[0, 1] > 0.8

    # With the model, exploitation proposes the offspring predicted fastest.
    space = Space(task, seed=3, explore=0.0, model=CostModel(min_samples=8))
    measured = [(d, seconds(d)) for d, _ in train]
    space.mark_seen(d for d, _ in measured)
    assert space.fit(measured)
    picks = space.propose(4, measured)
    plain = Space(task, seed=3, explore=0.0)
    plain.mark_seen(d for d, _ in measured)
    blind = plain.propose(4, measured)
    assert len(picks) == 4 and len(blind) == 4
    assert np.mean([seconds(d) for d in picks]) < np.mean([seconds(d) for d in blind])


def test_memory_features_count_flops_footprints_and_cache_traffic():
    """On the 16x32x16 matmul (loops i, j, k; k innermost), by hand: 2 flops per iteration;
    footprints per level: k: A row 128 B + B column 128 B + C element 4 B = 260 B; j: 128 +
    B 2048 + C row 64 = 2240 B; i: 2048 + 2048 + 1024 = 5120 B. The init store C = 0 touches
    C: 1024 B over the whole nest."""
    import math
    from kiln.tune.access import access_features
    from tune_helpers import mm
    f = access_features(mm)                    # every footprint fits: each byte loaded once
    assert f["flops"] == math.log2(2 * 16 * 16 * 32)
    assert f["l1_traffic"] == pytest.approx(math.log2(5120 + 1024))
    assert f["inner_bytes"] == pytest.approx(math.log2(260))
    assert f["bytes"] == pytest.approx(math.log2((4 + 1) * 4 * 16 * 16 * 32))
    small = access_features(mm, l1_bytes=1024, l2_bytes=4096)
    # L1 of 1 KiB: only the k loop's 260 B fit, reloaded for each (i, j)
    assert small["l1_traffic"] == pytest.approx(math.log2(260 * 16 * 16 + 1024))
    # L2 of 4 KiB: the j loop's 2240 B fit, reloaded for each i
    assert small["l2_traffic"] == pytest.approx(math.log2(2240 * 16 + 1024))
    assert small["intensity_l1"] < small["intensity_l2"] < f["intensity_l1"]


def test_features_include_memory_behaviour_for_the_targets_caches(task):
    d = Decisions(fixed={"mr": 4})
    func = schedule_kernel(task.func, task.ctx, d)
    m = task.ctx.machine
    f = features(func, d.made, m.l1_bytes, m.l2_bytes)
    assert f["flops"] >= math.log2(2 * 16 * 16 * 32) - 1e-9
    assert f["l1_traffic"] > 0 and f["intensity_l1"] == f["flops"] - f["l1_traffic"]
