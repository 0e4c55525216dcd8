"""``kiln.VirtualMachine``: runs a compiled model through the runtime's bytecode VM.

    vm = kiln.VirtualMachine(kiln.compile(mod, "llvm"), kiln.cpu())
    y = vm["forward"](x, *params)              # NDArray (or a tuple of them)
    print(vm.profile("forward", x, *params))   # per-kernel times

A thin layer over the C object model: the executable's library module has ``load_executable``,
which returns a VM module with ``init(device)``, ``profile(name, ...)`` and one function per
graph function (docs/executable-format.md).
"""

import os
from typing import NamedTuple

from ._base import KilnError, check, lib
from .device import Device, cpu
from .module import Module, load_module
from .timing import time_evaluator


class VirtualMachine:
    """A compiled model, loaded and initialised for a device.

    ``executable`` is an ``Executable`` (from ``kiln.compile``), a runtime Module (a library
    from ``kiln.load_module("model.so")``, or a VM module from its ``load_executable``) or the
    path of an exported library. ``device`` defaults to ``kiln.cpu()``. ``num_threads`` caps the
    threads of this VM's parallel loops (``set_num_threads``).
    ``vm["forward"]`` is a ``kiln.Function``: call it with NDArrays or numpy arrays (shared
    without copying); it returns an NDArray or a tuple. Errors raise ``kiln.KilnError`` with the
    runtime's message, e.g. ``forward: argument 0 'x' expected shape (1, 784), got (1, 785)``.
    Calls may run concurrently from several threads.
    """

    def __new__(cls, executable=None, device=None, num_threads=None):
        # A GPU runs the bytecode through kiln.runtime.cuda_vm (the C VM is CPU-only).
        gpu = Device(device) if isinstance(device, str) else device
        if cls is VirtualMachine and _is_gpu(gpu):
            from .cuda_vm import CudaVirtualMachine
            return CudaVirtualMachine(executable, gpu)
        if getattr(getattr(executable, "spec", None), "cuda", None) is not None:
            raise KilnError("the executable was compiled for target 'cuda': run it on a GPU, "
                            "kiln.VirtualMachine(ex, kiln.cuda(0))", lib.KILN_ERR_UNSUPPORTED)
        return super().__new__(cls)

    def __init__(self, executable, device=None, num_threads=None):
        self._executable = None  # an Executable owns its library file: keep it alive
        if isinstance(executable, Module):
            module = executable
        elif isinstance(executable, (str, os.PathLike)):
            module = load_module(executable)
        elif hasattr(executable, "library_path"):
            self._executable = executable
            module = load_module(executable.library_path)
        else:
            raise TypeError("VirtualMachine takes an Executable, a runtime Module or a library path, "
                            f"not {type(executable).__name__}")
        if module.kind != "vm":
            if "load_executable" not in module:
                raise KilnError(f"{module!r} holds no executable (no function 'load_executable'): it is "
                                "a kernel library, not a compiled model", lib.KILN_ERR_NOT_FOUND)
            module = module["load_executable"]()
        self.module = module
        if isinstance(device, str):
            device = Device(device)
        self.device = device if device is not None else cpu()
        module["init"](self.device)
        if num_threads is not None:
            self.set_num_threads(num_threads)

    def set_num_threads(self, num_threads):
        """Caps the threads this VM's kernels use for their parallel loops (0: follow the
        process-wide ``kiln.set_num_threads``); other VMs keep their own. From C:
        ``kiln_vm_set_num_threads``, and ``kiln_vm_set_thread_pool`` to run on the host
        application's thread pool."""
        check(lib.kiln_vm_set_num_threads(self.module._handle, int(num_threads)))

    @property
    def function_names(self):
        """The graph functions ("forward", ...), without the VM's own init and profile."""
        return [n for n in self.module.function_names if n not in ("init", "profile")]

    def __getitem__(self, name):
        return self.module[name]

    def __contains__(self, name):
        return name in self.function_names

    def profile(self, name, *args):
        """Runs function ``name`` on ``args`` once and returns a ``ProfileReport``: per kernel,
        external function and other VM instruction, its calls and total time."""
        return ProfileReport(name, [ProfileRow(*row) for row in self.module["profile"](name, *args)])

    def time_evaluator(self, name, device=None, number=10, repeat=1, min_repeat_ms=0):
        """A timer for function ``name``: ``vm.time_evaluator("forward", kiln.cpu(), number=10,
        repeat=3)(x, *params)`` returns a ``BenchmarkResult`` (seconds per call: ``mean``,
        ``median``, ``std``, ``min``, ``max``, ``results``); see ``kiln.runtime.timing``.
        ``device``, when given, must be the VM's own."""
        if device is not None and device != self.device:
            raise ValueError(f"time_evaluator: this VM runs on {self.device!r}, not {device!r}")
        return time_evaluator(self.module[name], number, repeat, min_repeat_ms)

    def __repr__(self):
        return f"kiln.VirtualMachine({', '.join(self.function_names)}; {self.device!r})"


def _is_gpu(device) -> bool:
    return isinstance(device, Device) and device.device_type == lib.kDLCUDA


class ProfileRow(NamedTuple):
    name: str      # kernel or external function name, opcode name, or "total"
    kind: str      # "kernel", "extern", "vm" or "total"
    calls: int
    total_us: float


class ProfileReport:
    """What ``VirtualMachine.profile`` measured: ``rows`` (ProfileRow), ``total_us`` (the whole
    call, argument checks included), ``kernels`` (name -> total µs). ``str(report)`` is a table,
    slowest first."""

    def __init__(self, function, rows):
        self.function = function
        self.rows = [r for r in rows if r.kind != "total"]
        total = [r for r in rows if r.kind == "total"]
        self.total_us = total[0].total_us if total else sum(r.total_us for r in self.rows)

    @property
    def kernels(self):
        return {r.name: r.total_us for r in self.rows if r.kind == "kernel"}

    def __str__(self):
        rows = sorted(self.rows, key=lambda r: -r.total_us)
        width = max([len(r.name) for r in rows] + [len("total")])
        lines = [f"profile of {self.function!r}",
                 f"{'name':<{width}}  {'kind':<6}  {'calls':>5}  {'total us':>10}  {'%':>6}"]
        for r in rows:
            share = 100.0 * r.total_us / self.total_us if self.total_us else 0.0
            lines.append(f"{r.name:<{width}}  {r.kind:<6}  {r.calls:>5}  {r.total_us:>10.1f}  {share:>5.1f}%")
        lines.append(f"{'total':<{width}}  {'':<6}  {'':>5}  {self.total_us:>10.1f}  {100.0:>5.1f}%")
        return "\n".join(lines)

    def __repr__(self):
        return f"ProfileReport({self.function!r}, {len(self.rows)} rows, {self.total_us:.1f} us)"


__all__ = ["ProfileReport", "ProfileRow", "VirtualMachine"]
