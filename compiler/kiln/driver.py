"""``kiln.build``: lower scheduled tensor programs, compile them into a kernel library, load it.

>>> rt = kiln.build(mod, target="llvm")     # doctest: +SKIP
>>> rt(a, b)                                # or rt["main"](a, b)

The module is named ``driver``, not ``build``: a submodule ``kiln.build`` would replace the
function ``kiln.build`` on the package the moment anything imported it. Importing this module
is cheap; codegen (and LLVM) load on the first call.
"""
from __future__ import annotations


def lower(mod):
    """``mod`` (IRModule, PrimFunc or Schedule) as an IRModule whose PrimFuncs went through the
    lowering passes (``kiln.lower.lower_prim_func``: blocks made opaque, scratch buffers
    compacted to the loop that uses them, indices simplified). Other functions pass through."""
    from .codegen.emit import as_module
    from .ir import IRModule, PrimFunc
    from .lower import lower_prim_func
    mod = as_module(mod)
    return IRModule({name: lower_prim_func(f) if isinstance(f, PrimFunc) else f
                     for name, f in mod.items()}, mod.attrs)


def build(mod, target="llvm", options=None):
    """Compile ``mod`` (an IRModule, a PrimFunc, or a ``kiln.Schedule``, whose ``.mod`` is
    used) for ``target`` into a cached shared library, and load it with
    ``kiln.runtime.load_module``; returns the runtime Module (callable; ``rt["name"]`` gives
    one function). ``options`` is a ``kiln.codegen.BuildOptions`` (cache directory, C compiler).
    ``target="cuda"`` (or ``"cuda -arch=sm_80"``) compiles thread-bound programs to PTX and
    returns a ``kiln.runtime.cuda_device.CudaRuntimeModule`` that runs them on ``kiln.cuda(n)``.
    Only targets this machine can run are accepted; for others use
    ``kiln.codegen.compile_module(kiln.driver.lower(mod), target).save_object(path)``.
    """
    from . import codegen
    from .codegen.cuda import compile_cuda, is_cuda_target
    from .codegen.emit import as_module
    from .runtime import load_module
    if is_cuda_target(target):   # kernels for kiln.cuda(n): PTX, launched by kiln.runtime.cuda_device
        from .runtime.cuda_device import CudaRuntimeModule
        return CudaRuntimeModule(compile_cuda(as_module(mod), target))
    path = codegen.build_library(as_module(mod), target, options, lower=True)  # lowers each kernel
    return load_module(path)
