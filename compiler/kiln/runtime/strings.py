"""String tensors as the C runtime holds them, and numpy's str/object arrays (docs/strings.md).

A string tensor is one block of bytes: ``count`` records ``(offset, length)`` (two little-endian
uint64 each, ``offset`` from the block's start), then the UTF-8 bytes they point into. ``pack``
makes a block from a numpy array of ``str`` (dtype ``U`` or ``object``, as ONNX's runner passes
them); ``unpack`` makes the array (dtype ``object``, as ONNX expects them back).

``StringLibrary`` calls ``libkiln_strings.so`` (runtime_c/strings) through cffi's ABI mode: the
validation of a block and the string kernels, for tests. Compiled models reach the same kernels
through the runtime: ``tensor_from_numpy`` / ``tensor_to_numpy`` convert a VM's string arguments
and results (string tensors: runtime tensors of dtype ``string``).

>>> import numpy as np
>>> unpack(pack(np.array(["a", "", "ßx"])), (3,)).tolist()
['a', '', 'ßx']
"""
from __future__ import annotations

import os

import numpy as np

RECORD = np.dtype([("offset", "<u8"), ("length", "<u8")])

_CDEF = """
typedef int kiln_status_t;
const char* kiln_last_error(void);
kiln_status_t kiln_str_validate(const void* block, uint64_t nbytes, uint64_t count);
void kiln_str_free(void* block);
kiln_status_t kiln_str_equal(const void* a, const int64_t* a_strides, const void* b,
    const int64_t* b_strides, int32_t ndim, const int64_t* shape, uint8_t* out);
kiln_status_t kiln_str_concat(const void* a, const int64_t* a_strides, const void* b,
    const int64_t* b_strides, int32_t ndim, const int64_t* shape, void** out_block, uint64_t* out_nbytes);
kiln_status_t kiln_str_regex_translate(const char* re2, char* out, size_t out_cap);
kiln_status_t kiln_str_regex_full_match(const void* x, uint64_t count, const char* re2, uint8_t* out);
kiln_status_t kiln_str_normalize(const void* x, uint64_t count, int32_t case_action,
    int32_t case_sensitive, const void* stopwords, uint64_t num_stopwords, void** out_block,
    uint64_t* out_nbytes, uint64_t* out_count);
kiln_status_t kiln_str_split(const void* x, uint64_t count, const char* delimiter, int64_t maxsplit,
    void** out_block, uint64_t* out_nbytes, uint64_t* out_width, int64_t* num_splits);
kiln_status_t kiln_str_index(const void* x, uint64_t count, const void* keys, uint64_t num_keys, int64_t* out);
kiln_status_t kiln_str_take(const void* src, uint64_t num_src, const int64_t* index, uint64_t count,
    const char* dflt, uint64_t dflt_len, void** out_block, uint64_t* out_nbytes);
"""


def pack(arr) -> bytes:
    """The block of a numpy array of ``str`` (row-major); ``TypeError`` naming the first element
    that is not a ``str`` (``bytes`` are refused too: a string tensor holds text)."""
    flat = np.asarray(arr, dtype=object).reshape(-1)
    data, recs, pos = [], np.zeros(len(flat), RECORD), len(flat) * RECORD.itemsize
    for i, s in enumerate(flat):
        if not isinstance(s, str):
            raise TypeError(f"string tensor: element {i} is {type(s).__name__} {s!r}, not str")
        b = s.encode("utf-8")
        recs[i] = (pos, len(b))
        data.append(b)
        pos += len(b)
    return recs.tobytes() + b"".join(data)


def unpack(block, shape) -> np.ndarray:
    """The numpy array (dtype ``object`` of ``str``) of a validated block of ``prod(shape)``
    elements."""
    block = bytes(block)
    n = int(np.prod(shape, dtype=np.int64))
    recs = np.frombuffer(block, RECORD, count=n)
    out = np.empty(n, dtype=object)
    for i, (off, ln) in enumerate(recs.tolist()):
        out[i] = block[off:off + ln].decode("utf-8")
    return out.reshape(shape)


