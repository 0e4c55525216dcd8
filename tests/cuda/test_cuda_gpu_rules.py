"""The default GPU rules (kiln.codegen.cuda.gpu_rules): row reductions get one warp per row,
reduced with shfl.sync.bfly, everything else one thread per output element. PTX checks and
ptxas always; the numbers on a GPU (skipped without one)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.codegen.cuda import compile_cuda
from kiln.codegen.cuda.schedule import schedule_for_gpu
from kiln.ir import IRModule
from kiln.runtime import cuda_device

from cuda_programs import assemble, ptxas

REDUCERS = {"sum": (te.sum, np.sum), "max": (te.max, np.max), "min": (te.min, np.min)}


def _row_reduce(kind, rows=None, length=100):
    """B[i] = reduce_k A[i, k] over ``rows`` rows (symbolic n when None) of ``length``."""
    n = te.var("n") if rows is None else rows
    A = te.placeholder((n, length), name="A")
    k = te.reduce_axis((0, length), name="k")
    B = te.compute((n,), lambda i: REDUCERS[kind][0](A[i, k], axis=k), name="B")
    return te.create_prim_func([A, B])


@pytest.mark.parametrize("kind", sorted(REDUCERS))
def test_row_reduction_is_one_warp_per_row_with_shuffles(kind, tmp_path):
    func = schedule_for_gpu(_row_reduce(kind))
    assert dict(func.attrs)["kiln.schedule"] == "gpu_warp_reduce"
    cm = compile_cuda(IRModule({"main": func}), "cuda -arch=sm_80")
    (kernel,) = cm.functions["main"]["kernels"]
    assert kernel["block"] == [32, 1, 1] and kernel["grid"] == ["n", 1, 1]
    assert len(re.findall(r"shfl\.sync\.bfly\.b32", cm.ptx)) == 5
    # Lane 0 alone stores the row's result, after the shuffles.
    body = cm.ptx[cm.ptx.index("shfl.sync.bfly"):]
    assert body.count("st.global") == 1 and "%tid.x" in cm.ptx
    if ptxas() is not None:
        for arch in ("sm_75", "sm_90"):
            r = assemble(compile_cuda(IRModule({"main": func}), f"cuda -arch={arch}").ptx, arch, tmp_path)
            assert r.returncode == 0, r.stderr


def test_many_rows_or_short_rows_stay_one_thread_per_output():
    assert dict(schedule_for_gpu(_row_reduce("sum", rows=100000)).attrs)["kiln.schedule"] == "gpu_spatial"
    assert dict(schedule_for_gpu(_row_reduce("sum", length=16)).attrs)["kiln.schedule"] == "gpu_spatial"


def test_softmax_and_layer_norm_use_warp_reductions(tmp_path):
    """Through the cuda pipeline: the decoder's normalisations reduce rows with warps."""
    x = kiln.nn.spec.Tensor((8, 256), "float32")

    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = kiln.nn.LayerNorm(256)

        def forward(self, x):
            return kiln.nn.functional.softmax(self.norm(x), dim=-1)
    mod, _ = Net().export({"forward": {"x": x}})
    ex = kiln.compile(mod, target="cuda -arch=sm_80", pipeline="default")
    assert ex.spec.cuda.ptx.count("shfl.sync.bfly") >= 5 * 3     # mean, variance, max, sum
    if ptxas() is not None:
        r = assemble(ex.spec.cuda.ptx, "sm_80", tmp_path)
        assert r.returncode == 0, r.stderr


