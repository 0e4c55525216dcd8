"""Helpers shared by the schedule tests (loop and block primitives).

Keep them generic: builders of small modules, and ``check_same``, which runs two modules on the
same seeded random inputs with the reference evaluator and compares every buffer afterwards.
"""
from __future__ import annotations

import numpy as np
import pytest

from kiln import te
from kiln.ir import IRModule, PrimFunc
from kiln.ir import dtype as dt
from kiln.ir.evaluator import evaluate


# ---- modules (te) ------------------------------------------------------------------------
def vector_add_module(n: int = 8) -> IRModule:
    """API.md section 2: ``B[i] = A[i] + 1.0``; loop ``i``, block "B"."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return IRModule({"main": te.create_prim_func([A, B])})


def elementwise_2d_module(m: int = 4, n: int = 8) -> IRModule:
    """``B[i, j] = A[i, j] * 2.0``; loops ``i, j``, block "B"."""
    A = te.placeholder((m, n), "float32", name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    return IRModule({"main": te.create_prim_func([A, B])})


def matmul_module(m: int = 16, n: int = 16, k: int = 16) -> IRModule:
    """``C[i, j] = sum_k A[i, k] * B[k, j]``; loops ``i, j, k``, block "C" with reduce ``vk``."""
    A = te.placeholder((m, k), "float32", name="A")
    B = te.placeholder((k, n), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return IRModule({"main": te.create_prim_func([A, B, C])})


@pytest.fixture
def vector_add():
    return vector_add_module()


@pytest.fixture
def elementwise_2d():
    return elementwise_2d_module()


@pytest.fixture
def matmul():
    return matmul_module()


# ---- checking ----------------------------------------------------------------------------
def random_args(func: PrimFunc, seed: int = 0, sizes: dict | None = None) -> list:
    """Seeded random arrays for every buffer parameter of ``func``. Symbolic dimensions take
    their size from ``sizes`` (by variable name)."""
    rng = np.random.default_rng(seed)
    args = []
    for p in func.params:
        shape = tuple(s.value if hasattr(s, "value") else (sizes or {})[s.name] for s in p.shape)
        if dt.is_float(p.dtype):
            args.append(rng.standard_normal(shape).astype(dt.to_numpy(p.dtype)))
        elif dt.is_bool(p.dtype):
            args.append(rng.integers(0, 2, shape).astype(bool))
        else:
            args.append(rng.integers(-8, 8, shape).astype(dt.to_numpy(p.dtype)))
    return args


def run(mod, seed: int = 0, sizes: dict | None = None) -> list:
    """Evaluate ``mod`` (its main tensor program) on ``random_args`` and return all arrays."""
    func = mod if isinstance(mod, PrimFunc) else mod["main"]
    args = random_args(func, seed, sizes)
    evaluate(func, *args)
    return args


def check_same(before, after, seed: int = 0, sizes: dict | None = None,
               rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Assert that two modules compute the same: same random inputs, and every buffer
    (outputs written, inputs untouched) equal afterwards, within float tolerance."""
    for k, (x, y) in enumerate(zip(run(before, seed, sizes), run(after, seed, sizes))):
        np.testing.assert_allclose(y, x, rtol=rtol, atol=atol, err_msg=f"parameter {k} differs")


__all__ = ["check_same", "run", "random_args", "vector_add_module", "elementwise_2d_module",
           "matmul_module"]
