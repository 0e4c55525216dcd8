"""Codegen: tensor programs (PrimFuncs) to LLVM IR, object code and shared libraries.

>>> from kiln import codegen
>>> cm = codegen.compile_module(mod, "llvm")           # doctest: +SKIP
>>> cm.assembly(); cm.object_code()                    # doctest: +SKIP
>>> path = codegen.build_library(mod, "llvm")          # doctest: +SKIP

The generated entry points and the library table follow ``runtime_c/include/kiln_kernel_abi.h``;
``kiln.codegen.abi`` documents exactly what is emitted.
"""
from .errors import CodegenError
from .target import Target, host_target, parse_target
from .emit import BuildOptions, CompiledModule, build_library, compile_module, lower_to_llvm

__all__ = ["CodegenError", "Target", "host_target", "parse_target", "BuildOptions",
           "CompiledModule", "build_library", "compile_module", "lower_to_llvm"]
