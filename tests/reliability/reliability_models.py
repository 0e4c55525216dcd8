"""Real models for the reliability tests, compiled by Kiln and exported as model.so, each with a
manifest the C harness (reliability_test.c) reads: the function to call, its inputs and the
Python VM's outputs on them.

- ``mlp``: Linear(64, 32) -> ReLU -> Linear(32, 10), weights bound as constants;
- ``cnn``: Conv2d(3, 8, 3, padding=1) -> ReLU -> MaxPool2d(2) -> Conv2d(8, 4, 3) on 1x3x16x16;
- ``if``: ONNX If on a bool input, relu(x @ W) or x @ W + 1 (call_if over private branches);
- ``symbolic``: the MLP over x of shape (n, 64), n symbolic (bounded by 16), called with n = 5.

Small on purpose: the thread, leak and fault-injection runs call them thousands of times under
sanitizers. Manifest format (one item a line, paths relative to the manifest):
    function NAME
    input DTYPE_CODE BITS NDIM D0 D1 ... FILE        (DLPack dtype code, raw little-endian data)
    output NUMEL FILE                                 (float32; the outputs in tuple order)
"""
from __future__ import annotations

import pathlib

import numpy as np

import kiln
from kiln import nn

_DLPACK = {np.dtype("float32"): (2, 32), np.dtype("int32"): (0, 32), np.dtype("int64"): (0, 64),
           np.dtype("bool"): (6, 8)}
MODELS = ("mlp", "cnn", "if", "symbolic")


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.c2 = nn.Conv2d(8, 4, 3)

    def forward(self, x):
        return self.c2(self.pool(self.relu(self.c1(x))))


def _nn_module(model, spec, bounds=None):
    model.load_state_dict(model.init_params(seed=0))
    mod, _ = model.export(spec={"forward": spec}, bounds=bounds)
    return kiln.transform.bind_params("forward", model.state_dict())(mod), "forward"


def _if_module():
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh

    from kiln.frontend.onnx import from_onnx
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    then_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Relu", ["mm"], ["t"])],
                          "then", [], [h.make_tensor_value_info("t", TP.FLOAT, [2, 3])])
    else_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["mm2"]), h.make_node("Add", ["mm2", "one"], ["e"])],
                          "else", [], [h.make_tensor_value_info("e", TP.FLOAT, [2, 3])],
                          [nh.from_array(np.float32(1), "one")])
    g = h.make_graph([h.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)], "main",
                     [h.make_tensor_value_info("flag", TP.BOOL, []),
                      h.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)], [nh.from_array(w, "W")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    mod, params = from_onnx(m)
    return kiln.transform.bind_params("main", params)(mod), "main"


def _inputs(name, rng):
    if name == "mlp":
        return [rng.standard_normal((1, 64)).astype(np.float32)]
    if name == "cnn":
        return [rng.standard_normal((1, 3, 16, 16)).astype(np.float32)]
    if name == "if":
        return [np.array(False), rng.standard_normal((2, 4)).astype(np.float32)]
    return [rng.standard_normal((5, 64)).astype(np.float32)]


def _module(name):
    if name == "mlp":
        return _nn_module(_MLP(), {"x": nn.spec.Tensor((1, 64), "float32")})
    if name == "cnn":
        return _nn_module(_CNN(), {"x": nn.spec.Tensor((1, 3, 16, 16), "float32")})
    if name == "if":
        return _if_module()
    return _nn_module(_MLP(), {"x": nn.spec.Tensor(("n", 64), "float32")}, bounds={"n": 16})


def _flatten(value):
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten(v)]
    return [np.asarray(value.numpy() if hasattr(value, "numpy") else value)]


def build(name: str, out_dir: pathlib.Path) -> pathlib.Path:
    """Compiles model ``name`` into out_dir/model.so with its inputs, outputs and manifest;
    returns the manifest's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mod, fn = _module(name)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    ex.export_library(str(out_dir / "model.so"))
    args = _inputs(name, np.random.default_rng(1))
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    outs = _flatten(vm[fn](*[kiln.nd.array(a) for a in args]))
    lines = [f"function {fn}"]
    for i, a in enumerate(args):
        code, bits = _DLPACK[a.dtype]
        (out_dir / f"in{i}.bin").write_bytes(np.ascontiguousarray(a).tobytes())
        lines.append(f"input {code} {bits} {a.ndim} {' '.join(map(str, a.shape))} in{i}.bin".replace("  ", " "))
    for i, o in enumerate(outs):
        assert o.dtype == np.float32, (name, o.dtype)
        (out_dir / f"out{i}.bin").write_bytes(np.ascontiguousarray(o).tobytes())
        lines.append(f"output {o.size} out{i}.bin")
    manifest = out_dir / "manifest.txt"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest
