"""The records database (kiln/tune/database.py) and applying it (kiln/tune/apply.py,
``PassContext(tuning_db=...)``): append / best / merge round trip, appends from two processes
at once, a failed record is never the best, a stale record falls back to the default with one
warning."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

import kiln
from kiln.schedule.decisions import parse_decisions
from kiln.transform import PassContext
from kiln.tune import Database, extract_tasks, merge
from kiln.tune.apply import StaleRecordWarning
from kiln.tune.database import make_record, read_records

from tune_helpers import kernel_records, matmul_graph_module

KEY = ("w0", "x86_64 v256x16 fma2x4", 2)


def rec(decisions, status="ok", t=None, key=KEY, **kw):
    times = {} if status != "ok" else {"median_s": t, "min_s": t}
    return make_record(*key, "matmul", decisions, status, "why" if status != "ok" else "",
                       **times, **kw)


def test_append_best_merge_round_trip(tmp_path):
    a, b, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "out.jsonl"
    da, db = Database(a), Database(b)
    da.append(rec({"mr": 4}, t=2e-3))
    da.append(rec({"mr": 6}, "wrong_result"))          # failed: never the best
    da.append(rec({"mr": 2}, t=3e-3, key=("w0", "x86_64 v256x16 fma2x4", 1)))
    db.append(rec({"mr": 5}, t=1e-3))
    db.append(rec({"mr": 1}, "timeout"))
    assert da.best(*KEY)["decisions"] == {"mr": 4}
    assert da.best("w0", KEY[1], 1)["decisions"] == {"mr": 2}       # threads are in the key
    assert da.best("w0", "aarch64 v128x32 fma2x4", 2) is None       # so is the target
    lines = open(a).read().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["kiln_version"] for x in lines)
    assert merge(a, b, out) == 5
    assert merge(out, a, out) == 5                      # no duplicates; out may be an input
    m = Database(out)
    assert len(m) == 5 and m.best(*KEY)["decisions"] == {"mr": 5}
    assert set(m.measured(*KEY)) == {'{"mr":4}', '{"mr":6}', '{"mr":5}', '{"mr":1}'}


def test_only_failures_means_no_best_and_bad_lines_are_skipped(tmp_path):
    p = tmp_path / "db.jsonl"
    d = Database(p)
    d.append(rec({"mr": 6}, "run_error"))
    with open(p, "a") as f:
        f.write('{"workload": "w0", "truncated\n')      # e.g. a copy cut short
        f.write("\n")
    d.append(rec({"mr": 3}, "build_error"))
    assert d.best(*KEY) is None
    assert len(d.records()) == 2 and d.skipped == 1
    with pytest.raises(ValueError):
        d.append({"workload": "w0"})
    with pytest.raises(ValueError):
        rec({"mr": 1}, "ok")                            # an ok record needs times


def test_two_processes_append_at_once(tmp_path):
    p = tmp_path / "db.jsonl"
    code = ("import sys\nfrom kiln.tune.database import Database, make_record\n"
            "d = Database(sys.argv[1])\n"
            "for i in range(150):\n"
            "    d.append(make_record('w', 't', 1, 'k', {'i': i, 'who': sys.argv[2]}, 'ok',\n"
            "                         'x' * 5000, median_s=1.0, min_s=1.0))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p), who]) for who in "ab"]
    assert [q.wait(timeout=120) for q in procs] == [0, 0]
    records, skipped = read_records(str(p))
    assert skipped == 0 and len(records) == 300
    for who in "ab":
        assert [r["decisions"]["i"] for r in records if r["decisions"]["who"] == who] \
            == list(range(150))


@pytest.fixture(scope="module")
def matmul_task():
    mod, _ = matmul_graph_module(m=8, k=32, n=16)
    (t,), _ = extract_tasks(mod, "llvm")           # the threads compiles use: every core
    return mod, t


def _kernel(mod, db):
    out = kiln.get_pipeline("default", PassContext(tuning_db=str(db)))(mod)
    (name,) = [n for n, f in out.functions.items() if isinstance(f, kiln.ir.PrimFunc)]
    return dict(out[name].attrs)


def test_the_pipeline_applies_the_best_record(matmul_task, tmp_path):
    mod, t = matmul_task
    default = _kernel(mod, tmp_path / "none.jsonl")
    assert "tuned" not in default["kiln.schedule"]
    dflt = parse_decisions(default["kiln.decisions"])
    other = dict(dflt, mr=1 if dflt.get("mr") != 1 else 2)
    from kiln.tune.measure import schedule_candidate
    from kiln.schedule.decisions import Decisions
    from kiln.transform.default_schedule import schedule_kernel
    d = Decisions(fixed={"mr": other["mr"]})
    schedule_kernel(t.func, t.ctx, d)
    other = d.made
    db = Database(tmp_path / "db.jsonl")
    db.append(rec(dflt, t=2e-6, key=t.key))
    db.append(rec(other, t=1e-6, key=t.key))
    db.append(rec(dict(other, mr=7), "wrong_result", key=t.key))
    got = _kernel(mod, db.path)
    assert parse_decisions(got["kiln.decisions"]) == other
    assert got["kiln.schedule"].endswith("; tuned")
    # kiln.compile(..., tuning_db=) does the same, and the result is right
    import numpy as np
    ex = kiln.compile(mod, "llvm", pipeline="default", tuning_db=db.path)
    x = np.random.default_rng(1).standard_normal((8, 32)).astype("float32")
    y = kiln.VirtualMachine(ex, kiln.cpu())["main"](x).numpy()
    np.testing.assert_allclose(y, x @ matmul_graph_module(8, 32, 16)[1], rtol=1e-4, atol=1e-4)
    schedule_candidate(t.func, t.ctx, other)


def test_a_stale_record_warns_once_and_the_default_is_used(matmul_task, tmp_path):
    mod, t = matmul_task
    default = _kernel(mod, tmp_path / "none.jsonl")
    db = Database(tmp_path / "db.jsonl")
    dflt = parse_decisions(default["kiln.decisions"])
    db.append(rec(dict(dflt, mr=999), t=1e-9, key=t.key))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _kernel(mod, db.path)
        second = _kernel(mod, db.path)
    stale = [w for w in caught if issubclass(w.category, StaleRecordWarning)]
    assert len(stale) == 1 and "no longer applies" in str(stale[0].message)
    assert first == default and second == default
    # a record naming a decision the rule no longer makes is stale too
    db2 = Database(tmp_path / "db2.jsonl")
    db2.append(rec(dict(dflt, gone=3), t=1e-9, key=t.key))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _kernel(mod, db2.path) == default
    assert any("gone" in str(w.message) for w in caught)


def test_tuning_db_must_stay_hashable(tmp_path):
    ctx = PassContext(tuning_db=tmp_path / "db.jsonl")
    assert isinstance(ctx.tuning_db, str) and hash(ctx) == hash(ctx.replace())
    assert os.path.basename(ctx.tuning_db) == "db.jsonl"


def test_a_candidate_measured_again_is_ranked_by_the_median_of_its_records(tmp_path):
    d = Database(tmp_path / "db.jsonl")
    d.append(rec({"mr": 4}, t=1.0e-3))
    d.append(rec({"mr": 6}, t=0.5e-3))       # one lucky timing ...
    d.append(rec({"mr": 6}, t=2.0e-3))       # ... measured again: slower
    d.append(rec({"mr": 6}, t=2.1e-3))
    d.append(rec({"mr": 4}, t=1.2e-3))
    best = d.best(*KEY)
    assert best["decisions"] == {"mr": 4} and best["median_s"] == 1.0e-3
    from kiln.tune.database import ranking
    assert [(r["decisions"]["mr"], r["median_s"]) for r in ranking(d.records())] \
        == [(4, 1.0e-3), (6, 2.0e-3)]


def test_records_of_other_schedule_rules_are_skipped_with_one_warning(matmul_task, tmp_path):
    from kiln.tune.workload import rules_version
    mod, t = matmul_task
    default = _kernel(mod, tmp_path / "none.jsonl")
    dflt = parse_decisions(default["kiln.decisions"])
    from kiln.schedule.decisions import Decisions
    from kiln.transform.default_schedule import schedule_kernel
    d = Decisions(fixed={"mr": 1 if dflt.get("mr") != 1 else 2})
    schedule_kernel(t.func, t.ctx, d)
    other = d.made                 # a candidate that is valid today
    db = Database(tmp_path / "db.jsonl")
    db.append(rec(other, t=1e-9, key=t.key, rules="0123456789ab"))      # older rules
    old = rec(other, t=1e-9, key=t.key)
    del old["rules"]                                  # a record from before rule versions
    with open(db.path, "a") as f:
        f.write(json.dumps(old) + "\n")
    assert db.best(*t.key) is None and len(db.query(*t.key, rules="*")) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _kernel(mod, db.path)
        second = _kernel(mod, db.path)
    stale = [w for w in caught if issubclass(w.category, StaleRecordWarning)]
    assert len(stale) == 1, [str(w.message) for w in caught]
    msg = str(stale[0].message)
    assert "other schedule rules" in msg and "0123456789ab" in msg and rules_version() in msg
    assert first == default and second == default
    # a record of today's rules for the same key applies, with no warning
    db.append(rec(other, t=2e-9, key=t.key))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _kernel(mod, db.path)
    assert not [w for w in caught if issubclass(w.category, StaleRecordWarning)]
    assert got["kiln.schedule"].endswith("; tuned")
    assert parse_decisions(got["kiln.decisions"]) == other


def test_the_tuner_measures_again_what_other_rules_measured(tmp_path):
    from kiln.tune.workload import rules_version
    mod, _ = matmul_graph_module(m=8, k=32, n=16)
    (t,), _ = extract_tasks(mod, "llvm", threads=1)
    assert t.rules == rules_version()
    db = Database(tmp_path / "db.jsonl")
    from kiln.schedule.decisions import Decisions
    from kiln.transform.default_schedule import schedule_kernel
    d = Decisions()
    schedule_kernel(t.func, t.ctx, d)
    db.append(rec(d.made, t=1e-9, key=t.key, rules="0123456789ab"))   # the default, old rules
    report = kiln.tune(mod, db=db.path, trials=2, num_threads=1, progress=False,
                       confirm=False, check_model=False)
    k = report.kernels[0]
    assert k.stale == 1 and k.new == 2 and k.trials == 2      # the default measured again
    assert "1 records of other schedule rules skipped" in str(report)
    new = kernel_records(db.records())[1:]
    assert len(new) == 2 and all(r["rules"] == rules_version() for r in new)
    assert k.default_s > 1e-8                   # the old record's time was not used


def test_the_rule_version_follows_the_rule_sources(tmp_path):
    from kiln.tune.workload import rules_hash
    (tmp_path / "transform").mkdir()
    (tmp_path / "schedule").mkdir()
    rule = tmp_path / "transform" / "schedule_tile.py"
    rule.write_text("def apply(): return 6\n")
    (tmp_path / "transform" / "fuse_ops.py").write_text("x = 1\n")    # not a rule
    (tmp_path / "schedule" / "loops.py").write_text("def split(): pass\n")
    v1 = rules_hash(str(tmp_path))
    assert len(v1) == 12
    (tmp_path / "transform" / "fuse_ops.py").write_text("x = 2\n")
    assert rules_hash(str(tmp_path)) == v1
    rule.write_text("def apply(): return 4\n")           # the rule changed
    v2 = rules_hash(str(tmp_path))
    assert v2 != v1
    (tmp_path / "schedule" / "loops.py").write_text("def split(): return 0\n")
    assert rules_hash(str(tmp_path)) != v2              # so did a primitive
    rule.write_text("RULE_VERSION = 3\ndef apply(): return 4\n")
    v3 = rules_hash(str(tmp_path))
    rule.write_text("RULE_VERSION = 3\ndef apply():\n    return 4  # same meaning\n")
    assert rules_hash(str(tmp_path)) == v3              # an edit the rule says keeps meaning
    rule.write_text("RULE_VERSION = 4\ndef apply(): return 4\n")
    assert rules_hash(str(tmp_path)) != v3
    assert rules_hash(str(tmp_path / "nothing")) == ""
