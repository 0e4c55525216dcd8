"""From IRModule to optimized LLVM module, assembly, object file and shared library.

>>> cm = compile_module(mod, "llvm")                 # doctest: +SKIP
>>> print(cm.assembly())                             # doctest: +SKIP
>>> path = build_library(mod, "llvm")                # a cached .so the runtime can load
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import llvmlite.binding as llvm
from llvmlite import ir

from ..ir.function import IRModule, PrimFunc
from .abi import KernelInfo, emit_library_info, kernel_symbol, lower_kernel
from .errors import CodegenError
from .lower import ModuleContext
from .target import Target, parse_target

# Bump when the generated code changes for the same input, so cached libraries are rebuilt.
CODEGEN_VERSION = "1"


def _default_cache_dir() -> str:
    # KILN_CACHE_DIR is the one environment variable Kiln reads; it is read here, once, into
    # the options object, and nothing downstream looks at the environment.
    return os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln")


@dataclass(frozen=True)
class BuildOptions:
    """How libraries are built: where they are cached and which C compiler links them."""
    cache_dir: str = field(default_factory=_default_cache_dir)
    cc: str = "cc"
    opt_level: int = 3


def as_module(mod) -> IRModule:
    """``mod`` as an IRModule: a PrimFunc becomes {"main": func}, a Schedule gives its ``.mod``."""
    if isinstance(mod, IRModule):
        return mod
    if isinstance(mod, PrimFunc):
        return IRModule({"main": mod})
    inner = getattr(mod, "mod", None)  # a kiln.Schedule
    if isinstance(inner, IRModule):
        return inner
    raise CodegenError(f"cannot compile a {type(mod).__name__}: expected an IRModule, a PrimFunc "
                       "or a Schedule")


def lower_to_llvm(mod, target, allow_empty: bool = False) -> tuple:
    """Lower every PrimFunc of ``mod`` to one llvmlite module (unoptimized).
    Returns ``(ir_module, kernels, notes)``. Non-PrimFunc functions are skipped. A module with
    no PrimFunc is an error unless ``allow_empty`` (then the library table lists no kernels)."""
    mod = as_module(mod)
    target = parse_target(target)
    tm = target.create_target_machine()
    module = ir.Module(name="kiln")
    module.triple = target.triple
    module.data_layout = str(tm.target_data)
    mctx = ModuleContext(module, target)
    kernels: List[KernelInfo] = []
    taken: set = set()
    for name, func in mod.items():
        if isinstance(func, PrimFunc):
            kernels.append(lower_kernel(mctx, name, func, kernel_symbol(name, taken)))
    if not kernels and not allow_empty:
        raise CodegenError("the module has no tensor programs (PrimFuncs) to compile")
    emit_library_info(module, kernels)
    return module, kernels, mctx.notes


def _parse(text: str, what: str):
    try:
        m = llvm.parse_assembly(text)
        m.verify()
    except RuntimeError as e:
        # Invalid IR is a bug in codegen, not in the user's program: say so plainly.
        raise CodegenError(f"internal error: codegen produced invalid LLVM IR ({what}): {e}") from None
    return m


def optimize(llmod, tm, opt_level: int = 3) -> None:
    """Run LLVM's standard O1-O3 pipeline (new pass manager) with loop and SLP vectorization."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = True
    pto.loop_interleaving = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(llmod, pb)


class CompiledModule:
    """A module compiled for one target: optimized LLVM IR, assembly, object code.

    ``kernels`` lists the entry points (``KernelInfo``), ``notes`` anything codegen wants the
    user to know (e.g. vectorized loops it left to LLVM's vectorizer, and why).
    """

    def __init__(self, target: Target, llmod, tm, kernels: List[KernelInfo], notes: List[str]):
        self.target, self._mod, self._tm = target, llmod, tm
        self.kernels, self.notes = kernels, notes
        self._obj: Optional[bytes] = None

    def llvm_ir(self) -> str:
        return str(self._mod)

    def assembly(self) -> str:
        return self._tm.emit_assembly(self._mod)

    def object_code(self) -> bytes:
        if self._obj is None:
            self._obj = bytes(self._tm.emit_object(self._mod))
        return self._obj

    def save_object(self, path: str) -> str:
        with open(path, "wb") as f:
            f.write(self.object_code())
        return path


def compile_module(mod, target="llvm", options: Optional[BuildOptions] = None) -> CompiledModule:
    """Lower, verify and optimize ``mod`` (an IRModule, PrimFunc or Schedule) for ``target``."""
    options = options or BuildOptions()
    target = parse_target(target)
    module, kernels, notes = lower_to_llvm(mod, target)
    return _compile_ir(str(module), target, kernels, notes, options)


def _compile_ir(text, target, kernels, notes, options) -> CompiledModule:
    tm = target.create_target_machine(opt=options.opt_level)
    llmod = _parse(text, "before optimization")
    optimize(llmod, tm, options.opt_level)
    llmod.verify()
    return CompiledModule(target, llmod, tm, kernels, notes)


def build_library(mod, target="llvm", options: Optional[BuildOptions] = None, *,
                  extra_objects: Optional[Callable[[Target], List[bytes]]] = None,
                  extra_key: str = "", allow_empty: bool = False) -> str:
    """Compile ``mod`` and link it into a shared library in the cache; returns its path.

    The cache key is a hash of the unoptimized LLVM IR, the target and the codegen version, so
    a hit skips LLVM entirely. Only targets this machine can link for are accepted.

    ``extra_objects(target)`` returns more object files (bytes) to link in; it is called only
    on a cache miss, so ``extra_key`` must identify their content (it joins the cache key).
    ``kiln.executable`` links the executable blob this way (with ``allow_empty`` for models
    made only of external functions).
    """
    options = options or BuildOptions()
    target = parse_target(target)
    if not target.linkable:
        raise CodegenError(f"cannot link a library for {target.triple} on this machine; use "
                           "compile_module(mod, target).save_object(path) and link the object "
                           "with that platform's toolchain")
    module, kernels, notes = lower_to_llvm(mod, target, allow_empty)
    text = str(module)
    key = hashlib.sha256("\0".join([CODEGEN_VERSION, str(target), target.cpu, target.features,
                                    str(options.opt_level), text]
                                   + ([extra_key] if extra_key else [])).encode()).hexdigest()[:32]
    os.makedirs(options.cache_dir, exist_ok=True)
    path = os.path.join(options.cache_dir, f"kiln_{key}.so")
    if os.path.exists(path):
        return path
    compiled = _compile_ir(text, target, kernels, notes, options)
    with tempfile.TemporaryDirectory(dir=options.cache_dir) as tmp:
        objs = [compiled.save_object(os.path.join(tmp, "kernels.o"))]
        for k, data in enumerate(extra_objects(target) if extra_objects else []):
            objs.append(os.path.join(tmp, f"extra{k}.o"))
            with open(objs[-1], "wb") as f:
                f.write(data)
        out = os.path.join(tmp, "kernels.so")
        cmd = [options.cc, "-shared", "-fPIC", "-o", out, *objs, "-lm"]
        if shutil.which(options.cc) is None:
            raise CodegenError(f"C compiler {options.cc!r} not found; it is needed to link kernel "
                               "libraries (set BuildOptions(cc=...))")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CodegenError(f"linking failed: {' '.join(cmd)}\n{proc.stderr.strip()}")
        os.replace(out, path)  # atomic: concurrent builders never see a half-written library
    return path
