"""bench/target_survey.py runs (the AVX2 survey of bench/RESULTS.md "Session 22" comes from it):
the two targets' totals and a kernel table on the small MLP, and a call naming neither a zoo
model nor an ONNX file refused."""
from __future__ import annotations

import re

import pytest

from bench_scripts import load

pytest.importorskip("onnx")


def _script():
    return load("target_survey")


def test_survey_of_the_mlp_lists_its_kernels_for_both_targets(capsys):
    ts = _script()
    # min-ratio 0: every kernel is listed, so the table is never empty.
    assert ts.main(["mlp", "--calls", "3", "--min-ratio", "0"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"mlp: kernels ([\d.]+) ms for 'llvm', ([\d.]+) ms for 'llvm -mcpu=haswell' "
                  r"\(([\d.]+)x\), one thread", out)
    assert m, out
    assert float(m.group(3)) > 0            # (its totals are a few us: ms rounded to 0.01)
    rows = [line for line in out.splitlines() if line.startswith("| ") and "matmul" in line]
    assert rows, out
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        first, second, ratio = float(cells[2]), float(cells[3]), float(cells[4])
        assert first > 0 and second > 0 and ratio > 0
        if first >= 5:      # the table's times are rounded to 0.1 us
            assert ratio == pytest.approx(second / first, rel=0.03)


def test_a_model_is_required(capsys):
    ts = _script()
    with pytest.raises(SystemExit):
        ts.main([])
    assert "give a model of the zoo or --onnx FILE" in capsys.readouterr().err
