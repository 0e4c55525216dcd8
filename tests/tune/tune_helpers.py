"""Helpers for the tuner tests: a tiny matmul task, a tiny ONNX model, and builders that make
real faulty candidates (they run in the tuner's builder processes, so they live in a module
those processes can import: the workers get the test process's ``sys.path``).

The faulty kernels are real generated code with the task kernel's signature: one stores 128
MiB past its output (the runner process dies of SIGSEGV), one computes ``A @ B + 1`` (a
wrong result), one loops for ~10^15 iterations (a hang).
"""
from __future__ import annotations

import hashlib

import numpy as np

import kiln
from kiln.ir import IRModule
from kiln.script import T
from kiln.tune.database import decisions_key
from kiln.tune.measure import build_candidate, schedule_candidate

M, K, N = 16, 32, 16


def kernel_records(records):
    """The records of kernels, without those of layer decisions (``kiln/tune/layers.py``:
    on a target whose panel width has two options a matmul also gets those)."""
    return [r for r in records if not r["workload"].startswith("layer:")]


@T.prim_func
def mm(A: T.Buffer((16, 32), "float32"), B: T.Buffer((32, 16), "float32"),
       C: T.Buffer((16, 16), "float32")):
    T.func_attr({"kiln.anchor": "matmul", "kiln.ops": "matmul"})
    for i, j, k in T.grid(16, 16, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func
def mm_plus_one(A: T.Buffer((16, 32), "float32"), B: T.Buffer((32, 16), "float32"),
                C: T.Buffer((16, 16), "float32")):
    T.func_attr({"kiln.anchor": "matmul", "kiln.ops": "matmul"})
    for i, j, k in T.grid(16, 16, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(1)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func
def crash(A: T.Buffer((16, 32), "float32"), B: T.Buffer((32, 16), "float32"),
          C: T.Buffer((16, 16), "float32")):
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            C[vi * 2000000, 0] = A[vi, 0]


@T.prim_func
def hang(A: T.Buffer((16, 32), "float32"), B: T.Buffer((32, 16), "float32"),
         C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(100000, 100000, 100000):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSS", [i, j, k])
            C[0, 0] = C[0, 0] + A[0, 0]


def mm_module() -> IRModule:
    """A module of one unscheduled matmul kernel (no graph function: called once)."""
    return IRModule({"mm": mm})


def _build(func, target) -> str:
    from kiln.codegen import build_library
    from kiln.driver import lower
    return build_library(lower(IRModule({"main": func})), target)


def fault_of(decisions) -> str:
    """Which fault ``every_candidate_faulty_builder`` gives a candidate: by a stable hash."""
    h = int(hashlib.sha256(decisions_key(decisions).encode()).hexdigest(), 16)
    return ("crash", "wrong")[h % 2]


def faults_by_mr_builder(func, ctx, decisions, target) -> str:
    """A builder (``LocalExecutor(builder=...)``): ``mr`` 1 crashes, 2 computes a wrong
    result, 3 hangs; anything else is the real candidate."""
    mr = decisions.get("mr")
    if mr == 1:
        return _build(crash, target)
    if mr == 2:
        return _build(schedule_candidate(mm_plus_one, ctx, decisions), target)
    if mr == 3:
        return _build(hang, target)
    return build_candidate(func, ctx, decisions, target)


def every_candidate_faulty_builder(func, ctx, decisions, target) -> str:
    """A builder whose first candidate (the tuner's baseline: the default decisions) is real
    and every later one crashes or computes a wrong result (``fault_of``)."""
    from kiln.schedule.decisions import Decisions
    from kiln.transform.default_schedule import schedule_kernel
    d = Decisions()
    schedule_kernel(func, ctx, d)
    if decisions == d.made:
        return build_candidate(func, ctx, decisions, target)
    if fault_of(decisions) == "crash":
        return _build(crash, target)
    return _build(schedule_candidate(mm_plus_one, ctx, decisions), target)


def builder_that_segfaults(func, ctx, decisions, target) -> str:
    """A builder whose own process dies (a crash in the build plumbing, not the kernel)."""
    import ctypes
    ctypes.string_at(0)
    return ""


def _matmul_model(m, k, n, seed):
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(seed).standard_normal((k, n)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model, w


def matmul_onnx(path, m=8, k=32, n=16, seed=0):
    """An ONNX model ``y = x @ w`` with ``w`` an initializer, saved at ``path``: (path, w)."""
    import onnx
    model, w = _matmul_model(m, k, n, seed)
    onnx.save(model, str(path))
    return path, w


def matmul_graph_module(m=8, k=32, n=16, seed=0):
    """The ``matmul_onnx`` model imported, its weight bound: (module, w)."""
    model, w = _matmul_model(m, k, n, seed)
    mod, params = kiln.frontend.from_onnx(model)
    return kiln.transform.bind_params("main", params)(mod), w
