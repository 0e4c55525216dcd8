"""Executables: graph functions as VM bytecode plus kernels, serialized and linked into one library.

>>> ex = kiln.compile(mod, target="llvm")     # doctest: +SKIP

- ``format``: the blob of ``docs/executable-format.md``: data model, ``serialize``, ``deserialize``;
- ``lower`` / ``plan``: graph functions -> bytecode, with static memory planning;
- ``executable``: ``compile`` -> ``Executable`` (a shared library holding kernels and blob).

Importing this package is cheap: LLVM loads on the first ``compile``.
"""
from .format import (ExecutableSpec, FormatError, FunctionSpec, Instruction, Op, ParamSpec, deserialize,
                     serialize)
from .lower import LowerError, lower_module
from .plan import MemoryPlan, plan_memory
from .executable import Executable, ExecutableStats, compile, load_spec, read_blob

__all__ = ["ExecutableSpec", "FunctionSpec", "ParamSpec", "Instruction", "Op", "FormatError",
           "serialize", "deserialize", "LowerError", "lower_module", "MemoryPlan", "plan_memory",
           "Executable", "ExecutableStats", "compile", "load_spec", "read_blob"]
