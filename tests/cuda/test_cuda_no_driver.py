"""The CUDA device where there is no NVIDIA driver (this test's premise; skipped where there is
one): opening it fails with a clear error, and nothing else changes."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln
from kiln.runtime import KilnError, lib


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(_has_driver(), reason="libcuda.so.1 is installed here: these "
                                "tests check the machine without a CUDA driver")

NO_DRIVER = "no CUDA driver: libcuda.so.1 not found"


def test_arrays_on_cuda_need_the_driver():
    gpu = kiln.cuda(0)          # naming the device needs no driver
    assert repr(gpu) == "cuda(0)" and gpu.device_type == lib.kDLCUDA
    with pytest.raises(KilnError, match=f"cannot allocate on device cuda:0: {NO_DRIVER}") as e:
        kiln.nd.array(np.arange(8, dtype="float32"), gpu)
    assert e.value.status == lib.KILN_ERR_UNSUPPORTED
    with pytest.raises(KilnError, match=NO_DRIVER):
        kiln.nd.empty((8,), "float32", kiln.cuda(1))
    assert not kiln.runtime.cuda_device.is_available(0)


def test_c_api_reports_through_the_last_error():
    from kiln.runtime import ffi
    out = ffi.new("kiln_cuda_device_t**")
    assert lib.kiln_cuda_device_open(0, out) == lib.KILN_ERR_UNSUPPORTED
    assert ffi.string(lib.kiln_last_error()).decode().startswith(NO_DRIVER)
    assert out[0] == ffi.NULL
    assert lib.kiln_cuda_device_open(-1, out) == lib.KILN_ERR_INVALID_ARGUMENT
    assert "negative device ordinal" in ffi.string(lib.kiln_last_error()).decode()


def test_cpu_work_is_unchanged_after_a_failed_open():
    with pytest.raises(KilnError):
        kiln.nd.empty((2,), "float32", kiln.cuda(0))
    a = kiln.nd.array(np.arange(4, dtype="float32"))
    assert a.device == kiln.cpu() and a.numpy().tolist() == [0, 1, 2, 3]
    # building for CUDA needs no driver either; running it does
    from cuda_programs import add_one
    rt = kiln.build(add_one().mod, target="cuda")
    with pytest.raises(ValueError, match="argument 0 'A' is on cpu\\(0\\)"):
        rt(a, a)
