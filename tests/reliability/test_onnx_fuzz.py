"""The ONNX importer under fuzzing (issue 17 item 1): onnx_fuzz.py's hypothesis strategies
(malformed protobuf bytes; missing initializers, attributes of the wrong type, cycles, huge or
negative dims, unknown ops, bad opsets and dtypes in real models) must give a module or an
ONNXImportError, never another exception, a hang or a huge allocation (the run has an 8 GiB
address-space limit). Derandomized here, so a run is repeatable; the inputs it once failed on
are regression tests below."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("hypothesis", reason="hypothesis (the test extra) is not installed")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def test_importer_fuzz_gives_modules_or_import_errors():
    run = subprocess.run([sys.executable, str(HERE / "onnx_fuzz.py"), "--examples", "300"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    counts = [int(n) for n in re.findall(r": (\d+) examples, ", run.stdout)]
    assert len(counts) == 2 and min(counts) >= 300, run.stdout


def _model(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "g", inputs, outputs, [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    return m


# ---- what the fuzzing found -------------------------------------------------------------------

def test_constant_of_a_huge_constant_shape_is_not_folded():
    """ConstantOfShape of (1, 2^32 + 6) used to be folded with numpy: 16 GiB at import time (the
    fuzzer found it). 2^28 elements here: were it folded again, 1 GiB, not 16."""
    m = _model([h.make_node("ConstantOfShape", ["s"], ["c"], value=nh.from_array(np.array([1.0], np.float32))),
                h.make_node("Add", ["x", "c"], ["y"])],
               [h.make_tensor_value_info("x", TP.FLOAT, [1, 1])], [h.make_tensor_value_info("y", TP.FLOAT, None)],
               [("s", np.array([1, 2**28], np.int64))])
    mod, _ = from_onnx(m)  # imports without allocating: the constant is broadcast at run time
    assert "broadcast_to" in mod.script()


def test_expand_of_constants_past_the_fold_limit_is_emitted():
    m = _model([h.make_node("Expand", ["one", "s"], ["y"])], [], [h.make_tensor_value_info("y", TP.FLOAT, None)],
               [("one", np.ones((1,), np.float32)), ("s", np.array([2**20, 2**20], np.int64))])
    mod, _ = from_onnx(m)
    assert "broadcast_to" in mod.script()


def test_graph_output_nothing_produces():
    m = _model([h.make_node("Relu", ["x"], ["r"])], [h.make_tensor_value_info("x", TP.FLOAT, [2])],
               [h.make_tensor_value_info("y", TP.FLOAT, [2])])
    with pytest.raises(ONNXImportError, match="graph output 'y' is produced by no node"):
        from_onnx(m)


def test_initializer_whose_dims_do_not_match_its_data():
    m = _model([h.make_node("Add", ["x", "w"], ["y"])], [h.make_tensor_value_info("x", TP.FLOAT, [3])],
               [h.make_tensor_value_info("y", TP.FLOAT, [3])], [("w", np.ones(3, np.float32))])
    m.graph.initializer[0].dims[:] = [2, 2]
    with pytest.raises(ONNXImportError, match="initializer 'w': cannot read its data"):
        from_onnx(m)


def test_if_branch_attribute_of_another_type():
    then_g = h.make_graph([h.make_node("Relu", ["x"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", TP.FLOAT, [2])])
    node = h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g)
    node.attribute[1].Clear()
    node.attribute[1].name, node.attribute[1].type, node.attribute[1].f = "else_branch", onnx.AttributeProto.FLOAT, 1.5
    m = _model([node], [h.make_tensor_value_info("c", TP.BOOL, []), h.make_tensor_value_info("x", TP.FLOAT, [2])],
               [h.make_tensor_value_info("y", TP.FLOAT, [2])])
    with pytest.raises(ONNXImportError, match=r"node '#0' \(If, opset 17\)"):
        from_onnx(m)


def test_malformed_protobuf_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0fnot a protobuf")
    with pytest.raises(ONNXImportError, match="as an ONNX model"):
        from_onnx(str(bad))


def test_dim_param_that_is_not_utf8(tmp_path):
    """protobuf returns a string field holding invalid UTF-8 as bytes."""
    m = _model([h.make_node("Relu", ["x"], ["y"])], [h.make_tensor_value_info("x", TP.FLOAT, ["nXn"])],
               [h.make_tensor_value_info("y", TP.FLOAT, None)])
    data = m.SerializeToString().replace(b"nXn", b"n\xffn")
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    try:
        from_onnx(str(path))  # a module (the dim named with a replacement character) ...
    except ONNXImportError:
        pass  # ... or a refusal; never a crash
