"""The CUDA device in Python: arrays in GPU memory, and running the kernels of
``kiln.build(mod, target="cuda")``.

    gpu = kiln.cuda(0)
    a = kiln.nd.array(np.arange(8, dtype="float32"), gpu)     # copied to the GPU
    b = kiln.nd.empty((8,), "float32", gpu)
    rt = kiln.build(sch.mod, target="cuda")                   # a CudaRuntimeModule
    rt(a, b); b.numpy()                                       # copied back

The C side is ``runtime_c/include/kiln_cuda.h``: the driver (libcuda.so.1) is opened when the
first array or module needs a GPU; without one that raises ``KilnError`` "no CUDA driver:
libcuda.so.1 not found (...)", and nothing else in Kiln changes.
"""
from __future__ import annotations

import threading

from ._base import KilnError, check, ffi, lib, parse_dtype
from .device import Device

_DEVICES = {}                 # ordinal -> the opened kiln_cuda_device_t (kept for the process)
_LOCK = threading.Lock()


def device_handle(device_id: int):
    """The runtime's handle of GPU ``device_id``, opening it (and the driver) on first use."""
    with _LOCK:
        handle = _DEVICES.get(device_id)
        if handle is None:
            out = ffi.new("kiln_cuda_device_t**")
            status = lib.kiln_cuda_device_open(device_id, out)
            if status != lib.KILN_OK:
                message = ffi.string(lib.kiln_last_error()).decode("utf-8", "replace")
                raise KilnError(message, status)
            handle = _DEVICES[device_id] = ffi.gc(out[0], lib.kiln_cuda_device_release)
        return handle


def is_available(device_id: int = 0) -> bool:
    """Whether GPU ``device_id`` can be opened (a driver is installed and reports it)."""
    try:
        device_handle(device_id)
        return True
    except KilnError:
        return False


def device_name(device_id: int = 0) -> str:
    """The GPU's name, as its driver reports it."""
    return ffi.string(lib.kiln_cuda_device_name(device_handle(device_id))).decode()


def is_cuda(device) -> bool:
    """Whether ``device`` (a Device or None) is a CUDA GPU."""
    return device is not None and device.device_type == lib.kDLCUDA


def empty(shape, dtype, device: Device):
    """An uninitialised array in the memory of GPU ``device``."""
    from .ndarray import NDArray
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    try:
        handle = device_handle(device.device_id)
    except KilnError as e:
        raise KilnError(f"cannot allocate on device {device.name}:{device.device_id}: {e}",
                        e.status) from None
    out = ffi.new("kiln_tensor_t**")
    check(lib.kiln_cuda_tensor_create(handle, shape, len(shape), parse_dtype(dtype), out))
    return NDArray(out[0])


def array(obj, dtype, device: Device):
    """A new array on GPU ``device`` holding a copy of ``obj`` (anything numpy.asarray takes)."""
    import numpy as np
    source = np.ascontiguousarray(np.asarray(obj, dtype=dtype))
    if not source.dtype.isnative:
        source = source.astype(source.dtype.newbyteorder("="))
    result = empty(source.shape, source.dtype, device)
    check(lib.kiln_cuda_copy_to_device(device_handle(device.device_id), result._handle,
                                       ffi.from_buffer(source), source.nbytes))
    return result


def to_numpy(arr):
    """The contents of a GPU array, copied into a new numpy array."""
    import numpy as np
    out = np.empty(arr.shape, dtype=arr.dtype)
    check(lib.kiln_cuda_copy_to_host(device_handle(arr.device.device_id), ffi.from_buffer(out),
                                     arr._handle, out.nbytes))
    return out


