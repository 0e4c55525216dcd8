"""A compiled model on an NVIDIA GPU: ``kiln.VirtualMachine(ex, kiln.cuda(0))``.

    ex = kiln.compile(mod, target="cuda", pipeline="default")
    vm = kiln.VirtualMachine(ex, kiln.cuda(0))        # a CudaVirtualMachine
    y = vm["forward"](x, *params)                      # NDArrays on the GPU (numpy inputs are copied in)
    y.numpy()                                          # copied back

It runs the executable's bytecode (docs/executable-format.md) with every tensor on the device:
the GPU code is loaded from the blob's CUDA section by the C runtime
(``kiln_cuda_executable_load``: every byte of the section checked, the PTX loaded, each kernel
entry resolved); the constants are copied to the GPU once, at load; each call takes one device
allocation of the function's planned arena (``arena_size``) and its ALLOC_ARENA tensors are
views into it at their planned offsets, as the CPU VM does; ALLOC_OUTPUT tensors are device
arrays returned to the caller; CALL_KERNEL launches the program's kernels with grid sizes
evaluated for the call's shapes. Host-device copies happen only at the boundary: numpy inputs
(in), and an IF condition (one element, read to choose the branch). The calls are serialised
(one at a time per VM); the call waits for the GPU before returning.
"""
from __future__ import annotations

import os
import threading
from typing import List

import numpy as np

from ._base import KilnError, check, ffi, lib
from .cuda_device import data_pointer, device_handle, empty, is_cuda, launch_program

_OP = dict(LOAD_CONST=1, ALLOC_ARENA=2, ALLOC_OUTPUT=3, CALL_KERNEL=4, CALL_EXTERN=5, MAKE_TUPLE=6,
           GET_ITEM=7, MOVE=8, RET=9, IF=10, FREE=11)


class _View:
    """A tensor inside another device allocation (an arena view): address, shape, dtype."""
    __slots__ = ("ptr", "shape", "dtype")

    def __init__(self, ptr: int, shape, dtype: str):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), dtype


def _device_of(v, device):
    """The device of an NDArray; an arena view is on the VM's own."""
    return device if isinstance(v, _View) else v.device


def _ptr(v) -> int:
    return v.ptr if isinstance(v, _View) else data_pointer(v)


def _blob_of(executable) -> bytes:
    from ..executable.executable import read_blob
    if hasattr(executable, "blob"):
        return executable.blob
    if isinstance(executable, (str, os.PathLike)):
        return read_blob(executable)
    raise TypeError("a CUDA VirtualMachine takes an Executable from kiln.compile(mod, target='cuda') "
                    f"or the path of its exported library, not {type(executable).__name__}")


