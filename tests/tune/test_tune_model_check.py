"""The tuner's end-to-end check (``kiln.tune.model_check``): which changes it keeps, the
verdicts it writes, and what a compile with the database then builds.

The timings are scripted here (``ScriptedTimes``) so that each outcome is tested exactly; the
real timing (``LocalExecutor.time_models``) runs in test_tune_e2e.py. The compiles are real."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.schedule.decisions import parse_decisions
from kiln.transform import PassContext
from kiln.tune import Database, extract_tasks
from kiln.tune.database import (best_of, candidate_time, decisions_key, index_best,
                                make_record, verdict_of)
from kiln.tune.model_check import Item, candidate_sets, check_model
from kiln.tune.search import Space
from kiln.tune.tuner import KernelReport, TuneReport

pytest.importorskip("onnx")

THREADS = 1


def two_matmuls():
    """``relu(x @ w1) @ w2`` (8x32 -> 8x16 -> 8x24), weights bound: two matmul kernels."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((32, 16)).astype("float32")
    w2 = rng.standard_normal((16, 24)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 24])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    mod, params = kiln.frontend.from_onnx(model)
    return kiln.transform.bind_params("main", params)(mod), (w1, w2)


class ScriptedTimes:
    """An executor whose ``time_models`` answers, call after call, the given seconds per
    compiled model (the default first, then the tuned variants), after checking it got that
    many libraries."""

    def __init__(self, *answers):
        self.answers = [list(a) for a in answers]
        self.calls = []

    def time_models(self, libs, function, specs, threads, rounds, calls, seed, target_key,
                    timeout_s):
        seconds = self.answers[len(self.calls)]
        self.calls.append(list(libs))
        assert len(libs) == len(seconds)
        return "ok", seconds


def setup_records(tmp_path, gains=(4e-6, 1e-6)):
    """The two kernels' tasks, a database where each has its default (10 us) and one other
    legal candidate faster alone by ``gains``, and the check's items and report."""
    mod, ws = two_matmuls()
    tasks, _ = extract_tasks(mod, "llvm", threads=THREADS)
    assert len(tasks) == 2
    db = Database(tmp_path / "db.jsonl")
    items, kernels = [], []
    for task, gain in zip(tasks, gains):
        space = Space(task, seed=1)
        default = space.default()
        other = next(c for c in space.propose(8, [(default, 1e-5)])
                     if decisions_key(c) != decisions_key(default))
        recs = []
        for decisions, t in ((default, 1e-5), (other, 1e-5 - gain)):
            rec = make_record(task.workload, task.target_key, THREADS, task.name, decisions,
                              "ok", median_s=t, min_s=t, rules=task.rules, ops=task.ops)
            db.append(rec)
            recs.append(rec)
        items.append(Item(task.workload, task.name, task.ops, 1, default, other, recs[0],
                          recs[1], gain))
        kernels.append(KernelReport(task.name, task.ops, 1, task.workload, default_s=1e-5,
                                    best_s=1e-5 - gain, best_decisions=dict(other),
                                    default_decisions=dict(default)))
    report = TuneReport(db.path, "llvm", THREADS, kernels, {})
    return mod, ws, db, items, report


def applied(mod, db):
    """kernel workload -> the decisions a compile with ``db`` schedules it with."""
    tasks, _ = extract_tasks(mod, "llvm", threads=THREADS)
    by_name = {t.name: t.workload for t in tasks}
    out = kiln.get_pipeline("default", PassContext(tuning_db=str(db), cores=THREADS))(mod)
    got = {}
    for name, f in out.functions.items():
        if isinstance(f, kiln.ir.PrimFunc) and name in by_name:
            got[by_name[name]] = parse_decisions(dict(f.attrs)["kiln.decisions"])
    assert len(got) == 2, got
    return got


def test_candidate_sets():
    assert candidate_sets(range(1)) == [1]
    assert candidate_sets(range(2)) == [2, 1]
    assert candidate_sets(range(7)) == [7, 4, 2, 1]