def tensor_from_numpy(arr):
    """A runtime string tensor (``kiln.nd.NDArray`` of dtype ``string``) holding ``arr`` (numpy
    ``str`` or ``object`` array of ``str``), validated by the runtime."""
    from ._base import check, ffi, lib
    from .ndarray import NDArray
    arr = np.asarray(arr)
    block = pack(arr)
    shape = ffi.new("int64_t[]", max(arr.ndim, 1))
    for i, d in enumerate(arr.shape):
        shape[i] = d
    out = ffi.new("kiln_tensor_t**")
    check(lib.kiln_str_tensor_from_block(block, len(block), shape, arr.ndim, out))
    return NDArray(out[0])


def tensor_to_numpy(handle) -> np.ndarray:
    """The numpy ``object`` array of ``str`` of a runtime string tensor (a ``kiln_tensor_t*``)."""
    from ._base import check, ffi, lib
    block, nbytes, count = ffi.new("void**"), ffi.new("uint64_t*"), ffi.new("uint64_t*")
    check(lib.kiln_str_tensor_block(handle, ffi.cast("const void**", block), nbytes, count))
    dl = lib.kiln_tensor_dltensor(handle)
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    if count[0] == 0:
        return np.empty(shape, dtype=object)
    return unpack(ffi.buffer(block[0], nbytes[0]), shape)


class StringError(RuntimeError):
    """A string kernel or the validation of a block failed; the message is the runtime's."""