class CudaVirtualMachine:
    """A model compiled for ``target="cuda"``, loaded on GPU ``device`` (see the module doc)."""

    def __init__(self, executable, device):
        from ..executable.format import deserialize
        blob = _blob_of(executable)
        self._executable = executable          # keeps an Executable's library file alive
        self.spec = deserialize(blob)
        if self.spec.cuda is None:
            raise KilnError(f"the executable was compiled for {self.spec.target!r}, not for a GPU: "
                            "compile it with kiln.compile(mod, target='cuda') to run on "
                            f"{device.name}:{device.device_id}", lib.KILN_ERR_UNSUPPORTED)
        if self.spec.externs:
            raise KilnError(f"external functions ({', '.join(self.spec.externs)}) are not supported "
                            "on the CUDA device yet", lib.KILN_ERR_UNSUPPORTED)
        self.device = device
        out = ffi.new("kiln_cuda_executable_t**")
        # The C loader checks the section's every byte, then opens the GPU and loads the PTX.
        status = lib.kiln_cuda_executable_load(device.device_id, blob, len(blob), out)
        if status != lib.KILN_OK:
            message = ffi.string(lib.kiln_last_error()).decode("utf-8", "replace")
            raise KilnError(f"cannot load the model on device {device.name}:{device.device_id}: "
                            f"{message}", status)
        self._loaded = ffi.gc(out[0], lib.kiln_cuda_executable_free)
        self._kernels = {}
        for k in range(lib.kiln_cuda_executable_num_kernels(self._loaded)):
            name = ffi.string(lib.kiln_cuda_executable_kernel_name(self._loaded, k)).decode()
            self._kernels[name] = lib.kiln_cuda_executable_kernel(self._loaded, k)
        from .cuda_device import array
        self._constants = [array(c, c.dtype, device) for c in self.spec.constants]
        self._lock = threading.Lock()

    @property
    def function_names(self) -> List[str]:
        """The graph functions ("forward", ...)."""
        return [f.name for f in self.spec.functions if not f.private]

    def __contains__(self, name):
        return name in self.function_names

    def __getitem__(self, name):
        if name not in self.function_names:
            raise KeyError(f"no function {name!r}; functions: {self.function_names}")
        return lambda *args: self.call(name, *args)

    def call(self, name, *args):
        """Run graph function ``name`` on ``args`` (device NDArrays, or host arrays copied in)."""
        with self._lock:
            keep = []       # scratch and arenas of this call, freed once the GPU is done
            out = self._run(self.spec.function(name), list(args), keep)
            check(lib.kiln_cuda_synchronize(device_handle(self.device.device_id)))
            return out

    # ---- the interpreter ------------------------------------------------------------------------
    def _arguments(self, f, args):
        from ..ir.derived_dims import evaluate
        from .ndarray import NDArray, array, from_dlpack
        if len(args) != len(f.params):
            raise TypeError(f"{f.name}: expected {len(f.params)} arguments, got {len(args)}")
        values, env = [], {}
        for k, (p, a) in enumerate(zip(f.params, args)):
            where = f"{f.name}: argument {k} '{p.name}'"
            if isinstance(a, _View):     # an IF branch's argument in the caller's arena
                pass
            elif not isinstance(a, NDArray):
                a = from_dlpack(a) if hasattr(a, "__dlpack__") and not isinstance(a, np.ndarray) else a
            if not isinstance(a, (NDArray, _View)) or not is_cuda(_device_of(a, self.device)):
                a = array(np.asarray(a.numpy() if isinstance(a, NDArray) else a), device=self.device)
            if _device_of(a, self.device) != self.device:
                raise ValueError(f"{where} is on {a.device}; this model runs on {self.device}")
            if a.dtype != p.dtype or len(a.shape) != len(p.shape):
                raise ValueError(f"{where} expected {p.dtype} of shape {tuple(p.shape)}, got "
                                 f"{a.dtype} {a.shape}")
            for axis, (want, got) in enumerate(zip(p.shape, a.shape)):
                want = env.setdefault(want, got) if isinstance(want, str) else want
                if want != got:
                    raise ValueError(f"{where} expected shape {tuple(p.shape)} (axis {axis} = "
                                     f"{want}), got {a.shape}")
            values.append(a)
        dims = evaluate(f.sym_names, f.derived, env)
        for d, (bound, value) in enumerate(zip(f.bounds, dims)):
            if 0 <= bound < value:
                raise ValueError(f"{f.name}: dimension {f.dim_names()[d]} = {value} is over its "
                                 f"bound {bound}")
        return values, dims

    def _run(self, f, args, keep):
        from ..executable.format import dtype_from_dl
        values, dims = self._arguments(f, args)
        regs = [None] * f.num_registers
        regs[:len(values)] = values
        arena = None
        if f.arena_size:
            arena = empty((f.arena_size,), "uint8", self.device)
            keep.append(arena)

        def shape(codes):
            return [c if c >= 0 else dims[-1 - c] for c in codes]

        for ins in f.code:
            op, o = int(ins.opcode), list(ins.operands)
            if op == _OP["LOAD_CONST"]:
                regs[o[0]] = self._constants[o[1]]
            elif op == _OP["ALLOC_ARENA"]:
                regs[o[0]] = _View(data_pointer(arena) + o[1], shape(o[6:6 + o[5]]),
                                   dtype_from_dl(o[2], o[3], o[4]))
            elif op == _OP["ALLOC_OUTPUT"]:
                regs[o[0]] = empty(shape(o[5:5 + o[4]]), dtype_from_dl(o[1], o[2], o[3]), self.device)
            elif op == _OP["CALL_KERNEL"]:
                self._call_kernel(self.spec.kernels[o[0]], [regs[r] for r in o[2:2 + o[1]]], keep)
            elif op == _OP["MAKE_TUPLE"]:
                regs[o[0]] = tuple(regs[r] for r in o[2:2 + o[1]])
            elif op == _OP["GET_ITEM"]:
                regs[o[0]] = regs[o[1]][o[2]]
            elif op == _OP["MOVE"]:
                regs[o[0]] = regs[o[1]]
            elif op == _OP["FREE"]:
                # Kept until the call is done: kernels queued before may still read it.
                keep.append(regs[o[0]])
                regs[o[0]] = None
            elif op == _OP["IF"]:
                cond = self._host_scalar(regs[o[1]])
                callee = self.spec.functions[o[2] if cond else o[3]]
                regs[o[0]] = self._run(callee, [regs[r] for r in o[5:5 + o[4]]], keep)
            elif op == _OP["RET"]:
                return self._owned(regs[o[0]], keep)
            else:
                raise KilnError(f"{f.name}: opcode {op} is not supported on the CUDA device",
                                lib.KILN_ERR_UNSUPPORTED)
        raise KilnError(f"{f.name}: the bytecode ends without RET", lib.KILN_ERR_INVALID_FORMAT)

    def _call_kernel(self, name, tensors, keep):
        info = self.spec.cuda.functions[name]
        env = {}
        for p, t in zip(info["params"], tensors):
            for want, got in zip(p["shape"], t.shape):
                if isinstance(want, str):
                    env.setdefault(want, got)
        keep.extend(launch_program(name, info, self._kernels, [_ptr(t) for t in tensors], env,
                                   self.device))

    def _host_scalar(self, value) -> bool:
        """An IF condition's one element, read back from the GPU."""
        if isinstance(value, _View):
            raise KilnError("an IF condition in planned (arena) storage is not supported on the "
                            "CUDA device", lib.KILN_ERR_UNSUPPORTED)
        out = np.empty(value.shape, dtype=value.dtype)
        check(lib.kiln_cuda_synchronize(device_handle(self.device.device_id)))
        check(lib.kiln_cuda_copy_to_host(device_handle(self.device.device_id), ffi.from_buffer(out),
                                         value._handle, out.nbytes))
        return bool(out.reshape(-1)[0])

    def _owned(self, value, keep):
        """A returned value the caller owns: an arena view is copied out of the arena."""
        if isinstance(value, tuple):
            return tuple(self._owned(v, keep) for v in value)
        if isinstance(value, _View):
            raise KilnError("a function returning planned (arena) storage is not supported on the "
                            "CUDA device", lib.KILN_ERR_UNSUPPORTED)
        return value

    def __repr__(self):
        return f"kiln.VirtualMachine({', '.join(self.function_names)}; {self.device!r})"
