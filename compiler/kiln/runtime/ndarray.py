"""NDArray: a tensor owned by the Kiln runtime, exchanged with numpy, PyTorch and other
frameworks through DLPack without copies."""

import ctypes

from .. import subbyte
from ._base import NARROW_FLOATS, check, dtype_name, ffi, lib, parse_dtype
from .device import Device, cpu

# PyCapsule_New through ctypes: cffi cannot return Python objects. The capsule's name and
# destructor are static C in the extension, so they outlive any Python object.
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_CAPSULE_DESTRUCTOR = int(ffi.cast("uintptr_t", ffi.addressof(lib, "kiln_py_capsule_destructor")))
_CAPSULE_NAME = {v: int(ffi.cast("uintptr_t", lib.kiln_py_capsule_name(v))) for v in (0, 1)}


def _narrow_float_view(arr):
    """An ml_dtypes numpy view of a bfloat16/float8 array (numpy's DLPack import knows only int,
    float and complex codes); the view keeps ``arr`` alive."""
    import ml_dtypes
    import numpy as np

    dl = arr._dl
    if dl.strides != ffi.NULL and any(dl.strides[i] != s for i, s in
                                      enumerate(np.empty(arr.shape, np.uint8).strides)):
        raise BufferError(f"numpy(): a strided {arr.dtype} array has no numpy view; copy it first")
    # the buffer's pointer holds a reference to arr (its destructor closure), numpy the buffer's
    owner = ffi.gc(ffi.cast("char*", dl.data), lambda _p, _keep=arr: None)
    dtype = np.dtype(getattr(ml_dtypes, arr.dtype))
    return np.frombuffer(ffi.buffer(owner, arr.nbytes), dtype=dtype).reshape(arr.shape)


def _address(ptr):
    return int(ffi.cast("uintptr_t", ptr))