def _matmul(kind, m=64, n=48, k=32, batch=4):
    """C = A @ B as ``kind``: "matmul" (A[i, k] B[k, j]), "dense" (B[j, k]) or "batch"."""
    kk = te.reduce_axis((0, k), name="k")
    if kind == "batch":
        A, B = te.placeholder((batch, m, k), name="A"), te.placeholder((batch, k, n), name="B")
        C = te.compute((batch, m, n), lambda z, i, j: te.sum(A[z, i, kk] * B[z, kk, j], axis=kk), name="C")
    elif kind == "dense":
        A, B = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="B")
        C = te.compute((m, n), lambda i, j: te.sum(A[i, kk] * B[j, kk], axis=kk), name="C")
    else:
        A, B = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
        C = te.compute((m, n), lambda i, j: te.sum(A[i, kk] * B[kk, j], axis=kk), name="C")
    return te.create_prim_func([A, B, C])


def _numpy_matmul(kind, a, b):
    return a @ b.T if kind == "dense" else a @ b


@pytest.mark.parametrize("kind", ["matmul", "dense", "batch"])
def test_matmul_is_tiled_through_shared_memory(kind, tmp_path):
    func = schedule_for_gpu(_matmul(kind))
    assert dict(func.attrs)["kiln.schedule"] == "gpu_matmul_tiles"
    cm = compile_cuda(IRModule({"main": func}), "cuda -arch=sm_80")
    (kernel,) = cm.functions["main"]["kernels"]
    assert kernel["block"] == [16, 16, 1]
    assert kernel["grid"] == [3, 4, 4 if kind == "batch" else 1]
    # Two 16 x 16 float tiles in shared memory, written and read between barriers.
    assert len(re.findall(r"\.shared \.align \d+ \.b8 \S+\[1024\]", cm.ptx)) == 2
    assert "st.shared" in cm.ptx and "ld.shared" in cm.ptx and "bar.sync" in cm.ptx
    if ptxas() is not None:
        r = assemble(cm.ptx, "sm_80", tmp_path)
        assert r.returncode == 0, r.stderr
        assert "2048 bytes smem" in r.stderr and "0 bytes stack frame" in r.stderr   # acc in a register


def test_matmul_not_a_multiple_of_16_is_not_tiled():
    assert dict(schedule_for_gpu(_matmul("matmul", m=1)).attrs)["kiln.schedule"] == "gpu_warp_reduce"
    assert dict(schedule_for_gpu(_matmul("dense", k=40)).attrs)["kiln.schedule"] == "gpu_warp_reduce"
    assert dict(schedule_for_gpu(_matmul("dense", k=8)).attrs)["kiln.schedule"] == "gpu_spatial"


@pytest.mark.skipif(not cuda_device.is_available(0), reason="no CUDA driver/GPU on this machine")
@pytest.mark.parametrize("kind", ["matmul", "dense", "batch"])
def test_tiled_matmul_numbers_on_the_gpu(kind):
    gpu = kiln.cuda(0)
    func = _matmul(kind)
    rt = kiln.build(IRModule({"main": schedule_for_gpu(func)}), "cuda")
    rng = np.random.default_rng(1)
    a, b = [rng.standard_normal(tuple(int(d) for d in p.shape)).astype("float32") for p in func.params[:2]]
    want = _numpy_matmul(kind, a, b)
    c = kiln.nd.empty(want.shape, "float32", gpu)
    rt(kiln.nd.array(a, gpu), kiln.nd.array(b, gpu), c)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not cuda_device.is_available(0), reason="no CUDA driver/GPU on this machine")
@pytest.mark.parametrize("kind", sorted(REDUCERS))
@pytest.mark.parametrize("rows,length", [(1, 32), (7, 100), (300, 1000)])
def test_warp_reduction_numbers_on_the_gpu(kind, rows, length):
    gpu = kiln.cuda(0)
    rt = kiln.build(IRModule({"main": schedule_for_gpu(_row_reduce(kind, length=length))}), "cuda")
    a = np.random.default_rng(rows).standard_normal((rows, length)).astype("float32")
    b = kiln.nd.empty((rows,), "float32", gpu)
    rt(kiln.nd.array(a, gpu), b)
    np.testing.assert_allclose(b.numpy(), REDUCERS[kind][1](a, axis=1), rtol=1e-5, atol=1e-5)
