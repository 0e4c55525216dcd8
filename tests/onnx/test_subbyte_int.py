"""The packed sub-byte integers int4/uint4/int2/uint2: packing (every value, odd element counts
and the last half-filled byte) against ONNX's own packing, compiled kernels that read and write
packed elements (Cast both ways, a Transpose that stores out of order, a tensor large enough
that its loop would be parallel and vectorized), packed constants in an executable, and the
runtime's numpy interop. References: ml_dtypes' astype, onnx.numpy_helper, onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln import subbyte  # noqa: E402
from kiln.executable.format import deserialize  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

ONNX_TYPE = {"int4": TP.INT4, "uint4": TP.UINT4, "int2": TP.INT2, "uint2": TP.UINT2}
NAMES = list(ONNX_TYPE)


def every_value(name):
    """Each value of the dtype once, lowest first."""
    bits = subbyte.BITS[name]
    lo = 0 if name.startswith("u") else -(1 << (bits - 1))
    return np.arange(lo, lo + (1 << bits)).astype(subbyte.numpy_dtype(name))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 16, 17])
def test_pack_matches_onnx_and_unpacks(name, n):
    a = np.resize(every_value(name), n).astype(subbyte.numpy_dtype(name))
    packed = subbyte.pack(a)
    assert packed.dtype == np.uint8 and packed.size == subbyte.packed_nbytes(name, n)
    t = nh.from_array(a)
    onnx_bytes = t.raw_data if t.raw_data else bytes(np.asarray(t.int32_data, np.uint8))
    assert packed.tobytes() == onnx_bytes
    back = subbyte.unpack(packed, name, a.shape)
    assert back.dtype == a.dtype and np.array_equal(back.astype(np.int8), a.astype(np.int8))


def test_pack_leaves_padding_bits_zero():
    packed = subbyte.pack(np.array([-1, -1, -1], ml_dtypes.int2))
    assert packed.tobytes() == bytes([0b00111111])


def _compile(model):
    mod, params = from_onnx(model)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    return kiln.compile(kiln.get_pipeline("default")(mod), "llvm")


def _model(nodes, inputs, outputs, inits=(), opset=23):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 11
    return m


def _as_int(a):
    return np.asarray(a).astype(np.int16)


@pytest.mark.parametrize("name", NAMES)
def test_cast_round_trip_every_value(name):
    """float32 -> packed dtype -> float32 over every value and the wrap-around past the range
    (ONNX Cast wraps like ml_dtypes' astype), 3 x 7 elements so a row ends mid-byte."""
    shape = (3, 7)
    bits = subbyte.BITS[name]
    x = (np.arange(np.prod(shape)) - (1 << bits)).astype(np.float32).reshape(shape)
    m = _model([h.make_node("Cast", ["x"], ["q"], to=ONNX_TYPE[name]),
                h.make_node("Cast", ["q"], ["y"], to=TP.FLOAT)],
               [h.make_tensor_value_info("x", TP.FLOAT, shape)],
               [h.make_tensor_value_info("q", ONNX_TYPE[name], shape),
                h.make_tensor_value_info("y", TP.FLOAT, shape)])
    vm = kiln.VirtualMachine(_compile(m), kiln.cpu())
    q, y = vm["main"](x)
    want = x.astype(subbyte.numpy_dtype(name))
    assert q.dtype == name and q.nbytes == subbyte.packed_nbytes(name, x.size)
    q = q.numpy()
    assert q.dtype == want.dtype and np.array_equal(_as_int(q), _as_int(want))
    np.testing.assert_array_equal(y.numpy(), want.astype(np.float32))


@pytest.mark.parametrize("name", ["int4", "uint2"])
def test_transpose_stores_out_of_order(name):
    """A transpose of a packed input (3 x 5, odd rows) writes fields of each output byte from
    different iterations: the read-modify-write must keep the neighbours."""
    x = np.resize(every_value(name), (3, 5)).astype(subbyte.numpy_dtype(name))
    m = _model([h.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
               [h.make_tensor_value_info("x", ONNX_TYPE[name], x.shape)],
               [h.make_tensor_value_info("y", ONNX_TYPE[name], (5, 3))])
    got = kiln.VirtualMachine(_compile(m), kiln.cpu())["main"](x).numpy()
    assert np.array_equal(_as_int(got), _as_int(x.T))


def test_large_cast_is_correct_where_the_loop_would_be_parallel():
    """513 x 129 float32 to int4 and back: the default schedule parallelizes and vectorizes a
    loop this size; packed stores must still be exact."""
    rng = np.random.default_rng(0)
    x = rng.integers(-30, 30, size=(513, 129)).astype(np.float32)
    m = _model([h.make_node("Cast", ["x"], ["q"], to=TP.INT4)],
               [h.make_tensor_value_info("x", TP.FLOAT, x.shape)],
               [h.make_tensor_value_info("q", TP.INT4, x.shape)])
    got = kiln.VirtualMachine(_compile(m), kiln.cpu(), num_threads=2)["main"](x).numpy()
    assert np.array_equal(_as_int(got), _as_int(x.astype(ml_dtypes.int4)))


def test_compare_and_reshape_packed_inputs():
    """Equal, Flatten and Unsqueeze on int4 inputs (their bounds come from the dtype's width:
    numpy's iinfo knows no int4)."""
    a = np.array([[1, -2, 3], [4, 5, -8], [7, 0, -1]], ml_dtypes.int4)
    b = np.array([[1, 2, 3], [-4, 5, -8], [7, 1, -1]], ml_dtypes.int4)
    m = _model([h.make_node("Equal", ["a", "b"], ["y"]), h.make_node("Flatten", ["a"], ["f"], axis=0),
                h.make_node("Unsqueeze", ["b", "ax"], ["u"])],
               [h.make_tensor_value_info("a", TP.INT4, a.shape), h.make_tensor_value_info("b", TP.INT4, b.shape)],
               [h.make_tensor_value_info("y", TP.BOOL, None), h.make_tensor_value_info("f", TP.INT4, None),
                h.make_tensor_value_info("u", TP.INT4, None)],
               [nh.from_array(np.array([1], np.int64), "ax")])
    y, f, u = kiln.VirtualMachine(_compile(m), kiln.cpu())["main"](a, b)
    np.testing.assert_array_equal(y.numpy(), _as_int(a) == _as_int(b))
    assert f.shape == (1, 9) and np.array_equal(_as_int(f.numpy()), _as_int(a).reshape(1, 9))
    assert u.shape == (3, 1, 3) and np.array_equal(_as_int(u.numpy())[:, 0], _as_int(b))


def test_constants_fold_through_packed_dtypes():
    """The importer folds a Reshape of an int4 initializer and a Cast of a float32 initializer
    to int4 (wrapping: 9 -> -7) in numpy; the folded values match ml_dtypes."""
    w = np.array([[1, -2, 3], [4, 5, -8]], ml_dtypes.int4)
    c = np.array([[9, -9], [1, 2], [3, 4]], np.float32)
    m = _model([h.make_node("Reshape", ["w", "s"], ["r"]), h.make_node("Cast", ["r"], ["rf"], to=TP.FLOAT),
                h.make_node("Cast", ["c"], ["q"], to=TP.INT4), h.make_node("Cast", ["q"], ["qf"], to=TP.FLOAT),
                h.make_node("Add", ["rf", "x"], ["y0"]), h.make_node("Add", ["y0", "qf"], ["y"])],
               [h.make_tensor_value_info("x", TP.FLOAT, (3, 2))], [h.make_tensor_value_info("y", TP.FLOAT, None)],
               [nh.from_array(w, "w"), nh.from_array(np.array([3, 2], np.int64), "s"), nh.from_array(c, "c")])
    x = np.full((3, 2), 0.5, np.float32)
    y = kiln.VirtualMachine(_compile(m), kiln.cpu())["main"](x).numpy()
    want = _as_int(w).reshape(3, 2) + x + c.astype(ml_dtypes.int4).astype(np.float32)
    np.testing.assert_array_equal(y, want)


def test_packed_constant_in_the_executable():
    """An int4 initializer of odd size is stored packed in the blob, read back equal by the
    Python reader, and concatenated after a run-time input by the compiled code."""
    w = np.array([[-8, -3, 0, 5, 7], [1, 2, -1, 6, -7], [3, -4, 4, -5, 0]], ml_dtypes.int4)
    x = np.array([[7, -1, 2, -8, 3]], ml_dtypes.int4)
    m = _model([h.make_node("Concat", ["x", "w"], ["y"], axis=0)],
               [h.make_tensor_value_info("x", TP.INT4, x.shape)],
               [h.make_tensor_value_info("y", TP.INT4, (4, 5))],
               [nh.from_array(w, "w")])
    ex = _compile(m)
    consts = [c for c in deserialize(ex.blob).constants if c.dtype == np.dtype(ml_dtypes.int4)]
    assert len(consts) == 1 and np.array_equal(_as_int(consts[0]), _as_int(w))
    y = kiln.VirtualMachine(ex, kiln.cpu())["main"](x).numpy()
    assert np.array_equal(_as_int(y), _as_int(np.concatenate([x, w])))


def test_inspect_reports_packed_sizes(tmp_path, capsys):
    """``kiln inspect`` sizes packed constants and inputs by their bits: 15 int4 are 8 bytes."""
    from kiln.cli import main
    m = _model([h.make_node("Concat", ["x", "w"], ["y"], axis=0)],
               [h.make_tensor_value_info("x", TP.INT4, (1, 5))], [h.make_tensor_value_info("y", TP.INT4, (4, 5))],
               [nh.from_array(np.zeros((3, 5), ml_dtypes.int4), "w")])
    path = _compile(m).export_library(str(tmp_path / "int4.so"))
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "constants: 1 (8 B)" in out and "input 0: x  int4(1, 5)  (3 B)" in out, out


@pytest.mark.parametrize("name", NAMES)
def test_ndarray_round_trip(name):
    a = np.resize(every_value(name), (2, 3, 3)).astype(subbyte.numpy_dtype(name))
    arr = kiln.nd.array(a)
    assert arr.dtype == name and arr.shape == a.shape
    assert arr.nbytes == subbyte.packed_nbytes(name, a.size)
    assert np.array_equal(_as_int(arr.numpy()), _as_int(a))
    assert np.array_equal(_as_int(np.asarray(arr)), _as_int(a))   # __array__: a copy
    assert str(arr) == str(a) and repr(arr) == f"kiln.nd.array({np.array2string(a, separator=', ', prefix='kiln.nd.array(')}, dtype={name})"
    with pytest.raises(BufferError):
        arr.numpy(copy=False)     # packed: numpy cannot share this memory
    out = kiln.nd.empty(a.shape, name).copyfrom(a[::-1])
    assert np.array_equal(_as_int(out.numpy()), _as_int(a[::-1]))
