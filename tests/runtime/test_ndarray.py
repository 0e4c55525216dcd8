"""NDArray and DLPack: creation, conversion, zero-copy exchange in both directions, capsule
protocol versions, and lifetimes (the producer stays alive exactly as long as needed)."""

import gc
import weakref

import numpy as np
import pytest

from kiln import runtime
from kiln.runtime import KilnError, nd
from kiln.runtime._base import ffi, lib
from kiln.runtime.module import _from_value, _to_value

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
          "uint32", "uint64", "bool", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_array_round_trip(dtype):
    src = (np.random.default_rng(0).random((3, 5)) * 100).astype(dtype)
    a = nd.array(src)
    assert a.shape == (3, 5) and a.ndim == 2 and a.dtype == dtype
    assert a.nbytes == src.nbytes and a.device == runtime.cpu()
    out = a.numpy()
    assert out.dtype == src.dtype
    np.testing.assert_array_equal(out, src)
    out[0, 0] = 0  # a copy by default
    np.testing.assert_array_equal(a.numpy(), src)


def test_array_copies_and_aligns():
    src = np.arange(12, dtype="float32").reshape(3, 4)[:, ::2]  # non-contiguous source
    a = nd.array(src)
    src[...] = -1
    np.testing.assert_array_equal(a.numpy(), np.arange(12, dtype="float32").reshape(3, 4)[:, ::2])
    assert a._dl.data and int(ffi.cast("uintptr_t", a._dl.data)) % 64 == 0
    big_endian = np.arange(4, dtype=">i4")
    np.testing.assert_array_equal(nd.array(big_endian).numpy(), [0, 1, 2, 3])
    assert nd.array([[1.5, 2.5]], dtype="float32").dtype == "float32"
    assert nd.array(3).shape == ()


def test_empty():
    a = nd.empty((2, 3), "int16")
    assert (a.shape, a.dtype) == ((2, 3), "int16")
    assert nd.empty(4).shape == (4,)
    assert nd.empty((0, 5)).numpy().shape == (0, 5)
    with pytest.raises(KilnError, match="negative extent in shape"):
        nd.empty((2, -1))
    with pytest.raises(KilnError, match="cannot allocate on device cuda:0") as e:
        nd.empty((2,), device=runtime.Device("cuda", 0))
    assert e.value.status == lib.KILN_ERR_UNSUPPORTED
    with pytest.raises(ValueError, match="unsupported dtype"):
        nd.empty((2,), "float8")
    assert nd.empty((2,), "float32x4").dtype == "float32x4"


def test_numpy_view_shares_memory_with_ndarray():
    a = nd.array(np.zeros(4, "float32"))
    view = np.from_dlpack(a)
    view[2] = 7
    assert a.numpy()[2] == 7  # numpy -> kiln
    a.copyfrom(np.arange(4, dtype="float32"))
    assert view.tolist() == [0, 1, 2, 3]  # kiln -> numpy
    assert a.numpy(copy=False).ctypes.data == view.ctypes.data


def test_from_dlpack_shares_memory_with_numpy():
    src = np.arange(6, dtype="float64").reshape(2, 3)
    a = nd.from_dlpack(src)
    assert a.shape == (2, 3) and a.dtype == "float64"
    src[1, 2] = 100  # numpy -> kiln
    assert a.numpy()[1, 2] == 100
    np.from_dlpack(a)[0, 0] = -5  # kiln -> numpy, through a second exchange
    assert src[0, 0] == -5
    assert nd.from_dlpack(a) is a
    strided = nd.from_dlpack(np.arange(10.0)[::2])  # strides travel too
    np.testing.assert_array_equal(strided.numpy(), [0, 2, 4, 6, 8])


