"""Speed of generated code (slow tests). A register-tiled matmul micro-kernel whose operands fit
in cache must run near the machine's FMA peak: compared with numpy's BLAS on one thread, where
the comparison is least noisy. (Large matmuls also need packing and cache tiling, which is the
schedule's job, not codegen's.)"""
from __future__ import annotations

import time

import numpy as np
import pytest

from cg_irbuild import matmul_tiled

pytestmark = pytest.mark.slow


def best_time(fn, repeat=7):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def test_matmul_microkernel_is_near_blas(build):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from kiln import codegen
    if codegen.parse_target("llvm").vector_bits < 256:
        pytest.skip("tile sizes below are tuned for 256/512-bit vectors")
    n = 240
    lib = build(matmul_tiled(n, n, n, mr=6, nr=16, parallel=False))
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype="float32"), rng.random((n, n), dtype="float32")
    c = np.zeros((n, n), "float32")
    with threadpoolctl.threadpool_limits(1):
        t_kiln = best_time(lambda: lib.call("main", a, b, c))
        t_numpy = best_time(lambda: a @ b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    gflops = 2 * n ** 3 / t_kiln / 1e9
    print(f"kiln {gflops:.1f} GFLOP/s, numpy {2 * n ** 3 / t_numpy / 1e9:.1f} GFLOP/s")
    assert t_numpy / t_kiln >= 0.5
