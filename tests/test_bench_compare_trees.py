"""bench/compare_trees.py (the "against the commit before" figures of bench/RESULTS.md
"Session 26"): a tree compared with itself on a small ONNX model compiles in child processes,
computes the same, and prints a row per thread count; a folder that is not a Kiln tree is
refused with its name."""
from __future__ import annotations

import os

import numpy as np
import pytest

from bench_scripts import load

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(path):
    w = np.random.default_rng(0).standard_normal((16, 8)).astype("float32")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                           helper.make_node("Relu", ["m"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                          initializer=[numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_a_tree_against_itself(tmp_path, capsys):
    ct = load("compare_trees")
    path = _model(str(tmp_path / "small.onnx"))
    assert ct.main([ct.NEW, "--onnx", path, "--rounds", "1", "--calls", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| small |")]
    assert len(rows) == 2 and rows[0].endswith("| 0.0e+00 |"), out


def test_not_a_tree_is_refused(tmp_path):
    ct = load("compare_trees")
    path = _model(str(tmp_path / "small.onnx"))
    with pytest.raises(SystemExit, match="not a Kiln source tree"):
        ct.compile_with(str(tmp_path), path, str(tmp_path / "x.so"))
    assert not os.path.exists(tmp_path / "x.so")
