"""SEED_FLOWS.md section B, as written: a graph of tensor programs (one over a symbolic size,
T.handle parameters) and a library function (torch, through DLPack), `cls = MyModule`,
`out_sinfo=`, kiln.transform.BindParams."""
from __future__ import annotations

import numpy as np
import pytest

import kiln


def _reference(ns):
    p = ns["params"]
    x = ns["data"].numpy()
    return np.maximum(x @ p["w0"].T + p["b0"], 0) @ p["w1"].T + p["b1"]


def test_runs_and_prints_the_same_numbers_twice(seed_blocks, run_block):
    pytest.importorskip("torch", reason="section B's library function is torch.mm (torch not installed)")
    ns, out = run_block(seed_blocks[1], "section_b")
    expected = _reference(ns)
    # print(out.numpy()), then the bound module's output: "the same numbers"
    first, second = out.strip().split("\n[[")
    assert "[[" + second == first
    printed = np.array(first.replace("[", " ").replace("]", " ").split(), dtype=np.float64)
    np.testing.assert_allclose(printed, expected.ravel(), rtol=1e-4)
    got = ns["vm"]["main"](ns["data"]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    bound_params = [p.name for p in ns["MyModuleWithParams"]["main"].params]
    assert bound_params == ["x"]


def test_module_prints_kilns_canonical_form_and_round_trips(seed_blocks, run_block):
    pytest.importorskip("torch", reason="section B's library function is torch.mm (torch not installed)")
    ns, _ = run_block(seed_blocks[1], "section_b")
    mod = ns["MyModule"]
    text = mod.script()
    # cls.f and out_sinfo= are read; Kiln prints its own spelling
    assert "R.call_tir(Module.linear0, (x, w0, b0), R.Tensor((1, 128), \"float32\"))" in text
    assert 'R.call_dps_packed("env.linear", (lv1, w1, b1), R.Tensor((1, 10), "float32"))' in text
    assert "cls" not in text and "out_sinfo" not in text
    assert 'def relu0(X: T.Buffer((1, n), "float32"), Y: T.Buffer((1, n), "float32")):' in text
    kiln.script.assert_roundtrip(mod)