def test_capsule_versions():
    a = nd.array(np.arange(3, dtype="int32"))
    legacy = a.__dlpack__()
    versioned = a.__dlpack__(max_version=(1, 1))
    assert "dltensor" in repr(legacy) and "dltensor_versioned" not in repr(legacy)
    assert "dltensor_versioned" in repr(versioned)
    assert a.__dlpack__(max_version=(0, 8)) is not None  # an old consumer gets the legacy one
    assert a.__dlpack_device__() == (1, 0)
    for capsule in (legacy, versioned):  # raw capsules are accepted too, once
        assert nd.from_dlpack(capsule).numpy().tolist() == [0, 1, 2]
        with pytest.raises(KilnError, match="unconsumed"):
            nd.from_dlpack(capsule)
    copied = np.from_dlpack(a, copy=True)
    copied[0] = 9
    assert a.numpy()[0] == 0
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        a.__dlpack__(stream=1)


def test_read_only_numpy_array_stays_read_only():
    src = np.arange(4.0)
    src.flags.writeable = False
    a = nd.from_dlpack(src)
    assert lib.kiln_tensor_is_read_only(a._handle) == 1
    assert not np.from_dlpack(a).flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        a.__dlpack__()  # the legacy capsule has no read-only flag
    assert np.from_dlpack(a, copy=True).flags.writeable


def _released(ref):
    gc.collect()
    return ref() is None


def test_lifetimes_numpy_to_kiln_to_numpy():
    src = np.arange(5.0)
    ref = weakref.ref(src)
    a = nd.from_dlpack(src)
    view = np.from_dlpack(a)
    del src, a
    assert not _released(ref)  # the kiln tensor keeps the numpy producer alive
    assert view.tolist() == [0, 1, 2, 3, 4]
    del view
    assert _released(ref)  # and lets it go: no leak along the chain


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_unconsumed_capsule_releases_its_tensor(max_version):
    src = np.arange(5.0)
    ref = weakref.ref(src)
    capsule = nd.from_dlpack(src).__dlpack__(max_version=max_version)
    del src
    assert not _released(ref)
    del capsule  # never consumed: its destructor calls the deleter
    assert _released(ref)


def test_function_arguments_release_wrapped_arrays(lib_path):
    mod = runtime.load_module(lib_path)
    a, out = np.zeros(8, "float32"), np.zeros(8, "float32")
    refs = weakref.ref(a), weakref.ref(out)
    mod["main"](a, out)
    del a, out
    assert all(_released(r) for r in refs)


def test_values_round_trip_through_the_runtime(lib_path):
    """Each Python argument becomes a borrowed kiln_value_t, is copied by the runtime into an
    owned one (as a function result would be), and converts back."""
    mod = runtime.load_module(lib_path)
    arr = nd.array(np.arange(3.0))
    for arg in [None, 7, -2**63, 2.5, "héllo", True, np.int32(4), np.float32(0.5), arr, mod,
                mod["scale"]]:
        borrowed, owned = ffi.new("kiln_value_t*"), ffi.new("kiln_value_t*")
        keep = []
        _to_value(arg, borrowed[0], keep, mod["scale"], 0)
        assert lib.kiln_value_copy(borrowed, owned) == lib.KILN_OK
        back = _from_value(owned)
        if isinstance(arg, runtime.NDArray):
            assert back.numpy().tolist() == [0, 1, 2] and back._handle == arr._handle
        elif isinstance(arg, runtime.Module):
            assert back.function_names == mod.function_names
        elif isinstance(arg, runtime.Function):
            assert back.name == "scale"
        else:  # bools and numpy scalars arrive as plain ints and floats
            expected = arg.item() if isinstance(arg, np.generic) else arg
            expected = int(expected) if isinstance(expected, bool) else expected
            assert back == expected and type(back) is type(expected)
    with pytest.raises(OverflowError):
        _to_value(2**63, ffi.new("kiln_value_t*")[0], [], mod["scale"], 0)


def test_torch_zero_copy_both_ways():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    a = nd.from_dlpack(t)
    t[0] = 42
    assert a.numpy()[0] == 42
    back = torch.from_dlpack(a)
    back[1] = -1
    assert t[1] == -1 and a.numpy()[1] == -1
