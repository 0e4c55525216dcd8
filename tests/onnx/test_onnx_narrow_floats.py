"""bfloat16, float8 and float4 in ONNX models, against onnx's reference evaluator (the source of
the backend tests' data): Cast to every float8 with and without saturation from float32 and
float16 at the overflow and rounding edges, Cast to float8e8m0 in each round mode, an operator
computed in float32 on bfloat16 inputs and rounded back, Quantize/DequantizeLinear with a
float8 zero point, and narrow-float constants stored in the executable and read back."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import kiln  # noqa: E402
from kiln.executable.format import deserialize  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

FLOAT8 = {"float8_e4m3fn": TP.FLOAT8E4M3FN, "float8_e4m3fnuz": TP.FLOAT8E4M3FNUZ,
          "float8_e5m2": TP.FLOAT8E5M2, "float8_e5m2fnuz": TP.FLOAT8E5M2FNUZ}
# Overflow edges of all four formats (448, 240, 57344 and the half-way points past them),
# ties, subnormals, zeros of both signs, infinities and NaN.
EDGES = np.array([0.0, -0.0, 1e-9, 2.0 ** -10, 0.3, 1.0625, 1.1875, 239, 240, 247, 248, 255, 447, 448,
                  449, 464, 465, 479, 480, 500, -500, 57343, 57344, 61439, 61440, 61441, 1e6, -1e6,
                  np.inf, -np.inf, np.nan], np.float32)


def _compile(model):
    mod, params = from_onnx(model)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    return kiln.compile(kiln.get_pipeline("default")(mod), "llvm")


def _run(model, *args):
    out = kiln.VirtualMachine(_compile(model), kiln.cpu())["main"](*args)
    return [o.numpy() for o in (out if isinstance(out, (list, tuple)) else [out])]


def _model(nodes, inputs, outputs, inits=(), opset=24):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 11
    return m


def _assert_same_bits(got, want, what):
    """Equal dtypes and bits, except that any NaN matches any NaN."""
    assert got.dtype == want.dtype, what
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan, err_msg=what)
    np.testing.assert_array_equal(got.view(np.uint8)[~nan], want.view(np.uint8)[~nan], err_msg=what)


@pytest.mark.parametrize("src", [TP.FLOAT, TP.FLOAT16])
def test_cast_to_float8_saturating_or_not(src):
    names = [(name, sat) for name in FLOAT8 for sat in (1, 0)]
    nodes = [h.make_node("Cast", ["x"], [f"y{k}"], to=FLOAT8[name], saturate=sat)
             for k, (name, sat) in enumerate(names)]
    outs = [h.make_tensor_value_info(f"y{k}", FLOAT8[name], EDGES.shape) for k, (name, _) in enumerate(names)]
    m = _model(nodes, [h.make_tensor_value_info("x", src, EDGES.shape)], outs)
    with np.errstate(over="ignore"):
        x = EDGES.astype(np.float16) if src == TP.FLOAT16 else EDGES
    want = ReferenceEvaluator(m).run(None, {"x": x})
    for got, ref, (name, sat) in zip(_run(m, x), want, names):
        _assert_same_bits(got, ref, f"Cast {np.dtype(x.dtype).name} -> {name}, saturate={sat}")


def test_cast_to_float8e8m0_each_round_mode():
    x = np.array([1.0, 1.5, 1.25, 1.75, 3.0, 0.75, 2.0 ** 127, 2.0 ** 127 * 1.5, 2.0 ** -127,
                  2.0 ** -127 * 1.5, 2.0 ** -130, 0.0, -0.0, -3.0, np.inf, -np.inf, np.nan, 1e30], np.float32)
    modes = [(mode, sat) for mode in ("up", "down", "nearest") for sat in (1, 0)]
    nodes = [h.make_node("Cast", ["x"], [f"y{k}"], to=TP.FLOAT8E8M0, saturate=sat, round_mode=mode)
             for k, (mode, sat) in enumerate(modes)]
    outs = [h.make_tensor_value_info(f"y{k}", TP.FLOAT8E8M0, x.shape) for k in range(len(modes))]
    m = _model(nodes, [h.make_tensor_value_info("x", TP.FLOAT, x.shape)], outs)
    want = ReferenceEvaluator(m).run(None, {"x": x})
    for got, ref, (mode, sat) in zip(_run(m, x), want, modes):
        np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8),
                                      err_msg=f"round_mode={mode}, saturate={sat}")


def test_bfloat16_operators_compute_in_float32():
    """MatMul, Add (of a bfloat16 initializer) and Relu on bfloat16: each computed in float32 and
    rounded to bfloat16, as ONNX's reference rounds each op's result. Tolerance: a bfloat16 ulp
    of the result, and of the matmul before the add (its float32 sum order is Kiln's own)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 8)).astype(ml_dtypes.bfloat16)
    b = rng.normal(size=(8, 5)).astype(ml_dtypes.bfloat16)
    c = rng.normal(size=(5,)).astype(ml_dtypes.bfloat16)
    m = _model([h.make_node("MatMul", ["a", "b"], ["ab"]), h.make_node("Add", ["ab", "c"], ["s"]),
                h.make_node("Relu", ["s"], ["y"])],
               [h.make_tensor_value_info("a", TP.BFLOAT16, a.shape),
                h.make_tensor_value_info("b", TP.BFLOAT16, b.shape)],
               [h.make_tensor_value_info("y", TP.BFLOAT16, (3, 5))], [nh.from_array(c, "c")])
    (got,) = _run(m, a, b)
    assert got.dtype == ml_dtypes.bfloat16
    ab = (a.astype(np.float32) @ b.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    per_op = np.maximum((ab + c.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32), 0)
    atol = 2 ** -8 * float(np.abs(ab).max())
    np.testing.assert_allclose(got.astype(np.float32), per_op, rtol=2 ** -7, atol=atol)
    (ref,) = ReferenceEvaluator(m).run(None, {"a": a, "b": b})
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2 ** -7, atol=atol)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_quantize_dequantize_float8(name):
    x = (np.linspace(-600, 600, 41) * np.array([1, 1e-3] * 20 + [1])).astype(np.float32)
    scale, zp = np.float32(0.5), np.zeros((), ml_dtypes.__dict__[name])
    m = _model([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
               [h.make_tensor_value_info("x", TP.FLOAT, x.shape)],
               [h.make_tensor_value_info("q", FLOAT8[name], x.shape),
                h.make_tensor_value_info("y", TP.FLOAT, x.shape)],
               [nh.from_array(np.asarray(scale), "s"), nh.from_array(zp, "z")])
    got_q, got_y = _run(m, x)
    want_q, want_y = ReferenceEvaluator(m).run(None, {"x": x})
    _assert_same_bits(got_q, want_q, f"QuantizeLinear to {name}")
    np.testing.assert_array_equal(got_y, want_y)


@pytest.mark.parametrize("dtype,onnx_type", [("bfloat16", TP.BFLOAT16),
                                             ("float8_e4m3fnuz", TP.FLOAT8E4M3FNUZ),
                                             ("float8_e8m0fnu", TP.FLOAT8E8M0),
                                             ("float4_e2m1fn", TP.FLOAT4E2M1)])
def test_narrow_constant_in_the_executable(dtype, onnx_type):
    """A narrow-float initializer returned as it is lives in the executable's constant pool
    with its own DLPack code and comes back bit for bit; added to a run-time input it is
    converted exactly."""
    np_dtype = np.dtype(getattr(ml_dtypes, dtype))
    values = {"float8_e8m0fnu": [0.25, 1, 2, 1024, 2.0 ** -127], "float4_e2m1fn": [-6, -0.5, 0, 1.5, 3]}
    w = np.array(values.get(dtype, [-3.5, 0.0, 0.15625, 100.0, 2.0]), np.float32).astype(np_dtype)
    m = _model([h.make_node("Identity", ["w"], ["y"]), h.make_node("Cast", ["w"], ["w32"], to=TP.FLOAT),
                h.make_node("Add", ["x", "w32"], ["z"])],
               [h.make_tensor_value_info("x", TP.FLOAT, w.shape)],
               [h.make_tensor_value_info("y", onnx_type, w.shape),
                h.make_tensor_value_info("z", TP.FLOAT, w.shape)],
               [nh.from_array(w, "w")])
    ex = _compile(m)
    consts = [c for c in deserialize(ex.blob).constants if c.dtype == np_dtype]
    assert len(consts) == 1 and consts[0].view(np.uint8).tobytes() == w.view(np.uint8).tobytes()
    x = np.arange(w.size, dtype=np.float32)
    y, z = (o.numpy() for o in kiln.VirtualMachine(ex, kiln.cpu())["main"](x))
    assert y.dtype == np_dtype and y.view(np.uint8).tobytes() == w.view(np.uint8).tobytes()
    np.testing.assert_array_equal(z, x + w.astype(np.float32))
