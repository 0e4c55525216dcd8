"""CUDA code generation: thread-bound tensor programs to PTX through LLVM's NVPTX backend.

>>> from kiln.codegen.cuda import compile_cuda
>>> cm = compile_cuda(sch.mod, "cuda -arch=sm_80")     # doctest: +SKIP
>>> print(cm.ptx)                                     # doctest: +SKIP

``kiln.build(mod, target="cuda")`` compiles with it and returns a runtime module that launches
the kernels on ``kiln.cuda(0)`` (``kiln.runtime.cuda_device``). docs/cuda.md says what works.
"""
from .module import CudaModule, compile_cuda
from .target import CudaTarget, is_cuda_target, parse_cuda_target

__all__ = ["CudaModule", "CudaTarget", "compile_cuda", "is_cuda_target", "parse_cuda_target"]
