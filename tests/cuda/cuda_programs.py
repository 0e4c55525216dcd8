"""Small scheduled tensor programs for the CUDA tests (no test here: shared by the PTX tests,
which always run, and the GPU tests, which need a GPU)."""
from __future__ import annotations

import shutil
import subprocess

import kiln
from kiln import te
from kiln.ir import IRModule


def add_one(n=8, factors=(2, 2, 2)):
    """SEED_FLOWS section A: B = A + 1, split in three, outer loop on blocks, last on threads."""
    A = te.placeholder((n,), dtype="float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = kiln.tir.Schedule(IRModule({"main": te.create_prim_func([A, B])}))
    (i,) = sch.get_loops(sch.get_block("B"))
    i0, i1, i2 = sch.split(i, factors=list(factors))
    sch.reorder(i0, i2, i1)
    sch.bind(i0, "blockIdx.x")
    sch.bind(i2, "threadIdx.x")
    return sch


def symbolic_add_one(threads=64):
    """B = A + 1 over a symbolic length n: a guarded split, grid = ceil(n / threads)."""
    n = te.var("n")
    A = te.placeholder((n,), dtype="float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = kiln.tir.Schedule(IRModule({"main": te.create_prim_func([A, B])}))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, factors=[None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch


def shared_matmul(n=64, tile=16):
    """C = A @ B with 16 x 16 thread blocks; each block stages its rows of A through shared
    memory, one tile of k at a time."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = kiln.tir.Schedule(IRModule({"main": te.create_prim_func([A, B, C])}))
    blk = sch.get_block("C")
    i, j, kk = sch.get_loops(blk)
    bi, ti = sch.split(i, factors=[None, tile])
    bj, tj = sch.split(j, factors=[None, tile])
    ko, ki = sch.split(kk, factors=[None, tile])
    sch.reorder(bi, bj, ti, tj, ko, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    a_shared = sch.cache_read(blk, 0, "shared")
    sch.compute_at(a_shared, ko)
    return sch


def ptxas():
    """The path of NVIDIA's PTX assembler, or None (it comes with the CUDA toolkit, or the
    nvidia-cuda-nvcc wheel: pip install 'kiln[cuda]')."""
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import nvidia.cuda_nvcc as wheel   # the wheel's layout: nvidia/cuda_nvcc/bin/ptxas
        import os
        for base in getattr(wheel, "__path__", []):
            path = os.path.join(base, "bin", "ptxas")
            if os.path.exists(path):
                return path
    except ImportError:
        pass
    return None


def assemble(ptx: str, arch: str, tmp_path) -> subprocess.CompletedProcess:
    """Run ptxas on ``ptx`` for ``arch``; the completed process (its stderr is the log)."""
    src = tmp_path / "kernels.ptx"
    src.write_text(ptx)
    return subprocess.run([ptxas(), f"-arch={arch}", "-v", str(src), "-o",
                           str(tmp_path / "kernels.cubin")], capture_output=True, text=True)
