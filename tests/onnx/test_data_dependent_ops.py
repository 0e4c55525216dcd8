"""NonZero, Unique, NonMaxSuppression and ImageDecoder, whose output sizes depend on input values:
computed at import from constant inputs (checked against onnxruntime; ImageDecoder against the
pixels of a losslessly encoded image), and a run-time input refused with an error naming it (the
ONNX backend then specialises on it)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402

RNG = np.random.default_rng(17)


def check_constant(node, consts, out_types, opset=13):
    """The node over initializers ``consts``, followed by an Identity per output so the graph has
    run-time work: Kiln equals onnxruntime."""
    outs = [h.make_tensor_value_info(o + "_out", t, None) for o, t in zip(node.output, out_types)]
    ids = [h.make_node("Identity", [o], [o + "_out"]) for o in node.output]
    m = h.make_model(h.make_graph([node] + ids, "g", [], outs, [nh.from_array(v, k) for k, v in consts.items()]),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    mod, params = from_onnx(m)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    got = vm["main"]()
    got = [np.asarray(g.numpy() if hasattr(g, "numpy") else g) for g in (got if isinstance(got, (list, tuple)) else [got])]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


def test_nonzero_constant():
    x = (RNG.random((3, 4, 2)) > 0.6).astype(np.float32)
    check_constant(h.make_node("NonZero", ["x"], ["y"]), {"x": x}, [TP.INT64])


@pytest.mark.parametrize("attrs", [{}, {"sorted": 0}, {"axis": 1}, {"axis": -2, "sorted": 0}])
def test_unique_constant(attrs):
    x = RNG.integers(0, 3, (4, 5)).astype(np.float32)
    x[:, 3] = x[:, 1]            # a repeated column for axis=1
    x[2] = x[0]                  # a repeated row for axis=-2
    node = h.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **attrs)
    check_constant(node, {"x": x}, [TP.FLOAT, TP.INT64, TP.INT64, TP.INT64], opset=11)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression_constant(center_point_box):
    boxes = RNG.random((2, 8, 4)).astype(np.float32)
    boxes[..., 2:] += boxes[..., :2] if center_point_box == 0 else 0.0
    scores = RNG.random((2, 3, 8)).astype(np.float32)
    scores[0, 0, 5] = scores[0, 0, 2]                  # a tie: the lower index goes first
    consts = {"b": boxes, "s": scores, "m": np.array([3], np.int64), "iou": np.array([0.3], np.float32),
              "st": np.array([0.2], np.float32)}
    node = h.make_node("NonMaxSuppression", list(consts), ["y"], center_point_box=center_point_box)
    check_constant(node, consts, [TP.INT64], opset=11)


def test_runtime_input_names_what_must_be_constant():
    node = h.make_node("NonZero", ["x"], ["y"])
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [3])],
                                  [h.make_tensor_value_info("y", TP.INT64, None)]),
                     opset_imports=[h.make_opsetid("", 13)])
    with pytest.raises(ONNXImportError, match="NonZero's input .*depends on its values.* must be a constant") as e:
        from_onnx(m)
    assert e.value.needs_constant == "x"


@pytest.mark.parametrize("fmt,pixel_format", [("PNG", "RGB"), ("BMP", "BGR"), ("PNG", "Grayscale")])
def test_image_decoder_lossless(fmt, pixel_format):
    PIL = pytest.importorskip("PIL.Image")
    import io
    pixels = RNG.integers(0, 256, (5, 7, 3)).astype(np.uint8)
    buf = io.BytesIO()
    PIL.fromarray(pixels).save(buf, format=fmt)
    encoded = np.frombuffer(buf.getvalue(), np.uint8)
    node = h.make_node("ImageDecoder", ["x"], ["y"], pixel_format=pixel_format)
    m = h.make_model(h.make_graph([node, h.make_node("Identity", ["y"], ["z"])], "g", [],
                                  [h.make_tensor_value_info("z", TP.UINT8, None)], [nh.from_array(encoded, "x")]),
                     opset_imports=[h.make_opsetid("", 20)])
    mod, params = from_onnx(m)
    mod = kiln.transform.bind_params("main", params)(mod) if params else mod
    got = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())["main"]()
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
    if pixel_format == "Grayscale":   # ITU-R 601-2 luma, as Pillow's convert("L")
        want = np.asarray(PIL.fromarray(pixels).convert("L"))[:, :, None]
    else:
        want = pixels if pixel_format == "RGB" else pixels[:, :, ::-1]
    np.testing.assert_array_equal(got, want)
