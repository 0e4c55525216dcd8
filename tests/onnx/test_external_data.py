"""Initializers in external files (``frontend/onnx/external_data.py``): memory-mapped from
their files, not read into memory (the arrays own no data and importing allocates almost
nothing), computing what onnxruntime computes, through ``from_onnx(path)`` and ``kiln
compile``; a location or a size that does not fit is refused with a message naming the tensor."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402
from kiln.frontend.onnx.external_data import load_model  # noqa: E402

RNG = np.random.default_rng(0)
W = RNG.standard_normal((256, 128)).astype(np.float32)
B = RNG.standard_normal(128).astype(np.float16)


def _mlp(opset=17, constant_node=False):
    """y = relu(x @ W + float(B)) (+ a Constant node's tensor when ``constant_node``)."""
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]),
             h.make_node("Cast", ["B"], ["b32"], to=TP.FLOAT),
             h.make_node("Add", ["m", "b32"], ["a"]),
             h.make_node("Relu", ["a"], ["y"])]
    if constant_node:
        c = nh.from_array(np.full((1, 128), 0.5, np.float32), "c")
        nodes[-1:] = [h.make_node("Constant", [], ["c"], value=c),
                      h.make_node("Relu", ["a"], ["r"]), h.make_node("Add", ["r", "c"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, 256])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 128])],
                     [nh.from_array(W, "W"), nh.from_array(B, "B")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 17 else 5
    return m


def _save_external(m, path, **kw):
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0, **kw)
    return path


def _run(mod, params, x):
    mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    return vm["main"](x).numpy()


def _mapped(arr) -> bool:
    """Whether ``arr``'s memory is a file mapping (some base in its chain is an mmap)."""
    import mmap
    base = arr
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    return False


@pytest.mark.parametrize("constant_node", [False, True])
def test_external_initializers_are_mapped_and_compute_as_onnxruntime(tmp_path, constant_node):
    path = _save_external(_mlp(constant_node=constant_node), tmp_path / "m.onnx",
                          convert_attribute=constant_node)
    assert os.path.getsize(path) < 4096        # the weights are in weights.bin
    _, mapped = load_model(path)
    assert set(mapped) == {"W", "B"} and all(_mapped(a) for a in mapped.values())
    np.testing.assert_array_equal(mapped["B"], B)
    mod, params = from_onnx(path)
    assert set(params) == {"W"}                  # B (float16, cast) folds into a constant
    assert _mapped(params["W"]) and not params["W"].flags.writeable
    np.testing.assert_array_equal(params["W"], W)
    x = RNG.standard_normal((1, 256)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(_run(mod, params, x), want, rtol=1e-4, atol=1e-4)


def test_importing_external_weights_allocates_almost_nothing(tmp_path):
    big = RNG.standard_normal((1024, 1024)).astype(np.float32)      # 4 MiB
    g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["y"])], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [1, 1024])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 1024])], [nh.from_array(big, "W")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    path = _save_external(m, tmp_path / "big.onnx")
    tracemalloc.start()
    try:
        mod, params = from_onnx(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # onnx.load + numpy_helper.to_array would hold the weights twice (8 MiB)
    assert peak < big.nbytes // 8, f"importing allocated {peak} bytes for {big.nbytes} of weights"
    np.testing.assert_array_equal(params["W"], big)


def test_an_old_opset_model_with_external_weights_is_upgraded(tmp_path):
    path = _save_external(_mlp(opset=10), tmp_path / "old.onnx")
    mod, params = from_onnx(path)
    x = RNG.standard_normal((1, 256)).astype(np.float32)
    want = np.maximum(x @ W + B.astype(np.float32), 0)
    np.testing.assert_allclose(_run(mod, params, x), want, rtol=1e-4, atol=1e-4)


def test_a_misaligned_tensor_is_copied_aligned(tmp_path):
    m = _mlp()
    (tmp_path / "w.bin").write_bytes(b"\0" + W.tobytes())       # W at offset 1
    t = next(t for t in m.graph.initializer if t.name == "W")
    t.ClearField("raw_data")
    t.data_location = TP.EXTERNAL
    for k, v in (("location", "w.bin"), ("offset", "1"), ("length", str(W.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    onnx.save(m, str(tmp_path / "m.onnx"))
    model, mapped = load_model(tmp_path / "m.onnx")
    assert mapped["W"].flags.aligned and mapped["W"].flags.owndata
    np.testing.assert_array_equal(mapped["W"], W)


def _with_location(tmp_path, location, offset=None, length=None, data=None):
    m = _mlp()
    t = next(t for t in m.graph.initializer if t.name == "W")
    t.ClearField("raw_data")
    t.data_location = TP.EXTERNAL
    entries = [("location", location)] + ([("offset", str(offset))] if offset is not None else []) \
        + ([("length", str(length))] if length is not None else [])
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    (tmp_path / "model").mkdir(exist_ok=True)
    if data is not None:
        (tmp_path / "model" / "w.bin").write_bytes(data)
    onnx.save(m, str(tmp_path / "model" / "m.onnx"))
    return tmp_path / "model" / "m.onnx"


@pytest.mark.parametrize("location, offset, length, data, message", [
    ("w.bin", None, None, None, "external data file 'w.bin' is missing"),
    ("../w.bin", None, None, b"", "must be a relative path inside the model's directory"),
    ("/etc/passwd", None, None, b"", "must be a relative path inside the model's directory"),
    ("w.bin", 0, None, W.tobytes()[:1000], "past its end (1000 bytes)"),
    ("w.bin", 64, W.nbytes, W.tobytes(), f"bytes 64..{64 + W.nbytes}"),
    ("w.bin", 0, 12, W.tobytes(), f"its external data is 12 bytes, but (256, 128) of float32 takes {W.nbytes}"),
])
def test_bad_external_locations_and_sizes_are_refused(tmp_path, location, offset, length, data, message):
    path = _with_location(tmp_path, location, offset, length, data)
    with pytest.raises(ONNXImportError, match="initializer 'W'") as e:
        from_onnx(path)
    assert message in str(e.value)


def test_a_symbolic_link_out_of_the_model_directory_is_refused(tmp_path):
    (tmp_path / "outside.bin").write_bytes(W.tobytes())
    path = _with_location(tmp_path, "w.bin")
    os.symlink(tmp_path / "outside.bin", tmp_path / "model" / "w.bin")
    with pytest.raises(ONNXImportError, match="leads out of the model's directory"):
        from_onnx(path)


def test_kiln_compile_maps_external_weights(tmp_path):
    path = _save_external(_mlp(), tmp_path / "m.onnx")
    lib = tmp_path / "m.so"
    proc = subprocess.run([sys.executable, "-m", "kiln.cli", "compile", str(path), "-o", str(lib)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    x = RNG.standard_normal((1, 256)).astype(np.float32)
    vm = kiln.VirtualMachine(kiln.load_module(str(lib)), kiln.cpu())
    np.testing.assert_allclose(vm["main"](x).numpy(), np.maximum(x @ W + B.astype(np.float32), 0),
                               rtol=1e-4, atol=1e-4)
    bad = _with_location(tmp_path, "../w.bin", data=b"")
    proc = subprocess.run([sys.executable, "-m", "kiln.cli", "compile", str(bad), "-o", str(lib)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "must be a relative path inside the model's directory" in proc.stderr
