"""split_as_slices: a split whose pieces are only taken out one by one becomes a strided_slice
per piece (printed graph), which fuses into its reader (no split kernel is left); a split
returned as a tuple stays. Numerics against onnxruntime at 1e-6 through the default pipeline:
equal and uneven pieces, a negative axis, batch 2."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln  # noqa: E402
from kiln.transform import split_as_slices  # noqa: E402

F = TensorProto.FLOAT


def _gates(shape, sizes, axis):
    """x -> Split(sizes, axis) -> sigmoid(p0) * tanh(p1) (+ p2 when there are three pieces)."""
    outs = [f"p{k}" for k in range(len(sizes))]
    nodes = [helper.make_node("Split", ["x", "sizes"], outs, axis=axis),
             helper.make_node("Sigmoid", ["p0"], ["s"]), helper.make_node("Tanh", ["p1"], ["t"]),
             helper.make_node("Mul", ["s", "t"], ["y" if len(sizes) == 2 else "m"])]
    if len(sizes) == 3:
        nodes.append(helper.make_node("Add", ["m", "p2"], ["y"]))
    out_shape = list(shape)
    out_shape[axis] = sizes[0]
    g = helper.make_graph(nodes, "gates", [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info("y", F, out_shape)],
                          initializer=[numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _graph(m):
    mod, params = kiln.frontend.from_onnx(m)
    return kiln.transform.bind_params("main", params)(mod) if params else mod


def test_pieces_become_slices():
    mod = _graph(_gates((1, 768), [256, 256, 256], 1))
    assert "R.split(" in mod.script()
    text = split_as_slices()(mod).script()
    assert "R.split(" not in text and text.count("R.strided_slice(") == 3
    assert "R.strided_slice(x, axes=(1,), begin=(256,), end=(512,))" in text


def test_a_split_returned_as_a_tuple_stays():
    from kiln.ir.graph import BindingBlock, Function, GraphVar, TensorType, Binding, Tuple
    x = GraphVar("x", TensorType((4, 6), "float32"))
    t = GraphVar("t", kiln.ops.call("split", x, indices_or_sections=2, axis=1).ty)
    func = Function([x], [BindingBlock([Binding(t, kiln.ops.call("split", x, indices_or_sections=2,
                                                                   axis=1))])], t)
    mod = kiln.IRModule({"main": func})
    assert split_as_slices()(mod).script() == mod.script()


@pytest.mark.parametrize("shape,sizes,axis", [((1, 768), [256, 256, 256], 1),
                                              ((2, 5, 12), [4, 4, 4], -1),
                                              ((3, 9), [3, 3, 3], -1),
                                              ((6, 7), [2, 2, 2], 0)])
def test_same_as_onnxruntime_and_no_split_kernel(shape, sizes, axis):
    m = _gates(shape, sizes, axis)
    out = kiln.get_pipeline("default")(_graph(m))
    kernels = [f for f in out.functions.values() if isinstance(f, kiln.ir.PrimFunc)]
    assert all("split" not in dict(f.attrs).get("kiln.ops", "") for f in kernels)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = kiln.VirtualMachine(kiln.compile(out, "llvm"), kiln.cpu())["main"](kiln.nd.array(x))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


def test_uneven_pieces_each_an_output():
    """Pieces of 2 and 5 columns, each a graph output through its own relu."""
    g = helper.make_graph(
        [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
         helper.make_node("Relu", ["a"], ["ya"]), helper.make_node("Relu", ["b"], ["yb"])],
        "uneven", [helper.make_tensor_value_info("x", F, [3, 7])],
        [helper.make_tensor_value_info("ya", F, [3, 2]), helper.make_tensor_value_info("yb", F, [3, 5])],
        initializer=[numpy_helper.from_array(np.array([2, 5], np.int64), "sizes")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    out = kiln.get_pipeline("default")(_graph(m))
    x = np.random.default_rng(1).standard_normal((3, 7)).astype("float32")
    got = kiln.VirtualMachine(kiln.compile(out, "llvm"), kiln.cpu())["main"](kiln.nd.array(x))
    np.testing.assert_array_equal(got[0].numpy(), np.maximum(x[:, :2], 0))
    np.testing.assert_array_equal(got[1].numpy(), np.maximum(x[:, 2:], 0))
