"""ONNX If: folded at import time when the condition is known, call_if over private branch
functions when it is not; checked against onnxruntime. Also ``const_inputs``."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402

F, I64, B = TP.FLOAT, TP.INT64, TP.BOOL
RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3)).astype(np.float32)


def _graph(nodes, name, inputs, outputs, inits=()):
    return h.make_graph(nodes, name, [h.make_tensor_value_info(*i) for i in inputs],
                        [h.make_tensor_value_info(*o) for o in outputs],
                        [nh.from_array(np.asarray(a), n) for n, a in inits])


def _model(graph, opset=17):
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _branches(then_shape=(2, 3), else_shape=(2, 3)):
    """then: relu(x @ W) (W an outer initializer); else: a nested If on `flag2` between
    x @ W + 1 and a constant."""
    then_g = _graph([h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Relu", ["mm"], ["t_out"])],
                    "then", [], [("t_out", F, list(then_shape))])
    inner_then = _graph([h.make_node("MatMul", ["x", "W"], ["mm2"]),
                         h.make_node("Add", ["mm2", "one"], ["it_out"])], "inner_then", [],
                        [("it_out", F, [2, 3])], inits=[("one", np.float32(1))])
    inner_else = _graph([h.make_node("Constant", [], ["ie_out"],
                                     value=nh.from_array(np.full(else_shape, 7, np.float32)))],
                        "inner_else", [], [("ie_out", F, list(else_shape))])
    else_g = _graph([h.make_node("If", ["flag2"], ["e_out"], then_branch=inner_then, else_branch=inner_else)],
                    "else", [], [("e_out", F, list(else_shape))])
    return then_g, else_g


def _if_model(then_shape=(2, 3), else_shape=(2, 3)):
    then_g, else_g = _branches(then_shape, else_shape)
    g = _graph([h.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)], "main",
               [("flag", B, []), ("flag2", B, []), ("x", F, [2, 4])], [("y", F, None)], inits=[("W", W)])
    return _model(g)


def _compile(mod, params):
    mod = kiln.transform.bind_params("main", params)(mod)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    return ex, kiln.VirtualMachine(ex, kiln.cpu())


def test_runtime_condition_becomes_call_if():
    m = _if_model()
    mod, params = from_onnx(m)
    assert sorted(mod.functions) == ["main", "main_if0_else", "main_if0_then", "main_if1_else", "main_if1_then"]
    ex, vm = _compile(mod, params)
    assert ex.function_names == ["main"]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    for flag, flag2 in [(True, False), (False, True), (False, False), (True, True)]:
        feeds = {"flag": np.array(flag), "flag2": np.array(flag2), "x": x}
        want = sess.run(None, feeds)[0]
        got = vm["main"](*[kiln.nd.array(v) for v in feeds.values()]).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"flag={flag} flag2={flag2}")


def test_known_condition_is_inlined():
    m = _if_model()
    mod, params = from_onnx(m, const_inputs={"flag": False, "flag2": True})
    assert list(mod.functions) == ["main"]
    assert [p.name for p in mod["main"].params] == ["x", "W"]
    ex, vm = _compile(mod, params)
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(vm["main"](kiln.nd.array(x)).numpy(), x @ W + 1, rtol=1e-5, atol=1e-5)


def test_shape_test_condition_folds():
    """The exporter's `if x.dim() == 2` pattern: Shape -> Size -> Equal folds, so no branch
    function is made."""
    then_g = _graph([h.make_node("Neg", ["x"], ["a"])], "t", [], [("a", F, [2, 4])])
    else_g = _graph([h.make_node("Abs", ["x"], ["b"])], "e", [], [("b", F, [2, 4])])
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Size", ["s"], ["rank"]),
             h.make_node("Constant", [], ["two"], value=nh.from_array(np.array(2, np.int64))),
             h.make_node("Equal", ["rank", "two"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = _model(_graph(nodes, "main", [("x", F, [2, 4])], [("y", F, [2, 4])]))
    mod, _ = from_onnx(m)
    assert list(mod.functions) == ["main"]


def test_branches_with_different_shapes_name_the_fix():
    m = _if_model(else_shape=(3, 3))
    with pytest.raises(ONNXImportError, match=r"output 0 differs between the branches \(then: float32\(2, 3\), "
                                              r"else: float32\(3, 3\)\).*const_inputs"):
        from_onnx(m)
    mod, _ = from_onnx(m, const_inputs={"flag": True})   # pinning the condition keeps one branch
    assert list(mod.functions) == ["main"]


def test_const_inputs_errors():
    m = _if_model()
    with pytest.raises(ONNXImportError, match=r"const_inputs names \['nope'\], which are not graph inputs"):
        from_onnx(m, const_inputs={"nope": 1})
    with pytest.raises(ONNXImportError, match=r"const_inputs\['x'\]: shape \(3,\) does not fit"):
        from_onnx(m, const_inputs={"x": np.zeros(3, np.float32)})
