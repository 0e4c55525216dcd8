"""Every graph input given at run time (``KilnRuntimeBackend``, ``prepare(runtime_inputs=True)``):
nothing frozen into the compiled code, and the ops that can take such an input that way."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from kiln.frontend.onnx.backend import KilnBackend, KilnRuntimeBackend  # noqa: E402
from kiln.frontend.onnx.common import ONNXImportError  # noqa: E402


def _model(node, inputs, outputs):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_input_that_shapes_the_output_is_refused_not_frozen():
    model = _model(helper.make_node("Reshape", ["x", "shape"], ["y"]),
                   [("x", TensorProto.FLOAT, [2, 3]), ("shape", TensorProto.INT64, [2])],
                   [("y", TensorProto.FLOAT, [3, 2])])
    x, shape = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([3, 2], dtype=np.int64)
    # the default backend compiles at run time with `shape` bound as a constant...
    rep = KilnBackend.prepare(model)
    np.testing.assert_array_equal(rep.run([x, shape])[0], x.reshape(3, 2))
    assert rep.frozen == ["shape"] and rep.num_args == 1
    # ...which the run-time way refuses, naming the input
    with pytest.raises(ONNXImportError, match="shape") as e:
        KilnRuntimeBackend.prepare(model)
    assert e.value.needs_constant == "shape"
    with pytest.raises(ONNXImportError, match="shape"):
        KilnBackend.prepare(model, runtime_inputs=True)


def test_every_input_is_an_argument_of_one_executable():
    model = _model(helper.make_node("Add", ["a", "b"], ["c"]),
                   [("a", TensorProto.FLOAT, [2, 2]), ("b", TensorProto.FLOAT, [2, 2])],
                   [("c", TensorProto.FLOAT, [2, 2])])
    rep = KilnRuntimeBackend.prepare(model)
    a = np.ones((2, 2), np.float32)
    for b in (np.arange(4, dtype=np.float32).reshape(2, 2), np.full((2, 2), -3, np.float32)):
        np.testing.assert_array_equal(rep.run([a, b])[0], a + b)
    assert rep.num_args == 2 and len(rep.kernel_counts) == 1 and rep.kernel_counts[0] >= 1


@pytest.mark.parametrize("upper", [1, 0])
def test_trilu_k_given_at_run_time(upper):
    # k moves the diagonal but not the output's shape: one executable serves every k
    model = _model(helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper),
                   [("x", TensorProto.FLOAT, [2, 4, 5]), ("k", TensorProto.INT64, [])],
                   [("y", TensorProto.FLOAT, [2, 4, 5])])
    rep = KilnRuntimeBackend.prepare(model)
    x = np.random.default_rng(0).standard_normal((2, 4, 5)).astype(np.float32)
    for k in (-5, -1, 0, 2, 7):
        want = np.triu(x, k) if upper else np.tril(x, k)
        np.testing.assert_array_equal(rep.run([x, np.array(k, np.int64)])[0], want)


@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_with_an_empty_axes_input(noop):
    # an axes input of static length 0 has one possible value (no axes): known from its type,
    # so the run-time way compiles it (all axes reduced, or none with noop_with_empty_axes)
    model = _model(helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, noop_with_empty_axes=noop),
                   [("x", TensorProto.FLOAT, [3, 2, 2]), ("axes", TensorProto.INT64, [0])],
                   [("y", TensorProto.FLOAT, [3, 2, 2] if noop else [1, 1, 1])])
    model.opset_import[0].version = 18
    rep = KilnRuntimeBackend.prepare(model)
    x = np.random.default_rng(1).standard_normal((3, 2, 2)).astype(np.float32)
    got = rep.run([x, np.zeros((0,), np.int64)])[0]
    np.testing.assert_allclose(got, x if noop else x.sum(keepdims=True), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_scan_of_a_vector_with_a_run_time_axis(op):
    # a 1-D input has one axis, so an axis given at run time can only name it
    model = _model(helper.make_node(op, ["x", "axis"], ["y"], reverse=1),
                   [("x", TensorProto.FLOAT, [5]), ("axis", TensorProto.INT64, [])],
                   [("y", TensorProto.FLOAT, [5])])
    model.opset_import[0].version = 26  # CumProd's first opset
    rep = KilnRuntimeBackend.prepare(model)
    x = np.array([1.5, -2.0, 3.0, 0.5, 2.0], np.float32)
    want = (np.cumsum if op == "CumSum" else np.cumprod)(x[::-1])[::-1]
    for axis in (0, -1):
        np.testing.assert_allclose(rep.run([x, np.array(axis, np.int64)])[0], want, rtol=1e-6)