class NDArray:
    """An n-dimensional array in runtime memory (a reference to a C ``kiln_tensor_t``).

    Make one with ``kiln.nd.array(np_array)`` (a copy into 64-byte-aligned memory),
    ``kiln.nd.empty(shape, dtype)`` or ``kiln.nd.from_dlpack(obj)`` (zero-copy). Read it with
    ``.numpy()``; share it without copying with ``np.from_dlpack(a)`` / ``torch.from_dlpack(a)``.
    """

    __slots__ = ("_handle", "__weakref__")

    def __init__(self, handle):
        """Takes over one reference to a ``kiln_tensor_t*``; use the kiln.nd functions instead."""
        self._handle = ffi.gc(handle, lib.kiln_tensor_release)

    @property
    def _dl(self):
        return lib.kiln_tensor_dltensor(self._handle)

    @property
    def shape(self):
        dl = self._dl
        return tuple(dl.shape[i] for i in range(dl.ndim))

    @property
    def ndim(self):
        return self._dl.ndim

    @property
    def dtype(self):
        """The element type as a string, e.g. "float32"."""
        return dtype_name(self._dl.dtype)

    @property
    def device(self):
        dl = self._dl
        return Device(dl.device.device_type, dl.device.device_id)

    @property
    def nbytes(self):
        return lib.kiln_tensor_nbytes(self._handle)

    def numpy(self, copy=True):
        """The contents as a numpy array: a copy by default; with copy=False a view sharing
        this array's memory (it keeps the memory alive)."""
        import numpy as np

        if self._dl.device.device_type == lib.kDLCUDA:   # GPU memory: always a copy
            from .cuda_device import to_numpy
            return to_numpy(self)
        if self.dtype == "string":   # a string tensor: an object array of str, always a copy
            if not copy:
                raise BufferError("numpy(copy=False): a string tensor has no numpy view; numpy can "
                                  "only hold a copy (an object array of str)")
            from .strings import tensor_to_numpy
            return tensor_to_numpy(self._handle)
        if subbyte.is_subbyte(self.dtype):   # packed in memory: numpy's are a byte each
            if not copy:
                raise BufferError(f"numpy(copy=False): {self.dtype} elements are packed several to "
                                  "a byte; numpy can only hold a copy")
            return subbyte.unpack(ffi.buffer(self._data(), self.nbytes), self.dtype, self.shape)
        if self.dtype in NARROW_FLOATS:
            view = _narrow_float_view(self)
        else:
            view = np.from_dlpack(self)
        return view.copy() if copy else view

    def copyfrom(self, source):
        """Copies `source` (an array-like of the same shape) into this array; returns self."""
        import numpy as np

        source = np.asarray(source)
        if source.shape != self.shape:
            raise ValueError(f"copyfrom: shape {source.shape} does not match {self.shape}")
        if subbyte.is_subbyte(self.dtype):
            packed = subbyte.pack(source.astype(subbyte.numpy_dtype(self.dtype)))
            ffi.memmove(self._data(), packed, packed.nbytes)
            return self
        np.copyto(self.numpy(copy=False), source, casting="same_kind")
        return self

    def _data(self):
        """The address of the first element (data + byte_offset)."""
        dl = self._dl
        return ffi.cast("char*", dl.data) + dl.byte_offset

    def _values(self):
        """The values as numpy, sharing this array's memory where numpy can (a copy of packed
        sub-byte elements, which numpy holds a byte each)."""
        return self.numpy(copy=subbyte.is_subbyte(self.dtype))

    def __array__(self, dtype=None, copy=None):
        arr = self._values() if copy is None else self.numpy(copy=bool(copy))
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __dlpack_device__(self):
        dl = self._dl
        return (dl.device.device_type, dl.device.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule sharing this array's memory: "dltensor_versioned" (DLPack 1.x) when
        the consumer accepts max_version >= (1, 0), else the legacy "dltensor". copy=True
        exports a copy."""
        # A CUDA array's kernels have finished when a Kiln call returns: any stream may read it.
        if stream is not None and stream != -1 and self._readable():
            raise BufferError("__dlpack__: stream must be None for CPU arrays")
        if self.dtype == "string":
            raise BufferError("__dlpack__: string tensors have no DLPack form; use .numpy()")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"__dlpack__: cannot export to device {tuple(dl_device)}")
        source = _copy_of(self) if copy else self
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        if not versioned and lib.kiln_tensor_is_read_only(source._handle):
            raise BufferError("__dlpack__: a read-only array needs DLPack >= 1.0 "
                              "(the legacy protocol cannot mark it read-only)")
        if versioned:
            out = ffi.new("DLManagedTensorVersioned**")
            check(lib.kiln_tensor_to_dlpack(source._handle, out))
            if copy:
                out[0].flags |= lib.DLPACK_FLAG_BITMASK_IS_COPIED
        else:
            out = ffi.new("DLManagedTensor**")
            check(lib.kiln_tensor_to_dlpack_legacy(source._handle, out))
        try:
            return _capsule_new(_address(out[0]), _CAPSULE_NAME[versioned], _CAPSULE_DESTRUCTOR)
        except BaseException:
            out[0].deleter(out[0])
            raise

    def to_dlpack(self):
        """A DLPack capsule (the legacy "dltensor" protocol, for consumers that take a capsule
        rather than an object with ``__dlpack__``) sharing this array's memory.

        >>> torch.utils.dlpack.from_dlpack(kiln.nd.array(np.ones(3)).to_dlpack())  # doctest: +SKIP
        """
        return self.__dlpack__()

    def _readable(self):
        return self.device.device_type == lib.kDLCPU

    def __str__(self):
        """The values as numpy prints them: ``[0. 1. 2.]`` (a GPU array's are copied back)."""
        if self._dl.device.device_type == lib.kDLCUDA:
            return str(self.numpy())
        return str(self._values()) if self._readable() else repr(self)

    def __repr__(self):
        """``kiln.nd.array([0., 1., 2.], dtype=float32)``, as numpy's repr with this module's
        name (and the device when it is not the CPU)."""
        if not self._readable():
            return f"kiln.nd.NDArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"
        import numpy as np
        body = np.array2string(self._values(), separator=", ", prefix="kiln.nd.array(")
        return f"kiln.nd.array({body}, dtype={self.dtype})"


def _copy_of(arr):
    result = empty(arr.shape, arr.dtype, arr.device)
    return result.copyfrom(arr._values())


def empty(shape, dtype="float32", device=None):
    """An uninitialised array of the given shape and dtype (64-byte aligned)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    code, bits, lanes = parse_dtype(dtype)
    device = device or cpu()
    if device.device_type == lib.kDLCUDA:
        from . import cuda_device as cuda
        return cuda.empty(shape, dtype, device)
    out = ffi.new("kiln_tensor_t**")
    check(lib.kiln_tensor_create(shape, len(shape), (code, bits, lanes),
                                 (device.device_type, device.device_id), out))
    return NDArray(out[0])


def array(obj, dtype=None, device=None):
    """A new runtime array holding a copy of `obj` (anything numpy.asarray accepts)."""
    import numpy as np

    if isinstance(dtype, Device):   # kiln.nd.array(x, kiln.cuda(0)), as in TVM's tutorials
        dtype, device = None, dtype
    if device is not None and device.device_type == lib.kDLCUDA:
        from . import cuda_device as cuda
        return cuda.array(obj, dtype, device)
    if isinstance(dtype, str) and (dtype in NARROW_FLOATS or subbyte.is_subbyte(dtype)):
        dtype = subbyte.numpy_dtype(dtype)   # ml_dtypes' type: numpy knows no such name
    source = np.asarray(obj, dtype=dtype)
    if not source.dtype.isnative:
        source = source.astype(source.dtype.newbyteorder("="))
    result = empty(source.shape, source.dtype, device)
    if subbyte.is_subbyte(source.dtype):   # ml_dtypes' int4...: one element a byte, packed here
        return result.copyfrom(source)
    if source.flags.c_contiguous:  # the common case: one memcpy into the compact new array
        ffi.memmove(result._dl.data, source, source.nbytes)
        return result
    return result.copyfrom(source)


def from_dlpack(obj):
    """An NDArray sharing the memory of `obj`, any DLPack producer (a numpy array, a torch
    tensor, a DLPack capsule...), without copying. It keeps the producer's memory alive."""
    if isinstance(obj, NDArray):
        return obj
    if type(obj).__name__ == "PyCapsule":
        capsule = obj
    elif hasattr(obj, "__dlpack__"):
        try:
            capsule = obj.__dlpack__(max_version=(lib.DLPACK_MAJOR_VERSION,
                                                  lib.DLPACK_MINOR_VERSION))
        except TypeError:  # a producer older than DLPack 1.0 and the max_version keyword
            capsule = obj.__dlpack__()
    else:
        raise TypeError(f"from_dlpack: {type(obj).__name__} does not support DLPack")
    out = ffi.new("kiln_tensor_t**")
    check(lib.kiln_py_tensor_from_capsule(ffi.cast("void*", id(capsule)), out))
    return NDArray(out[0])
