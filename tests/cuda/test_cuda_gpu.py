"""Kernels run on an NVIDIA GPU and checked against numpy. Every test here needs a GPU and
its driver, and is skipped without them (docs/cuda.md: how to run them on a GPU machine)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import cuda_device

from cuda_programs import add_one, shared_matmul, symbolic_add_one

pytestmark = pytest.mark.skipif(not cuda_device.is_available(0),
                                reason="no CUDA driver/GPU on this machine")


def test_section_a_runs_and_copies_back():
    gpu = kiln.cuda(0)
    rt = kiln.build(add_one().mod, target="cuda")
    a = kiln.nd.array(np.arange(8).astype("float32"), gpu)
    b = kiln.nd.array(np.zeros((8,)).astype("float32"), gpu)
    assert a.device == gpu and b.device == gpu
    rt(a, b)
    np.testing.assert_array_equal(b.numpy(), np.arange(8, dtype="float32") + 1)
    np.testing.assert_array_equal(a.numpy(), np.arange(8, dtype="float32"))
    assert "cuda" in repr(b)


def test_empty_then_filled_by_a_kernel():
    rt = kiln.build(add_one().mod, target="cuda -arch=sm_80")
    a = kiln.nd.array(np.full(8, 41, "float32"), kiln.cuda(0))
    b = kiln.nd.empty((8,), "float32", kiln.cuda(0))
    rt(a, b)
    np.testing.assert_array_equal(b.numpy(), np.full(8, 42, "float32"))


def test_shared_memory_matmul_matches_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 128, 128), dtype="float32")
    rt = kiln.build(shared_matmul(n=128, tile=16).mod, target="cuda")
    gpu = kiln.cuda(0)
    c = kiln.nd.empty((128, 128), "float32", gpu)
    rt(kiln.nd.array(x, gpu), kiln.nd.array(y, gpu), c)
    np.testing.assert_allclose(c.numpy(), x @ y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1, 63, 64, 1000])
def test_symbolic_length_and_guarded_tail(n):
    rt = kiln.build(symbolic_add_one(threads=64).mod, target="cuda")
    gpu = kiln.cuda(0)
    x = np.arange(n, dtype="float32")
    b = kiln.nd.empty((n,), "float32", gpu)
    rt(kiln.nd.array(x, gpu), b)
    np.testing.assert_array_equal(b.numpy(), x + 1)


def test_argument_checks():
    rt = kiln.build(add_one().mod, target="cuda")
    gpu = kiln.cuda(0)
    with pytest.raises(ValueError, match="expected shape \\(8,\\)"):
        rt(kiln.nd.empty((9,), "float32", gpu), kiln.nd.empty((8,), "float32", gpu))
    with pytest.raises(TypeError, match="expected dtype float32, got int32"):
        rt(kiln.nd.empty((8,), "int32", gpu), kiln.nd.empty((8,), "float32", gpu))


def test_dlpack_with_torch_cuda_tensors():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA (the pinned test torch is the CPU build)")
    a = torch.arange(8, dtype=torch.float32, device="cuda")
    b = torch.zeros(8, dtype=torch.float32, device="cuda")
    rt = kiln.build(add_one().mod, target="cuda")
    rt(kiln.nd.from_dlpack(a), kiln.nd.from_dlpack(b))
    assert b.cpu().tolist() == [float(i + 1) for i in range(8)]
    back = torch.from_dlpack(kiln.nd.array(np.ones(4, "float32"), kiln.cuda(0)))
    assert back.is_cuda and back.cpu().tolist() == [1.0] * 4
