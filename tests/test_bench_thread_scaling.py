"""bench/thread_scaling.py runs (the figures of bench/RESULTS.md "Session 7" and "Session 12" come
from it): its profile table, its A/B lines and its 1 vs 2 thread line on the small MLP, and an
unknown model refused by name."""
from __future__ import annotations

import re

import pytest

from bench_scripts import load

pytest.importorskip("onnx")


def _script():
    return load("thread_scaling")


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


def test_scaling_prints_both_thread_counts_and_their_ratio(capsys):
    ts = _script()
    assert ts.main(["scaling", "mlp", "2"]) == 0
    m = re.fullmatch(r"mlp: ([\d.]+) ms at 1 thread, ([\d.]+) ms at 2 \(([\d.]+)\)\n",
                     capsys.readouterr().out)
    assert m, "unexpected output"
    one, two, ratio = map(float, m.groups())
    # (the times are printed to 0.1 us: the small MLP takes about 10 us)
    assert one > 0 and two > 0 and ratio == pytest.approx(two / one, rel=0.02)


def test_chain_computes_the_chain_and_prints_both_thread_counts(capsys):
    import numpy as np
    import kiln
    ts = _script()
    mod = ts.chain_module(4, 8, 3, distinct=True)
    x = np.random.default_rng(0).standard_normal((1, 4, 8)).astype("float32")
    want = x
    for b in mod["main"].bindings():
        want = want @ b.value.args[1].data
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    np.testing.assert_allclose(vm["main"](kiln.nd.array(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    out = ts.chain(4, 8, 3, rounds=1)
    assert set(out) == {"same", "distinct"} and all(a > 0 and b > 0 for a, b in out.values())
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_unknown_model_is_refused():
    with pytest.raises(SystemExit):
        _script().main(["profile", "nope"])