def test_verdicts_decide_what_a_compile_applies_but_not_the_ranking():
    def rec(decisions, t, **extra):
        return make_record("w", "x86", 1, "k", decisions, "ok", median_s=t, min_s=t, rules="r",
                           **extra)
    fast, slow = rec({"mr": 4}, 1.0), rec({"mr": 2}, 2.0)
    pin = rec({"mr": 2}, 2.0, chosen=True)
    assert best_of([fast, slow, pin])["decisions"] == {"mr": 4}      # timings only
    assert candidate_time([slow, pin, pin], {"mr": 2}) is slow      # a verdict is no timing
    assert index_best([fast, slow, pin], "r")[("w", "x86", 1)]["decisions"] == {"mr": 2}
    later = rec({"mr": 4}, 1.0, chosen=True)
    assert verdict_of([fast, pin, later]) is later                  # the newest verdict wins
    assert index_best([fast, slow, pin, later], "r")[("w", "x86", 1)]["decisions"] == {"mr": 4}


def test_only_the_changes_that_make_the_model_faster_are_kept(tmp_path):
    mod, (w1, w2), db, items, report = setup_records(tmp_path)
    before = applied(mod, db.path)       # the time ranking alone: both faster candidates
    assert before == {it.workload: it.best for it in items}
    # default 1.0 ms; every change 1.05 ms (slower); the larger gain alone 0.9 ms, and again
    # 0.92 ms against the default's 1.0
    ex = ScriptedTimes([1e-3, 1.05e-3, 0.9e-3], [1e-3, 0.92e-3])
    check_model(mod, "llvm", THREADS, None, db.path, ex, report, items, _key(mod))
    assert len(ex.calls) == 2 and len(set(ex.calls[0])) == 3     # three different libraries
    assert ex.calls[1] == [ex.calls[0][0], ex.calls[0][2]]       # the kept one re-timed
    assert report.model_default_s == 1e-3 and report.model_tuned_s == 0.9e-3
    assert report.model_all_s == 1.05e-3
    assert "kept the 1 change(s) of 2" in report.model_note
    got = applied(mod, db.path)
    big, small = items                     # ranked by gain: the first is kept
    assert got[big.workload] == big.best and got[small.workload] == small.default
    assert report.kernels[1].best_decisions == small.default and "not kept" in report.kernels[1].note
    verdicts = [r for r in db.records() if r.get("chosen")]
    assert len(verdicts) == 2 and all(r["status"] == "ok" for r in verdicts)
    assert "end to end (alternating" in str(report) and "every change 1.050 ms" in str(report)
    # the model the compile builds is still right
    ex_ = kiln.compile(kiln.get_pipeline("default", PassContext(tuning_db=str(db.path),
                                                                cores=THREADS))(mod), "llvm")
    x = np.random.default_rng(1).standard_normal((8, 32)).astype("float32")
    y = kiln.VirtualMachine(ex_, kiln.cpu())["main"](kiln.nd.array(x)).numpy()
    np.testing.assert_allclose(y, np.maximum(x @ w1, 0) @ w2, rtol=1e-4, atol=1e-4)


def test_no_change_is_kept_when_none_beats_the_default(tmp_path):
    mod, _, db, items, report = setup_records(tmp_path)
    # within MIN_GAIN (2%) of the default is not faster
    ex = ScriptedTimes([1e-3, 1.01e-3, 0.99e-3])
    check_model(mod, "llvm", THREADS, None, db.path, ex, report, items, _key(mod))
    assert len(ex.calls) == 1
    assert report.model_tuned_s == report.model_default_s == 1e-3
    assert "no set of changes beat the default" in report.model_note
    assert applied(mod, db.path) == {it.workload: it.default for it in items}
    # a later run whose check keeps every change overrides these verdicts
    check_model(mod, "llvm", THREADS, None, db.path,
                ScriptedTimes([1e-3, 0.8e-3, 0.9e-3], [1e-3, 0.85e-3]), report, items, _key(mod))
    assert applied(mod, db.path) == {it.workload: it.best for it in items}


def test_a_lucky_first_timing_is_not_kept(tmp_path):
    mod, _, db, items, report = setup_records(tmp_path)
    # every change looked 10% faster once, but timed again it is not faster by half MIN_GAIN
    ex = ScriptedTimes([1e-3, 0.9e-3, 0.95e-3], [1e-3, 0.995e-3])
    check_model(mod, "llvm", THREADS, None, db.path, ex, report, items, _key(mod))
    assert len(ex.calls) == 2 and ex.calls[1] == [ex.calls[0][0], ex.calls[0][1]]
    assert "no set of changes beat the default" in report.model_note
    assert "again: 0.995 ms against 1.000 ms" in report.model_note
    assert applied(mod, db.path) == {it.workload: it.default for it in items}


def _key(mod) -> str:
    tasks, _ = extract_tasks(mod, "llvm", threads=THREADS)
    return tasks[0].target_key
