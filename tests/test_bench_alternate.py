"""bench/onnx_models.py's ``alternate``, the timing every ratio in bench/RESULTS.md comes from:
after each block's sleep, warm-up calls run for ``warm_s`` and are not timed."""
from __future__ import annotations

import time

import pytest

from bench_scripts import load

pytest.importorskip("onnx")


def _alternate():
    return load("onnx_models").alternate


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("warm_s, slow", [(0.0, True), (0.1, False)])
def test_calls_slow_after_the_settle_sleep_are_left_out_with_warm_up_time(monkeypatch, warm_s, slow):
    """A function slow for its first 8 calls after each sleep (as the project's VMs are after
    an idle spell): with one warm-up call the median of 5 timed calls is slow; with warm-up
    calls for 0.1 s it is the steady speed."""
    alternate = _alternate()
    cold = [0]
    monkeypatch.setattr(time, "sleep", lambda s: cold.__setitem__(0, 8))

    def fn():
        _busy(0.004 if cold[0] > 0 else 0.0005)
        cold[0] -= 1

    out = alternate({"f": fn}, rounds=3, per_round=5, settle_s=0.25, warm_s=warm_s)
    assert (out["f"] > 0.003) == slow, out


def test_without_warm_up_time_one_call_warms_up():
    alternate = _alternate()
    count = [0]

    def fn():
        count[0] += 1

    alternate({"f": fn, "g": fn}, rounds=4, per_round=3, settle_s=0.0, warm_s=0.0)
    assert count[0] == 2 * 4 * (1 + 3)