class CudaRuntimeModule:
    """The runtime side of a ``kiln.codegen.cuda.CudaModule``: call it like a CPU module,
    ``rt(a, b)`` (its only or ``main`` function) or ``rt["name"](a, b)``, with arrays on one
    GPU. Each call checks the arguments against the parameters (dtype, shape, device), binds
    the symbolic dimensions, launches the kernels in order and waits for them."""

    def __init__(self, compiled):
        self.compiled = compiled
        self._loaded = {}        # device ordinal -> (module handle, {kernel name: handle})

    @property
    def ptx(self) -> str:
        return self.compiled.ptx

    def function_names(self):
        """The names of the compiled tensor programs."""
        return list(self.compiled.functions)

    def __getitem__(self, name):
        if name not in self.compiled.functions:
            raise KeyError(f"no function '{name}' in the CUDA module (it has "
                           f"{', '.join(self.compiled.functions)})")
        return lambda *args: self._call(name, args)

    def __call__(self, *args):
        names = self.function_names()
        name = "main" if "main" in names else names[0]
        if len(names) > 1 and name != "main":
            raise TypeError(f"the module has several functions ({', '.join(names)}); call one by name")
        return self._call(name, args)

    def _kernels(self, device_id: int):
        if device_id not in self._loaded:
            handle = device_handle(device_id)
            out = ffi.new("kiln_cuda_module_t**")
            check(lib.kiln_cuda_module_load(handle, self.compiled.ptx.encode(), out))
            module = ffi.gc(out[0], lib.kiln_cuda_module_free)
            kernels = {}
            for name in self.compiled.kernel_names():
                k = ffi.new("void**")
                check(lib.kiln_cuda_module_kernel(module, name.encode(), k))
                kernels[name] = k[0]
            self._loaded[device_id] = (module, kernels)
        return self._loaded[device_id][1]

    def _call(self, name, args):
        from .ndarray import NDArray, from_dlpack
        info = self.compiled.functions[name]
        params = info["params"]
        if len(args) != len(params):
            raise TypeError(f"{name}: expected {len(params)} arguments, got {len(args)}")
        arrays = [a if isinstance(a, NDArray) else from_dlpack(a) for a in args]
        device = arrays[0].device if arrays else None
        env = {}
        for k, (p, a) in enumerate(zip(params, arrays)):
            where = f"{name}: argument {k} '{p['name']}'"
            if not is_cuda(a.device) or a.device != device:
                raise ValueError(f"{where} is on {a.device}; every argument must be on one CUDA "
                                 f"device ({device})")
            if a.dtype != p["dtype"]:
                raise TypeError(f"{where} expected dtype {p['dtype']}, got {a.dtype}")
            if len(a.shape) != len(p["shape"]):
                raise ValueError(f"{where} expected {len(p['shape'])} dimensions, got shape {a.shape}")
            for axis, (want, got) in enumerate(zip(p["shape"], a.shape)):
                want = env.setdefault(want, got) if isinstance(want, str) else want
                if want != got:
                    raise ValueError(f"{where} expected shape {tuple(p['shape'])} (axis {axis} = "
                                     f"{want}), got {a.shape}")
        scratch = launch_program(name, info, self._kernels(device.device_id),
                                 [data_pointer(a) for a in arrays], env, device)
        check(lib.kiln_cuda_synchronize(device_handle(device.device_id)))
        del scratch   # freed after the kernels that used it are done


def data_pointer(arr) -> int:
    """The device address of an NDArray's first element."""
    return int(ffi.cast("uintptr_t", arr._dl.data)) + arr._dl.byte_offset


def launch_program(name, info, kernels, pointers, env, device):
    """Launch the kernels of one compiled tensor program (``info``: its description in a
    ``CudaModule``) on the buffers at device addresses ``pointers`` (its parameters, in order),
    with the symbolic dimensions ``env`` (name -> int); ``kernels``: entry name -> handle.
    Asynchronous; its global scratch buffers (fresh device memory) are returned, and must
    outlive the launches (the driver frees memory only after the work queued before it)."""
    from ..codegen.cuda.kernels import eval_json
    scratch = [empty([eval_json(e, env) for e in s["shape"]], s["dtype"], device)
               for s in info.get("scratch", ())]
    values = [ffi.new("uint64_t*", p) for p in list(pointers) + [data_pointer(a) for a in scratch]]
    values += [ffi.new("int64_t*", env[d]) for d in info["dims"]]
    argv = ffi.new("void*[]", [ffi.cast("void*", v) for v in values] or [ffi.NULL])
    handle = device_handle(device.device_id)
    for k in info["kernels"]:
        grid = [eval_json(g, env) for g in k["grid"]]
        if min(grid) < 0 or max(grid) >= 2 ** 31:
            raise ValueError(f"{name}: kernel {k['name']} has grid {tuple(grid)} for these shapes")
        check(lib.kiln_cuda_launch(handle, kernels[k["name"]], grid, k["block"], 0, argv))
    return scratch
