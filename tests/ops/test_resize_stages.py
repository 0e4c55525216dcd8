"""A linear resize that upsamples NCHW rows runs in two stages (``ops/nn.py``,
``_separable``): each input row interpolated across once (``resize2d_rows``, a block the
default schedule keeps), then the rows blended. Checked against onnxruntime at 1e-5 for the
coordinate modes, odd sizes and batch 2, and the printed kernel for which shapes get the
stages."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import kiln  # noqa: E402


def _model(shape, size, mode):
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode=mode)
    g = helper.make_graph(
        [node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape[:2]) + list(size))],
        initializer=[helper.make_tensor("sizes", TensorProto.INT64, [4], list(shape[:2]) + list(size))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _kernel_and_check(shape, size, mode="half_pixel", threads=1):
    m = _model(shape, size, mode)
    mod, _ = kiln.frontend.from_onnx(m)
    out = kiln.get_pipeline("default")(mod)
    (kernel,) = [f for f in out.functions.values() if isinstance(f, kiln.ir.PrimFunc)]
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    kiln.set_num_threads(threads)
    try:
        got = kiln.VirtualMachine(kiln.compile(out, "llvm"), kiln.cpu())["main"](kiln.nd.array(x))
    finally:
        kiln.set_num_threads(0)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    return kernel.script()


@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
@pytest.mark.parametrize("shape,size", [((1, 3, 7, 7), (56, 56)), ((2, 5, 4, 6), (9, 13)),
                                        ((1, 2, 3, 5), (8, 4))])
def test_upsampling_rows_runs_in_two_stages(mode, shape, size):
    text = _kernel_and_check(shape, size, mode)
    assert 'T.block("resize2d_rows")' in text and text.count("T.block(") == 2


def test_two_stages_on_two_threads():
    _kernel_and_check((1, 21, 28, 28), (224, 224), threads=2)


@pytest.mark.parametrize("shape,size", [((1, 3, 8, 8), (4, 12)),     # fewer rows out than in
                                        ((1, 3, 8, 8), (16, 8))])    # columns not resized
def test_other_resizes_stay_one_stage(shape, size):
    text = _kernel_and_check(shape, size)
    assert "resize2d_rows" not in text and text.count("T.block(") == 1