def default_library_path():
    """runtime_c/build/libkiln_strings.so of this source tree (``make -C runtime_c strings``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "..", "runtime_c", "build", "libkiln_strings.so")


class StringLibrary:
    """libkiln_strings.so over numpy arrays of str: each method packs its inputs, calls the
    kernel, checks the status and unpacks the result (the blocks it returns validated first)."""

    def __init__(self, path=None):
        import cffi
        self.ffi = cffi.FFI()
        self.ffi.cdef(_CDEF)
        self.lib = self.ffi.dlopen(os.path.abspath(path or default_library_path()))

    def _check(self, status):
        if status:
            raise StringError(self.ffi.string(self.lib.kiln_last_error()).decode())

    def validate(self, block: bytes, count: int):
        """Raises ``StringError`` unless ``block`` is a valid string tensor of ``count`` elements."""
        keep, p = self._ptr(block)
        self._check(self.lib.kiln_str_validate(p, len(block), count))

    def _ptr(self, block):
        """An 8-byte aligned copy of ``block`` (kept alive by the caller) and its address."""
        buf = np.zeros(max(1, -(-len(block) // 8)), np.uint64)
        buf.view(np.uint8)[:len(block)] = np.frombuffer(block, np.uint8)
        return buf, self.ffi.cast("void*", self.ffi.from_buffer(buf))

    def _take_block(self, pblock, pnbytes, shape):
        try:
            block = bytes(self.ffi.buffer(pblock[0], pnbytes[0]))
        finally:
            self.lib.kiln_str_free(pblock[0])
        self.validate(block, int(np.prod(shape, dtype=np.int64)))
        return unpack(block, shape)

    def _broadcast(self, a, b):
        a, b = np.asarray(a, dtype=object), np.asarray(b, dtype=object)
        shape = np.broadcast_shapes(a.shape, b.shape)

        def strides(x):
            x = x.reshape((1,) * (len(shape) - x.ndim) + x.shape)
            st = np.zeros(len(shape), np.int64)
            acc = 1
            for d in range(len(shape) - 1, -1, -1):
                st[d] = 0 if x.shape[d] == 1 else acc
                acc *= x.shape[d]
            return st
        return a, b, shape, strides(a), strides(b)

    def equal(self, a, b):
        a, b, shape, sa, sb = self._broadcast(a, b)
        (ka, pa), (kb, pb) = self._ptr(pack(a)), self._ptr(pack(b))
        out = np.zeros(shape, np.uint8)
        shp = np.array(shape, np.int64)
        self._check(self.lib.kiln_str_equal(pa, self.ffi.from_buffer("int64_t[]", sa), pb,
                                            self.ffi.from_buffer("int64_t[]", sb), len(shape),
                                            self.ffi.from_buffer("int64_t[]", shp),
                                            self.ffi.from_buffer("uint8_t[]", out)))
        return out.astype(bool)

    def concat(self, a, b):
        a, b, shape, sa, sb = self._broadcast(a, b)
        (ka, pa), (kb, pb) = self._ptr(pack(a)), self._ptr(pack(b))
        shp = np.array(shape, np.int64)
        blk, nb = self.ffi.new("void**"), self.ffi.new("uint64_t*")
        self._check(self.lib.kiln_str_concat(pa, self.ffi.from_buffer("int64_t[]", sa), pb,
                                             self.ffi.from_buffer("int64_t[]", sb), len(shape),
                                             self.ffi.from_buffer("int64_t[]", shp), blk, nb))
        return self._take_block(blk, nb, shape)

    def regex_translate(self, pattern: str) -> str:
        out = self.ffi.new("char[]", 4096)
        self._check(self.lib.kiln_str_regex_translate(pattern.encode(), out, 4096))
        return self.ffi.string(out).decode()

    def regex_full_match(self, x, pattern: str):
        x = np.asarray(x, dtype=object)
        keep, p = self._ptr(pack(x))
        out = np.zeros(x.shape, np.uint8)
        self._check(self.lib.kiln_str_regex_full_match(p, x.size, pattern.encode(),
                                                       self.ffi.from_buffer("uint8_t[]", out)))
        return out.astype(bool)

    def normalize(self, x, case_change_action="NONE", is_case_sensitive=False, stopwords=()):
        """ONNX StringNormalizer on a [C] or [1, C] array."""
        x = np.asarray(x, dtype=object)
        keep, p = self._ptr(pack(x))
        keep2, ps = self._ptr(pack(np.array(list(stopwords), dtype=object)))
        action = {"NONE": 0, "LOWER": 1, "UPPER": 2}[case_change_action]
        blk, nb, cnt = self.ffi.new("void**"), self.ffi.new("uint64_t*"), self.ffi.new("uint64_t*")
        self._check(self.lib.kiln_str_normalize(p, x.size, action, int(bool(is_case_sensitive)), ps,
                                                len(stopwords), blk, nb, cnt))
        n = int(cnt[0])
        return self._take_block(blk, nb, (1, n) if x.ndim == 2 else (n,))

    def split(self, x, delimiter=None, maxsplit=None):
        """ONNX StringSplit: ``(tokens padded with "", number of tokens)``."""
        x = np.asarray(x, dtype=object)
        keep, p = self._ptr(pack(x))
        num = np.zeros(x.shape, np.int64)
        blk, nb, w = self.ffi.new("void**"), self.ffi.new("uint64_t*"), self.ffi.new("uint64_t*")
        delim = self.ffi.NULL if delimiter is None else delimiter.encode()
        self._check(self.lib.kiln_str_split(p, x.size, delim, -1 if maxsplit is None else maxsplit,
                                            blk, nb, w, self.ffi.from_buffer("int64_t[]", num)))
        return self._take_block(blk, nb, x.shape + (int(w[0]),)), num

    def index(self, x, keys):
        x, keys = np.asarray(x, dtype=object), np.asarray(keys, dtype=object)
        (k1, p), (k2, pk) = self._ptr(pack(x)), self._ptr(pack(keys))
        out = np.zeros(x.shape, np.int64)
        self._check(self.lib.kiln_str_index(p, x.size, pk, keys.size, self.ffi.from_buffer("int64_t[]", out)))
        return out

    def take(self, src, index, default=""):
        src, index = np.asarray(src, dtype=object), np.ascontiguousarray(index, np.int64)
        keep, p = self._ptr(pack(src))
        d = default.encode()
        blk, nb = self.ffi.new("void**"), self.ffi.new("uint64_t*")
        self._check(self.lib.kiln_str_take(p, src.size, self.ffi.from_buffer("int64_t[]", index), index.size,
                                           d, len(d), blk, nb))
        return self._take_block(blk, nb, index.shape)


__all__ = ["StringError", "StringLibrary", "default_library_path", "pack", "unpack"]
