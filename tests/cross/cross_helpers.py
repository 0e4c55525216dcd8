"""Helpers for tests/cross (a plain module: every test folder's conftest.py is named "conftest",
so importing from one is ambiguous in a whole-suite run): the three foreign triples, ONNX models, and skips that name what is
missing (the cross toolchain, qemu-user or a target's C library)."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]

# The triples of issue 15, as kiln.compile / `kiln compile --target` take them.
TARGETS = {
    "aarch64": "aarch64-linux-gnu",
    "armv7": "armv7-linux-gnueabihf",
    "riscv64": "riscv64-linux-gnu -mattr=+v",
}


def need_toolchain(triple: str) -> None:
    """Skip, naming what to install, when nothing links for ``triple``."""
    from kiln.codegen.errors import CodegenError
    from kiln.codegen.toolchain import cross_cc
    try:
        cross_cc(triple.split()[0])
    except CodegenError as e:
        pytest.skip(str(e))


def need_qemu(triple: str) -> None:
    """Skip, naming the Debian packages, when programs for ``triple`` cannot run here."""
    from kiln.codegen.toolchain import missing_for_run
    need_toolchain(triple)
    missing = missing_for_run(triple.split()[0])
    if missing:
        pytest.skip(f"needs Debian's {missing} to run {triple} programs (apt-get install {missing})")


def _model(graph):
    from onnx import helper
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def mlp_onnx():
    """x (2, 16) -> MatMul+Add -> Relu -> MatMul+Add -> Softmax: (2, 10)."""
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh
    rng = np.random.default_rng(1)
    inits = [nh.from_array(rng.standard_normal(s).astype("float32") * 0.3, n)
             for n, s in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 10)), ("b2", (10,)))]
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
             h.make_node("Relu", ["a1"], ["r1"]), h.make_node("MatMul", ["r1", "w2"], ["m2"]),
             h.make_node("Add", ["m2", "b2"], ["a2"]), h.make_node("Softmax", ["a2"], ["y"], axis=-1)]
    g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", TP.FLOAT, [2, 16])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 10])], inits)
    return _model(g)


def cnn_onnx():
    """Conv(3->8, 3x3) -> Relu -> MaxPool 2x2 -> Conv(8->8) -> Sigmoid -> GlobalAveragePool ->
    Flatten -> Gemm(8->4), x of shape (2, 3, 12, 12)."""
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh
    rng = np.random.default_rng(2)
    inits = [nh.from_array(rng.standard_normal(s).astype("float32") * 0.3, n)
             for n, s in (("w", (8, 3, 3, 3)), ("b", (8,)), ("w2", (8, 8, 3, 3)), ("b2", (8,)),
                          ("fw", (4, 8)), ("fb", (4,)))]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Conv", ["mp", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             h.make_node("Sigmoid", ["c2"], ["s"]),
             h.make_node("GlobalAveragePool", ["s"], ["p"]),
             h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", TP.FLOAT, [2, 3, 12, 12])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 4])], inits)
    return _model(g)


def if_onnx():
    """y = If(flag, Tanh(x @ W), Neg(x @ W) * 2), flag a run-time input: the VM's IF over two
    private graph functions."""
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh
    rng = np.random.default_rng(3)
    w = nh.from_array(rng.standard_normal((6, 5)).astype("float32"), "W")
    two = nh.from_array(np.float32(2), "two")
    then_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["a"]), h.make_node("Tanh", ["a"], ["t"])],
                          "then", [], [h.make_tensor_value_info("t", TP.FLOAT, [3, 5])])
    else_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["b"]), h.make_node("Neg", ["b"], ["n"]),
                           h.make_node("Mul", ["n", "two"], ["e"])],
                          "else", [], [h.make_tensor_value_info("e", TP.FLOAT, [3, 5])])
    g = h.make_graph([h.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
                     "iff", [h.make_tensor_value_info("flag", TP.BOOL, []),
                             h.make_tensor_value_info("x", TP.FLOAT, [3, 6])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [3, 5])], [w, two])
    return _model(g)


MODELS = {"mlp": mlp_onnx, "cnn": cnn_onnx, "if": if_onnx}


def inputs_for(name: str):
    """A list of input lists for model ``name`` (several for the control-flow model: both
    branches)."""
    rng = np.random.default_rng(7)
    if name == "mlp":
        return [[rng.standard_normal((2, 16)).astype("float32")]]
    if name == "cnn":
        return [[rng.standard_normal((2, 3, 12, 12)).astype("float32")]]
    x = rng.standard_normal((3, 6)).astype("float32")
    return [[np.array(True), x], [np.array(False), x]]


def compile_onnx(model, target):
    """The ONNX ``model`` imported, weights bound, the default pipeline for ``target``, compiled."""
    import kiln
    mod, params = kiln.frontend.from_onnx(model)
    mod = kiln.transform.bind_params("main", params)(mod)
    return kiln.compile(mod, target=target, pipeline="default")


def static_x():
    """The input the programs in programs/ compute: x of shape (2, 16), x[i] = ((i * 7) % 19 - 9) / 16."""
    return (((np.arange(32) * 7) % 19 - 9) / 16).astype("float32").reshape(2, 16)


def build_runtime(triple: str, runtime_make, dest, variant: str = ""):
    """Cross-build the runtime for ``triple`` (``variant``: a make target such as "embedded",
    else the default build) and copy its static library to ``dest``."""
    sub = f"{triple}/{variant}/" if variant else f"{triple}/"
    runtime_make(f"TARGET={triple}", variant or "all", copy={f"{sub}libkiln_runtime.a": dest})
    return dest
