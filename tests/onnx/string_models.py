"""A small ONNX model with string operators, shared by the tests that run one from C
(tests/onnx/test_strings_e2e.py over the checkout's runtime, tests/packaging/test_wheel.py over an
installed wheel): ``(x == "cat", x ++ "!")`` for a string vector ``x`` of 3, the outputs
tests/onnx/strings_model_test.c checks."""
from __future__ import annotations

from onnx import ModelProto, TensorProto, helper


def equal_and_concat_model() -> ModelProto:
    """x: string[3] -> (eq: bool[3] = x == "cat", w: string[3] = x ++ "!")."""
    nodes = [
        helper.make_node("Constant", [], ["cat"], value=helper.make_tensor("cat", TensorProto.STRING, [], [b"cat"])),
        helper.make_node("Equal", ["x", "cat"], ["eq"]),
        helper.make_node("Constant", [], ["bang"], value=helper.make_tensor("bang", TensorProto.STRING, [1], [b"!"])),
        helper.make_node("StringConcat", ["x", "bang"], ["w"]),
    ]
    graph = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.STRING, [3])],
                              [helper.make_tensor_value_info("eq", TensorProto.BOOL, [3]),
                               helper.make_tensor_value_info("w", TensorProto.STRING, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
