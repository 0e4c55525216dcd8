"""ctypes harness for the codegen tests: call kernel libraries directly, with DLTensor structs
made here and a kernel context of our choosing (NULL, a serial ``parallel_launch`` written in
Python, or one that runs tasks on several threads), so the generated ABI is exercised without
going through kiln.runtime. (Tests through the runtime are in test_cg_build.py.)

A module of its own, not conftest.py: test directories here have no __init__.py, so every
conftest is importable only as "conftest" and the name is ambiguous.
"""
from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


TASK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, TASK, ctypes.c_void_p, ctypes.c_int64)


class KernelCtx(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("num_threads", ctypes.c_int32),
                ("pool", ctypes.c_void_p), ("parallel_launch", LAUNCH)]


class KernelParam(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype_code", ctypes.c_uint8), ("dtype_bits", ctypes.c_uint8),
                ("dtype_lanes", ctypes.c_uint16), ("ndim", ctypes.c_int32), ("flags", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_int64))]


KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(DLTensor)),
                             ctypes.c_int32)


class DerivedDim(ctypes.Structure):
    _fields_ = [("op", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("a", ctypes.c_int64),
                ("b", ctypes.c_int64)]


class KernelInfo(ctypes.Structure):
    # kiln_kernel_info_t of kernel ABI 3 (runtime_c/include/kiln_kernel_abi.h)
    _fields_ = [("name", ctypes.c_char_p), ("fn", KERNEL_FN), ("num_params", ctypes.c_int32),
                ("params", ctypes.POINTER(KernelParam)), ("num_sym", ctypes.c_int32),
                ("sym_names", ctypes.POINTER(ctypes.c_char_p)), ("num_derived", ctypes.c_int32),
                ("derived", ctypes.POINTER(DerivedDim))]


class LibraryInfo(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("num_kernels", ctypes.c_int32),
                ("kernels", ctypes.POINTER(KernelInfo))]


_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


def dltensor(arr: np.ndarray, byte_offset: int = 0, keep=None) -> DLTensor:
    """A DLTensor viewing ``arr`` (C-contiguous); ``byte_offset`` is subtracted from the data
    pointer and stored in the struct, to test that kernels honour it."""
    assert arr.flags.c_contiguous
    shape = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
    if keep is not None:
        keep.append(shape)
    kind = arr.dtype.kind
    return DLTensor(arr.ctypes.data - byte_offset, DLDevice(1, 0), arr.ndim,
                    DLDataType(_DL_CODES[kind], arr.dtype.itemsize * 8, 1), shape, None, byte_offset)


class KernelLibrary:
    """A built kernel library, read through its ``kiln_library_info`` table."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.info = LibraryInfo.in_dll(self.lib, "kiln_library_info")
        self.kernels = {self.info.kernels[k].name.decode(): self.info.kernels[k]
                        for k in range(self.info.num_kernels)}

    def params(self, name: str):
        k = self.kernels[name]
        out = []
        for j in range(k.num_params):
            p = k.params[j]
            shape = [p.shape[d] for d in range(p.ndim)] if p.ndim else []
            out.append((p.name.decode(), p.dtype_code, p.dtype_bits, p.dtype_lanes, shape, p.flags))
        return out

    def sym_names(self, name: str):
        k = self.kernels[name]
        return [k.sym_names[j].decode() for j in range(k.num_sym)]

    def call(self, name: str, *arrays, ctx=None, byte_offset: int = 0) -> int:
        """Call kernel ``name`` on numpy arrays (outputs written in place); returns its status."""
        keep = []
        tensors = [dltensor(a, byte_offset, keep) for a in arrays]
        ptrs = (ctypes.POINTER(DLTensor) * len(tensors))(*[ctypes.pointer(t) for t in tensors])
        ctx_ptr = ctypes.cast(ctypes.pointer(ctx), ctypes.c_void_p) if ctx is not None else None
        return self.kernels[name].fn(ctx_ptr, ptrs, len(tensors))


def serial_ctx(num_threads: int = 4, fail_with: int = 0):
    """A kernel context whose parallel_launch runs the tasks one after another in Python and
    records how many tasks each launch asked for (``ctx.launches``)."""
    launches = []

    def launch(pool, fn, closure, n):
        launches.append(n)
        if fail_with:
            return fail_with
        for t in range(n):
            rc = fn(t, n, closure)
            if rc:
                return rc
        return 0

    ctx = KernelCtx(1, num_threads, None, LAUNCH(launch))
    ctx.launches = launches
    ctx._keep = launch
    return ctx


def threaded_ctx(num_threads: int = 4):
    """A context whose parallel_launch really runs tasks concurrently (ctypes releases the GIL
    while a task runs), recording the threads that ran them (``ctx.threads``)."""
    pool = ThreadPoolExecutor(max_workers=num_threads)
    threads = set()
    inside = threading.local()

    def run(fn, t, n, closure):
        threads.add(threading.get_ident())
        inside.flag = True
        try:
            return fn(t, n, closure)
        finally:
            inside.flag = False

    def launch(_pool, fn, closure, n):
        if getattr(inside, "flag", False):  # nested: run serially on this thread (ABI rule)
            return next((r for r in (fn(t, n, closure) for t in range(n)) if r), 0)
        results = list(pool.map(lambda t: run(fn, t, n, closure), range(n)))
        return next((r for r in results if r), 0)

    ctx = KernelCtx(1, num_threads, None, LAUNCH(launch))
    ctx.threads, ctx._keep = threads, (launch, pool)
    return ctx
