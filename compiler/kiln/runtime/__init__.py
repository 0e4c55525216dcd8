"""``kiln.runtime``: the Python binding of Kiln's C runtime (the cffi extension ``kiln._ffi``,
built from runtime_c/ by runtime_c/build_ffi.py).

    rt = kiln.runtime.load_module("kernels.so")
    a = kiln.runtime.nd.array(np.arange(8, dtype="float32"))
    b = kiln.runtime.nd.empty((8,), "float32")
    rt(a, b)                 # or rt["main"](a, b); numpy arrays are passed without copying

    vm = kiln.runtime.VirtualMachine(executable, kiln.runtime.cpu())   # a compiled model
    y = vm["forward"](x, *params)

    @kiln.runtime.register_func("env.relu")  # an external function executables call by name
    def relu(x, out): ...
"""

from . import nd
from ._base import KilnError, check, ffi, lib
from .device import Device, cpu, cuda
from .module import Function, Module, load_module
from .ndarray import NDArray
from .registry import get_func, register_func, unregister_func
from .vm import ProfileReport, VirtualMachine


def set_num_threads(n):
    """Sets how many threads run kernels' parallel loops (0: the number of cores)."""
    check(lib.kiln_set_num_threads(n))


def get_num_threads():
    """How many threads run kernels' parallel loops."""
    return lib.kiln_get_num_threads()


__all__ = ["Device", "Function", "KilnError", "Module", "NDArray", "ProfileReport",
           "VirtualMachine", "cpu", "cuda", "get_func", "get_num_threads", "load_module", "nd",
           "register_func", "set_num_threads", "unregister_func"]
