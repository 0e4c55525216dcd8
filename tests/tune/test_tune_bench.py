"""bench/tune.py (default vs tuned at fixed budgets) on a small matmul with short budgets: the
rows, the budget snapshots of the database and the tuning curve's PNG."""
from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

pytest.importorskip("onnxruntime")
pytest.importorskip("matplotlib")
pytest.importorskip("threadpoolctl")


def _load():
    # by path, under its own name: "tune" alone could meet another module of that name
    import importlib.util
    spec = importlib.util.spec_from_file_location("kiln_bench_tune",
                                                  os.path.join(ROOT, "bench", "tune.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tune_bench = _load()


def test_budgets_and_snapshots(tmp_path):
    assert tune_bench.parse_budgets("2m,5m,10m") == [120.0, 300.0, 600.0]
    assert tune_bench.parse_budgets("20s, 1m") == [20.0, 60.0]
    db = tmp_path / "db.jsonl"
    with open(db, "w") as f:
        for t in (100.0, 105.0, 130.0):
            f.write(json.dumps({"workload": "w", "target": "t", "threads": 1, "decisions": {},
                                "status": "ok", "median_s": 1.0, "min_s": 1.0, "time": t}) + "\n")
    assert tune_bench.snapshot(str(db), str(tmp_path / "s.jsonl"), 110.0) == 2
    assert [json.loads(x)["time"] for x in open(tmp_path / "s.jsonl")] == [100.0, 105.0]


@pytest.mark.slow
def test_a_small_matmul_tuned_at_two_budgets(tmp_path, monkeypatch):
    monkeypatch.setitem(tune_bench.MATMULS, "matmul_8x64x32", (8, 64, 32))
    rows = tune_bench.bench_one("matmul_8x64x32", 1, [3.0, 6.0], str(tmp_path),
                                str(tmp_path / "plots"), repeat=3, log=lambda *a: None)
    assert [r["budget_s"] for r in rows] == [3.0, 6.0]
    for r in rows:
        assert r["workload"] == "matmul_8x64x32" and r["threads"] == 1
        assert r["default_ms"] > 0 and r["tuned_ms"] > 0 and r["ort_ms"] > 0
        assert r["numpy_ms"] > 0
        assert r["speedup"] == pytest.approx(r["default_ms"] / r["tuned_ms"])
        assert r["trials"] >= 0     # on a busy machine the defaults may take the 3 s
    assert rows[0]["trials"] <= rows[1]["trials"]
    png = tmp_path / "plots" / "tune_matmul_8x64x32_t1.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
