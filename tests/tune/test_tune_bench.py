"""bench/tune.py (default vs tuned at fixed budgets) on a small matmul with short budgets: the
rows (one per budget, a run resumed up to each) and the tuning curves' PNG."""
from __future__ import annotations

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


def test_budgets():
    assert tune_bench.parse_budgets("2m,5m,10m") == [120.0, 300.0, 600.0]
    assert tune_bench.parse_budgets("20s, 1m") == [20.0, 60.0]


@pytest.mark.slow
def test_a_small_matmul_tuned_at_two_budgets(tmp_path, monkeypatch):
    monkeypatch.setitem(tune_bench.MATMULS, "matmul_8x64x32", (8, 64, 32))
    # settle_s=0: the timing pauses (35 of 0.25 s) would leave a core idle in the suite; the
    # figures here are checked for shape, not accuracy
    rows = tune_bench.bench_one("matmul_8x64x32", 1, [1.5, 3.0], str(tmp_path),
                                str(tmp_path / "plots"), repeat=3, log=lambda *a: None, settle_s=0)
    assert [r["budget_s"] for r in rows] == [1.5, 3.0]
    for r in rows:
        assert r["workload"] == "matmul_8x64x32" and r["threads"] == 1
        assert r["default_ms"] > 0 and r["tuned_ms"] > 0 and r["ort_ms"] > 0
        assert r["numpy_ms"] > 0
        assert r["speedup"] == pytest.approx(r["default_ms"] / r["tuned_ms"])
        assert r["trials"] >= 0     # on a busy machine the defaults may take the 1.5 s
    assert rows[0]["trials"] <= rows[1]["trials"]
    png = tmp_path / "plots" / "tune_matmul_8x64x32_t1.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
