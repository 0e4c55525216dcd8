"""bench/kernel_efficiency.py (session 26's kernel-by-kernel survey): on a small ONNX model, a
conv kernel and a gathering resize are listed with their arithmetic, the conv's GFLOP/s from
the program's own count, and the ranking of lost time treats only contractions not bound by
memory; the command line prints both tables."""
from __future__ import annotations

import numpy as np
import pytest

from bench_scripts import load

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),  # no Winograd
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Resize", ["r", "", "", "sizes"], ["y"], mode="linear")],
        "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 24, 24])],
        initializer=[numpy_helper.from_array(w, "w"),
                     numpy_helper.from_array(np.array([1, 32, 24, 24], np.int64), "sizes")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_rows_count_each_kernels_arithmetic(tmp_path):
    ke = load("kernel_efficiency")
    path = _model(str(tmp_path / "m.onnx"))
    rows = ke.kernel_rows(path, ke._input_for(path), calls=2)
    (conv,) = [r for r in rows if "conv" in r["schedule"].split(":")[0]]
    # the multiply-adds, and a little more: the program's other arithmetic (its padding's
    # selects) counts too
    flops = 2 * 12 * 12 * 32 * 16 * 9 * conv["calls"] / conv["us"] / 1e3
    assert flops <= conv["gflops"] <= 1.2 * flops
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-6 and all(r["us2"] > 0 for r in rows)
    resize = [r for r in rows if "resize2d" in r["kernel"]]
    assert resize and ke.lost(resize[0], 150, 10) == 0          # not a contraction
    assert ke.lost(dict(conv, gflops=300.0), 150, 1e9) == 0      # at peak: nothing lost
    assert ke.lost(dict(conv, gflops=75.0), 150, 1e9) == pytest.approx(conv["share"] / 2)
    assert ke.lost(dict(conv, gflops=75.0, gbs=50.0), 150, 10) == 0   # bound by memory


def test_command_line_prints_both_tables(tmp_path, capsys):
    ke = load("kernel_efficiency")
    path = _model(str(tmp_path / "m.onnx"))
    assert ke.main(["--onnx", path, "--calls", "1", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "## m: " in out and "| kernel | calls | us (1t) |" in out
    assert "## Largest losses against 150 GFLOP/s" in out
