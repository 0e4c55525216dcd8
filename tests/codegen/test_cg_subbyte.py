"""Packed sub-byte buffers (int4, uint2...) in hand-scheduled kernels: a parallel loop that only
reads them stays parallel; one that stores them runs serially (threads would race on the shared
bytes); a vectorized loop over them is lowered one element at a time; every value, the odd tail
and the neighbouring fields of each byte come out right (reference: ml_dtypes' astype)."""
from __future__ import annotations

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

from kiln import subbyte  # noqa: E402

from cg_harness import serial_ctx  # noqa: E402
from cg_irbuild import buf, elementwise  # noqa: E402

N = 1001   # odd: the last byte holds one int4 (three of its int2 fields unused)


def values(name, n=N):
    bits = subbyte.BITS[name]
    lo = 0 if name.startswith("u") else -(1 << (bits - 1))
    return (np.arange(n) % (1 << bits) + lo).astype(subbyte.numpy_dtype(name))


@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2"])
def test_parallel_loop_reading_packed_stays_parallel(build, name):
    A, B = buf("A", (N,), name), buf("B", (N,), "float32")
    lib = build(elementwise(N, [A], B, lambda a: a.astype("float32"), structure="parallel_split"))
    a = values(name)
    out = np.full(N, np.nan, np.float32)
    ctx = serial_ctx(4)
    assert lib.call("main", subbyte.pack(a), out, ctx=ctx) == 0
    assert ctx.launches == [4]
    np.testing.assert_array_equal(out, a.astype(np.float32))


@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2"])
def test_parallel_loop_storing_packed_runs_serially(build, name):
    A, B = buf("A", (N,), "float32"), buf("B", (N,), name)
    lib = build(elementwise(N, [A], B, lambda a: a.astype(name), structure="parallel_split"))
    # past the range on both sides: the cast wraps, as ml_dtypes' does
    a = (np.arange(N) % 40 - 20).astype(np.float32)
    out = np.full(subbyte.packed_nbytes(name, N), 0xA5, np.uint8)   # stale bits to overwrite
    ctx = serial_ctx(4)
    assert lib.call("main", a, out, ctx=ctx) == 0
    assert ctx.launches == []
    got = subbyte.unpack(out, name, (N,))
    np.testing.assert_array_equal(got.astype(np.int16), a.astype(subbyte.numpy_dtype(name)).astype(np.int16))


def _wrap(storage, offset, dtype, n):
    """A runtime tensor of ``n`` elements of ``dtype`` at byte ``offset`` of ``storage``'s memory
    (which must outlive it)."""
    from kiln.runtime._base import check, ffi, lib
    from kiln.runtime.ndarray import NDArray
    code, bits, _ = {"int4": (0, 4, 1), "float32": (2, 32, 1)}[dtype]
    dl = ffi.new("DLTensor*")
    shape = ffi.new("int64_t[1]", [n])
    dl.data = ffi.cast("char*", storage._dl.data) + offset
    dl.device.device_type, dl.ndim, dl.shape = lib.kDLCPU, 1, shape
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, 1
    out = ffi.new("kiln_tensor_t**")
    check(lib.kiln_tensor_wrap(dl, ffi.NULL, ffi.NULL, out))
    return NDArray(out[0])


def test_runtime_overlap_check_sizes_packed_arguments(build):
    """The runtime refuses a kernel call whose written argument overlaps another, by each one's
    bytes: N int4 span ceil(N / 2) of them, so a float32 output placed right after them in one
    buffer is distinct memory (it was refused, the int4 counted a byte each), and one placed
    inside them is still refused."""
    import kiln
    from kiln.runtime import KilnError, load_module
    A, B = buf("A", (N,), "int4"), buf("B", (N,), "float32")
    mod = load_module(build(elementwise(N, [A], B, lambda a: a.astype("float32"))).path)
    storage = kiln.nd.empty((8192,), "uint8")
    packed = subbyte.packed_nbytes("int4", N)   # 501
    a = _wrap(storage, 0, "int4", N).copyfrom(values("int4"))
    out = _wrap(storage, packed + 3, "float32", N)   # the next 4-byte boundary
    mod["main"](a, out)
    np.testing.assert_array_equal(out.numpy(), values("int4").astype(np.float32))
    with pytest.raises(KilnError, match="share memory"):
        mod["main"](a, _wrap(storage, packed - 1, "float32", N))


def test_vectorized_copy_between_packed_buffers(build):
    """int4 -> int4 through a split loop whose inner loop is vectorized with a tail predicate."""
    A, B = buf("A", (N,), "int4"), buf("B", (N,), "int4")
    lib = build(elementwise(N, [A], B, lambda a: a, structure="split"))
    a = values("int4")[::-1].copy()
    out = np.zeros(subbyte.packed_nbytes("int4", N), np.uint8)
    assert lib.call("main", subbyte.pack(a), out) == 0
    np.testing.assert_array_equal(out, subbyte.pack(a))
