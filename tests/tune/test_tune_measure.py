"""Measurement you can trust (kiln/tune/measure.py, workers.py): candidates are built in
builder processes and run through the C runtime in a runner process; a candidate that crashes
its process, computes a wrong result or hangs is recorded as failed with the reason, and the
next candidate is measured normally. The faulty candidates are real generated kernels
(tune_helpers.py), not patched results."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.schedule.decisions import Decisions
from kiln.transform.default_schedule import schedule_kernel
from kiln.tune import Database, LocalExecutor, MeasureInput, MeasureOptions, extract_tasks
from kiln.tune.measure import compare, make_args
from kiln.tune.workers import Worker

import tune_helpers
from tune_helpers import mm_module

FAST = MeasureOptions(warmup=1, warmup_s=0.0, repeats=3, min_repeat_s=0.0005, run_timeout_s=20)


@pytest.fixture(scope="module")
def task():
    (t,), skipped = extract_tasks(mm_module(), "llvm", threads=1, pipeline=False)
    assert not skipped
    return t


def _cand(task, **fixed):
    """The task's decisions with ``fixed`` ones (the rest as the rule then decides)."""
    d = Decisions(fixed=fixed)
    schedule_kernel(task.func, task.ctx, d)
    assert not d.stale, d.stale
    return d.made


def _default(task):
    return _cand(task)


def test_the_default_candidate_runs_and_matches_numpy(task):
    with LocalExecutor(FAST, build_workers=1) as ex:
        (res,) = ex.measure([MeasureInput(task, _default(task))])
    assert res.status == "ok", res.message
    assert 0 < res.min_s <= res.median_s
    a, b, c = make_args(task.args, FAST.seed)
    assert not c.any()                      # outputs start zeroed
    np.testing.assert_allclose(res.outputs[0], a @ b, rtol=1e-5, atol=1e-5)


def test_crash_wrong_result_and_hang_are_recorded_and_the_next_candidate_runs(task):
    with LocalExecutor(FAST, build_workers=2, builder=tune_helpers.faults_by_mr_builder) as ex:
        (ref,) = ex.measure([MeasureInput(task, _cand(task, mr=4))])
        assert ref.ok, ref.message
        cands = [_cand(task, mr=m) for m in (1, 4, 2, 4, 3, 4)]
        seen = []
        results = ex.measure([MeasureInput(task, c, ref.outputs) for c in cands],
                             on_result=lambda i, r: seen.append(i), run_timeout_s=3)
    assert seen == list(range(len(cands)))       # each reported as soon as known
    statuses = [r.status for r in results]
    assert statuses == ["run_error", "ok", "wrong_result", "ok", "timeout", "ok"], \
        [(r.status, r.message[:200]) for r in results]
    assert "SIGSEGV" in results[0].message and "runner process died" in results[0].message
    assert "reference" in results[2].message
    assert "3.0 s" in results[4].message
    for r in results[1::2]:
        assert r.median_s > 0 and r.message == ""


def test_a_builder_process_that_dies_is_a_build_error(task):
    with LocalExecutor(FAST, build_workers=1, builder=tune_helpers.builder_that_segfaults) as ex:
        (res,) = ex.measure([MeasureInput(task, _default(task))])
    assert res.status == "build_error"
    assert "builder process died" in res.message and "SIGSEGV" in res.message


def test_decisions_that_do_not_replay_are_a_build_error(task):
    with LocalExecutor(FAST, build_workers=1) as ex:
        (res,) = ex.measure([MeasureInput(task, dict(_cand(task, mr=4), parallel=7))])
    assert res.status == "build_error" and "ReplayError" in res.message


def test_the_tuner_goes_on_when_every_candidate_fails(task, tmp_path):
    db = tmp_path / "faults.jsonl"
    ex = LocalExecutor(FAST, build_workers=2, builder=tune_helpers.every_candidate_faulty_builder)
    with ex:
        report = kiln.tune(mod_of(task), db=db, trials=5, num_threads=1, executor=ex,
                           pipeline=False, progress=False, confirm=False)
    records = Database(db).records()
    assert len(records) == 5
    base = _default(task)
    assert records[0]["decisions"] == base and records[0]["status"] == "ok"
    want = {"crash": "run_error", "wrong": "wrong_result"}
    for r in records[1:]:
        assert r["status"] == want[tune_helpers.fault_of(r["decisions"])], r
        assert r["median_s"] is None and r["message"]
    (k,) = report.kernels
    assert (k.trials, k.new, k.failed) == (5, 5, 4)
    assert k.best_decisions == base                 # never a failed record
    assert Database(db).best(*task.key)["decisions"] == base


def mod_of(task):
    return kiln.IRModule({task.name: task.func})


def test_compare_tolerates_summation_order_not_wrong_values():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((64, 64)).astype("float32")
    assert compare([ref + 1e-6], [ref], 1e-3) is None
    assert "element" in compare([ref + 0.5], [ref], 1e-3)
    bad = ref.copy()
    bad[3, 4] = np.nan
    assert "element 196" in compare([bad], [ref], 1e-3)
    assert compare([bad], [bad], 1e-3) is None


def test_worker_reports_exceptions_death_and_timeouts():
    w = Worker()
    try:
        kind, msg = w.call(int, ("not a number",), 30)
        assert kind == "error" and "ValueError" in msg
        assert w.call(pow, (2, 10), 30) == ("ok", 1024)
        import time
        kind, msg = w.call(time.sleep, (30,), 0.5)
        assert kind == "timeout" and not w.alive
        assert w.call(pow, (3, 2), 30) == ("ok", 9)      # started again
    finally:
        w.close()
