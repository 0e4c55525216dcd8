"""The register-tiled matmul micro-kernel of codegen (tests/codegen/cg_irbuild.matmul_tiled,
6 x 16 tile, one thread), against numpy's BLAS on one thread: the speed check that used to be a
timed assertion in tests/codegen/test_cg_perf.py. Operands fit in cache, so this measures the
code generator's inner loop alone (packing and cache tiling are the schedule's job and are in
the ``matmul`` benchmark). Correctness of the same kernel is tested in tests/codegen.
"""
from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

from harness import time_best

# The kernel builder and the ctypes harness live with the codegen tests.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "codegen"))


def run(sizes=(240,), repeat: int = 7) -> list[dict]:
    import threadpoolctl

    from cg_harness import KernelLibrary
    from cg_irbuild import matmul_tiled
    from kiln import codegen

    rows = []
    options = codegen.BuildOptions(cache_dir=tempfile.mkdtemp(prefix="kiln-bench-"))
    for n in sizes:
        lib = KernelLibrary(codegen.build_library(matmul_tiled(n, n, n, mr=6, nr=16, parallel=False),
                                                  "llvm", options))
        rng = np.random.default_rng(0)
        a, b = rng.random((n, n), dtype="float32"), rng.random((n, n), dtype="float32")
        c = np.zeros((n, n), "float32")
        with threadpoolctl.threadpool_limits(1):
            t_kiln = time_best(lambda: lib.call("main", a, b, c), repeat)
            t_numpy = time_best(lambda: a @ b, repeat)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4)
        flop = 2 * n ** 3
        rows.append({"benchmark": f"microkernel 6x16 {n}^3 1 thread",
                     "kiln_gflops": flop / t_kiln / 1e9, "numpy_gflops": flop / t_numpy / 1e9})
    return rows
