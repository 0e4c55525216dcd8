"""float32 matmul C = A @ B through Kiln's codegen, against numpy in the same process.

The schedule is the classic packed-panel GEMM (GotoBLAS/BLIS): B is packed, one panel of
NR columns at a time, into a contiguous [K, NR] strip that stays in L2 while every row block
of A streams past it; the MR x NR block of C lives in registers (a local buffer, fully
unrolled over rows and vectorized over columns) across the whole k loop.
"""
from __future__ import annotations

import numpy as np

import kiln
from kiln import te

MR, NR = 4, 16   # 4 x 16 floats = 8 AVX2 accumulators (4 x 1 on AVX-512): FMA-bound, no spills


def matmul_module(n: int) -> kiln.IRModule:
    """The algorithm: B repacked into panels Bp[jo, k, ji] = B[k, jo*NR + ji], then C."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    Bp = te.compute((n // NR, n, NR), lambda jo, k, ji: B[k, jo * NR + ji], name="Bp")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * Bp[j // NR, k, j % NR], axis=k), name="C")
    return kiln.IRModule({"main": te.create_prim_func([A, B, C])})


def schedule(mod: kiln.IRModule) -> kiln.Schedule:
    sch = kiln.Schedule(mod)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, factors=[None, NR])
    i0, i1 = sch.split(i, factors=[None, MR])
    sch.reorder(j0, i0, k, i1, j1)
    # Accumulate the MR x NR tile in a register-sized local buffer, written back once per tile.
    c_local = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(c_local, i0)
    init = sch.decompose_reduction(c, k)
    sch.unroll(i1)
    sch.vectorize(j1)
    init_rows, init_cols = sch.get_loops(init)[-2:]
    sch.unroll(init_rows)
    sch.vectorize(init_cols)
    w_loops = sch.get_loops(c_local)
    sch.vectorize(w_loops[-1])
    # Pack one panel of B right before the row blocks that use it.
    pack = sch.get_block("Bp")
    sch.compute_at(pack, j0)
    sch.vectorize(sch.get_loops(pack)[-1])
    sch.parallel(j0)
    return sch


def run(sizes=(512, 1024), threads=(1, 2), repeat: int = 10) -> list[dict]:
    """Benchmark each size at each thread count; returns one row per (size, threads)."""
    from threadpoolctl import threadpool_limits

    from harness import time_best

    rows = []
    for n in sizes:
        rt = kiln.build(schedule(matmul_module(n)).mod, target="llvm")
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        ka, kb, kc = kiln.nd.array(a), kiln.nd.array(b), kiln.nd.empty((n, n), "float32")
        rt(ka, kb, kc)
        np.testing.assert_allclose(kc.numpy(), a @ b, rtol=1e-3, atol=1e-3)
        flops = 2.0 * n ** 3
        for t in threads:
            kiln.runtime.set_num_threads(t)
            t_kiln = time_best(lambda: rt(ka, kb, kc), repeat)
            with threadpool_limits(t):
                t_np = time_best(lambda: a @ b, repeat)
            rows.append({"bench": f"matmul {n}^3 fp32", "threads": t,
                         "kiln_gflops": flops / t_kiln / 1e9, "numpy_gflops": flops / t_np / 1e9,
                         "kiln_ms": t_kiln * 1e3, "numpy_ms": t_np * 1e3})
    kiln.runtime.set_num_threads(0)
    return rows
