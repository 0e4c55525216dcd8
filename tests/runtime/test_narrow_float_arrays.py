"""kiln.nd arrays of bfloat16 and the float8 formats: ml_dtypes arrays in and out (numpy's own
DLPack refuses these dtypes), their DLPack codes, a zero-copy numpy view that keeps the array
alive, and bfloat16 shared with PyTorch through DLPack."""
from __future__ import annotations

import gc

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import kiln  # noqa: E402
from kiln.runtime._base import lib  # noqa: E402

CODES = {"bfloat16": (lib.kDLBfloat, 16), "float8_e4m3fn": (lib.kDLFloat8_e4m3fn, 8),
         "float8_e4m3fnuz": (lib.kDLFloat8_e4m3fnuz, 8), "float8_e5m2": (lib.kDLFloat8_e5m2, 8),
         "float8_e5m2fnuz": (lib.kDLFloat8_e5m2fnuz, 8), "float8_e8m0fnu": (lib.kDLFloat8_e8m0fnu, 8)}


def _values(name):
    return np.array([[0.5, 1.0, 2.0], [4.0, 0.25, 8.0]], np.float32).astype(getattr(ml_dtypes, name))


@pytest.mark.parametrize("name", list(CODES))
def test_round_trip_and_dlpack_code(name):
    a = _values(name)
    arr = kiln.nd.array(a)
    assert arr.dtype == name and arr.shape == (2, 3) and arr.nbytes == a.nbytes
    assert (arr._dl.dtype.code, arr._dl.dtype.bits) == CODES[name]
    back = arr.numpy()
    assert back.dtype == a.dtype and back.tobytes() == a.tobytes()
    assert name in repr(arr)


def test_numpy_view_shares_memory_and_keeps_the_array_alive():
    arr = kiln.nd.array(_values("bfloat16"))
    view = arr.numpy(copy=False)
    copy = arr.numpy()
    view[0, 0] = 3.0
    assert arr.numpy()[0, 0] == 3.0 and copy[0, 0] == 0.5
    del arr
    gc.collect()
    assert view.astype(np.float32).tolist() == [[3.0, 1.0, 2.0], [4.0, 0.25, 8.0]]


def test_empty_by_name():
    arr = kiln.nd.empty((4,), "float8_e5m2")
    assert arr.dtype == "float8_e5m2" and arr.nbytes == 4 and arr.numpy().dtype == ml_dtypes.float8_e5m2


def test_bfloat16_shared_with_torch():
    torch = pytest.importorskip("torch")
    arr = kiln.nd.array(_values("bfloat16"))
    t = torch.from_dlpack(arr)
    assert t.dtype == torch.bfloat16
    assert t.float().tolist() == [[0.5, 1.0, 2.0], [4.0, 0.25, 8.0]]
    back = kiln.nd.from_dlpack(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert back.dtype == "bfloat16" and back.numpy().astype(np.float32).tolist() == [1.5, -2.0]


@pytest.mark.parametrize("name", list(CODES) + ["float4_e2m1fn"])
def test_array_from_python_floats_by_dtype_name(name):
    values = [0.5, 2.0, 4.0] if name == "float8_e8m0fnu" else [0.5, -2.0, 4.0]   # e8m0: no sign
    arr = kiln.nd.array(values, dtype=name)
    assert arr.dtype == name
    assert arr.numpy().astype(np.float32).tolist() == values
