"""bench/matmul_decisions.py runs (the decision figures of bench/RESULTS.md "Session 24" come
from it): two fixed variants of a product, each checked against numpy and timed with
its decisions printed; a run-time B; a variant that is not a JSON object refused."""
from __future__ import annotations

import re

import pytest

from bench_scripts import load


def test_fixed_variants_are_timed_with_their_decisions(capsys):
    md = load("matmul_decisions")
    assert md.main(["30", "256", "64", '{"ku": 2}', '{"ku": 1}', "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"threads 1: +([\d.]+) GFLOP/s  (.*)", out)
    assert ["ku=2" in rows[0][1].split(), "ku=1" in rows[1][1].split()] == [True, True], out
    assert rows[2][1] == "numpy" and all(float(r[0]) > 0 for r in rows), out


def test_a_run_time_b_packs_and_matches_numpy(capsys):
    md = load("matmul_decisions")
    fns = md.variants(17, 64, 48, [{}], b_input=True)
    assert len(fns) == 2 and "numpy" in fns
    key = next(k for k in fns if k != "numpy")
    assert "matmul:" in key


def test_a_variant_that_is_not_a_json_object_is_refused(capsys):
    md = load("matmul_decisions")
    with pytest.raises(SystemExit):
        md.main(["8", "8", "8", "[1, 2]"])
    assert "must be a JSON object" in capsys.readouterr().err
