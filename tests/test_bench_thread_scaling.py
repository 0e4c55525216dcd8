"""bench/thread_scaling.py runs (the figures of bench/RESULTS.md "Session 7" come from it): its
profile table and its A/B lines on the small MLP, and an unknown model refused by name."""
from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

pytest.importorskip("onnx")

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "thread_scaling.py"


def _script():
    spec = importlib.util.spec_from_file_location("thread_scaling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_and_threshold_on_the_mlp(capsys):
    ts = _script()
    assert ts.main(["profile", "mlp"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"mlp: profiled call [\d.]+ ms at 1 thread, [\d.]+ ms at 2", out)
    rows = [line for line in out.splitlines() if line.startswith("| ") and "| kernel |" in line]
    assert rows, out
    assert ts.main(["threshold", "mlp", "16384,65536"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [re.search(r"parallel_min_elements=(\d+)", x).group(1) for x in lines] == ["16384", "65536"]
    assert lines[0].endswith("(1.000)")


def test_unknown_model_is_refused():
    with pytest.raises(SystemExit):
        _script().main(["profile", "nope"])
