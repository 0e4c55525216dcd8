"""From IRModule to optimized LLVM module, assembly, object file and shared library.

>>> cm = compile_module(mod, "llvm")                 # doctest: +SKIP
>>> print(cm.assembly())                             # doctest: +SKIP
>>> path = build_library(mod, "llvm")                # a cached .so the runtime can load

``build_library`` compiles every kernel as its own LLVM module into its own object (cached by a
hash of its IR), plus one small object for the library table; for a big module the LLVM work
runs in worker processes (``kiln.codegen.objcompile``) while Python lowers the next kernels.
Each object depends only on its kernel's IR, and the objects are linked in kernel order, so the
library is the same however the work was spread.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional

from llvmlite import ir

from ..ir.function import IRModule, PrimFunc
from . import cache_limit, objcompile
from .abi import ENTRY_FN, KernelInfo, emit_library_info, kernel_symbol, lower_kernel
from .errors import CodegenError
from .lower import ModuleContext
from .cache_limit import default_cache_limit
from .target import Target, llvm_triple, parse_target

# Bump when the generated code changes for the same input, so cached libraries are rebuilt.
CODEGEN_VERSION = "2"
# Worker processes start once this process has spent this long on a module's kernels with at
# least two left: small modules never pay a worker's start-up (Python, Kiln and LLVM load,
# about 0.3-0.5 s), big ones get every CPU.
PARALLEL_AFTER_S = 0.3
MAX_JOBS = 8


def default_cache_dir() -> str:
    """Kiln's cache folder: ``KILN_CACHE_DIR``, else ``~/.cache/kiln``."""
    # KILN_CACHE_DIR is the one environment variable Kiln reads, here only: into the options
    # object (BuildOptions.cache_dir) and for the schedule cache (kiln.transform.schedule_cache).
    return os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln")


# The C compilers tried, in order, to link kernel libraries when BuildOptions.cc is not given:
# the system's default, then gcc and clang by name (an image may have one without a `cc` link).
CC_CANDIDATES = ("cc", "gcc", "clang")


def find_cc() -> str:
    """The first of ``CC_CANDIDATES`` on PATH; ``"cc"`` when there is none, so that linking
    fails with the error naming every candidate."""
    return next((c for c in CC_CANDIDATES if shutil.which(c)), CC_CANDIDATES[0])


@dataclass(frozen=True)
class BuildOptions:
    """How libraries are built: where they are cached and how big that folder may grow
    (``cache_limit`` bytes, 0 = no limit; ``kiln.codegen.cache_limit``), which C compiler links
    them, and how many processes run LLVM (``jobs``: 0 = one per CPU this process may use, at
    most 8; 1 = all in this process). ``jobs`` changes only the time a build takes, never the
    library."""
    cache_dir: str = field(default_factory=default_cache_dir)
    cache_limit: int = field(default_factory=default_cache_limit)
    cc: str = field(default_factory=find_cc)
    opt_level: int = 3
    jobs: int = 0


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
    module = _new_module("kiln", target)
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


_DATA_LAYOUTS: Dict[str, str] = {}


def _new_module(name: str, target: Target) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = llvm_triple(target.triple)
    key = str(target)
    if key not in _DATA_LAYOUTS:
        _DATA_LAYOUTS[key] = str(target.create_target_machine().target_data)
    module.data_layout = _DATA_LAYOUTS[key]
    return module


def library_table(kernels: List[KernelInfo], target) -> str:
    """LLVM IR text of a module holding only ``kiln_library_info`` for ``kernels``, whose entry
    points it declares (they are defined in the kernels' own objects)."""
    target = parse_target(target)
    module = _new_module("kiln_table", target)
    declared = [replace(k, fn=ir.Function(module, ENTRY_FN, k.symbol)) for k in kernels]
    emit_library_info(module, declared)
    return str(module)


def cpu_check_module(target) -> str:
    """LLVM IR text of the module holding the CPU features a library for ``target`` needs and
    their load-time check (``kiln.codegen.cpu_features``). It is the same for every library
    of a target, so its object is compiled once per cache (about 9 ms each time on x86-64,
    where the library table alone takes a fraction of a millisecond)."""
    from .cpu_features import library_ir
    target = parse_target(target)
    return str(_new_module("kiln_cpu", target)) + "\n" + library_ir(target)


def _parse(text: str, what: str):
    try:
        return objcompile.parse(text)
    except RuntimeError as e:
        # Invalid IR is a bug in codegen, not in the user's program: say so plainly.
        raise CodegenError(f"internal error: codegen produced invalid LLVM IR ({what}): {e}") from None


optimize = objcompile.optimize


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


def _jobs(options: BuildOptions) -> int:
    if options.jobs > 0:
        return options.jobs
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_JOBS))


class _KernelQueue:
    """Runs the kernel jobs: this thread takes them in order; once it has been busy for
    ``PARALLEL_AFTER_S`` with at least two jobs left, ``jobs - 1`` worker processes start and
    take from the same queue (each fed by a thread here that waits on its pipe). Results are
    kept by index, so the outcome never depends on who ran what."""

    def __init__(self, jobs: list, nproc: int, tmp: str):
        self.jobs, self.nproc, self.tmp = jobs, nproc, tmp
        self.results: List[Optional[tuple]] = [None] * len(jobs)
        self.next = 0
        self.lock = threading.Lock()
        self.threads: List[threading.Thread] = []
        self.procs: list = []
        self.failures: List[str] = []

    def _take(self) -> Optional[int]:
        with self.lock:
            if self.next >= len(self.jobs) or self.failures:
                return None
            self.next += 1
            return self.next - 1

    def run(self) -> List[tuple]:
        from .worker import run_job
        t0 = time.perf_counter()
        try:
            while True:
                i = self._take()
                if i is None:
                    break
                self.results[i] = run_job(self.jobs[i])
                if (not self.threads and self.nproc > 1 and len(self.jobs) - self.next >= 2
                        and time.perf_counter() - t0 >= PARALLEL_AFTER_S):
                    self._start_workers()
        finally:
            self.close()
        if self.failures:
            raise CodegenError(self.failures[0])
        return self.results

    def close(self) -> None:
        with self.lock:
            self.next = len(self.jobs)   # nothing more is handed out
        for t in self.threads:
            t.join()
        self.threads = []

    def _start_workers(self) -> None:
        from .worker import BOOT
        path = json.dumps([p for p in sys.path if p])
        for k in range(self.nproc - 1):
            err = open(os.path.join(self.tmp, f"worker{k}.err"), "w+b")
            try:
                proc = subprocess.Popen([sys.executable, "-I", "-c", BOOT, path], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=err)
            except OSError:
                err.close()
                break   # no new processes: this one does the work
            t = threading.Thread(target=self._feed, args=(proc, err), daemon=True)
            t.start()
            self.threads.append(t)

    def _feed(self, proc, err) -> None:
        from .worker import recv, send
        i = None
        try:
            while True:
                i = self._take()
                if i is None:
                    break
                send(proc.stdin, self.jobs[i])
                reply = recv(proc.stdout)
                if reply is None:
                    raise EOFError("it exited")
                self.results[i] = reply
                i = None
            proc.stdin.close()
            proc.wait()
        except (OSError, EOFError, ValueError) as e:
            proc.kill()
            proc.wait()
            err.seek(0)
            what = f" on kernel {self.jobs[i].name!r}" if i is not None else ""
            self.failures.append(f"a codegen worker process failed{what} ({e}); its output: "
                                 f"{err.read().decode(errors='replace').strip()[-2000:]}")
        finally:
            err.close()


def _cross_cc(target: Target) -> List[str]:
    from .toolchain import cross_cc
    return cross_cc(target.triple)


def build_library(mod, target="llvm", options: Optional[BuildOptions] = None, *,
                  extra_objects: Optional[Callable[[Target, str], List[str]]] = None,
                  extra_key: str = "", allow_empty: bool = False, lower: bool = False) -> str:
    """Compile ``mod`` and link it into a shared library in the cache; returns its path.

    Every kernel becomes an object of its own, cached under a hash of its unoptimized LLVM IR,
    the target and the codegen version, and the library under the hash of all of them: a hit
    skips LLVM entirely, and a module that changed in one kernel recompiles only that one. A
    kernel compiled before by the same Kiln sources is not even lowered to LLVM IR again (its
    ``.lowered`` record, ``kiln.codegen.worker``): a warm compile of a model is mostly the
    graph passes and scheduling.
    With ``lower``, each PrimFunc first goes through ``kiln.lower.lower_prim_func`` (as part
    of its job, so in parallel too). A foreign triple (aarch64, armv7, riscv64) is linked with
    its cross toolchain (``kiln.codegen.toolchain.cross_cc``: system cross gcc or zig cc).

    ``extra_objects(target, directory)`` writes more object files into ``directory`` and
    returns their paths, to link in; it is called only on a cache miss, so ``extra_key`` must
    identify their content (it joins the cache key). ``kiln.executable`` links the executable
    blob this way (with ``allow_empty`` for models made only of external functions).
    """
    from .worker import KernelJob, code_digest
    options = options or BuildOptions()
    target = parse_target(target)
    # A foreign triple links with its cross toolchain (kiln.codegen.toolchain); this raises,
    # naming what to install, before any kernel is compiled when there is none.
    link_cc = [options.cc] if target.linkable else _cross_cc(target)
    mod = as_module(mod)
    os.makedirs(options.cache_dir, exist_ok=True)
    objects_dir = os.path.join(options.cache_dir, "objects")
    os.makedirs(objects_dir, exist_ok=True)
    salt = (CODEGEN_VERSION, str(target), target.cpu, target.features, str(options.opt_level))
    taken: set = set()
    jobs = [KernelJob(name, kernel_symbol(name, taken), func, target, lower, salt, objects_dir,
                      options.opt_level, code_digest())
            for name, func in mod.items() if isinstance(func, PrimFunc)]
    if not jobs and not allow_empty:
        raise CodegenError("the module has no tensor programs (PrimFuncs) to compile")
    # Another process trimming the cache (kiln.codegen.cache_limit) may remove an object this
    # build found there before it is linked: the second attempt compiles it again.
    for _ in range(2):
        path = _build_once(jobs, target, options, salt, objects_dir, link_cc, extra_objects,
                           extra_key)
        if path is not None:
            return path
    raise CodegenError("the build cache lost kernel objects twice while linking; is another "
                       f"process removing files from {options.cache_dir}?")


def _build_once(jobs, target: Target, options: BuildOptions, salt, objects_dir: str,
                link_cc: List[str], extra_objects, extra_key: str) -> Optional[str]:
    """One attempt of ``build_library``: the library's path, or None when an object it needs
    went missing from the cache before the link."""
    from .worker import compile_object, key_of
    with tempfile.TemporaryDirectory(dir=options.cache_dir) as tmp:
        nproc = _jobs(options) if sys.executable else 1
        results = _KernelQueue(jobs, nproc, tmp).run()
        for key, info, notes, error in results:
            if error is not None:
                raise error
        kernels = [r[1] for r in results]
        keys = [r[0] for r in results]
        for what, text in (("the library table", library_table(kernels, target)),
                           ("the CPU check", cpu_check_module(target))):
            keys.append(key_of(salt, text))
            compile_object(os.path.join(objects_dir, f"{keys[-1]}.o"), text, what, target,
                           options.opt_level)
        lib_key = key_of(salt, "\0".join(keys + ([extra_key] if extra_key else [])))
        lib_path = os.path.join(options.cache_dir, f"kiln_{lib_key}.so")
        if cache_limit.touch(lib_path):
            return lib_path
        objs = [os.path.join(objects_dir, f"{k}.o") for k in keys]
        if not all([cache_limit.touch(o) for o in objs]):   # every one touched: all are in use
            return None
        objs += list(extra_objects(target, tmp) if extra_objects else [])
        out = os.path.join(tmp, "kernels.so")
        cmd = [*link_cc, "-shared", "-fPIC", "-o", out, *objs, "-lm"]
        if target.linkable and shutil.which(options.cc) is None:
            tried = ", ".join(CC_CANDIDATES) if options.cc in CC_CANDIDATES else repr(options.cc)
            raise CodegenError(f"no C compiler to link the kernel library: {tried} not found on "
                               "PATH. Install one (gcc or clang, e.g. `apt install gcc`), or name "
                               "it with BuildOptions(cc=...)")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CodegenError(f"linking failed: {' '.join(cmd)}\n{proc.stderr.strip()}")
        size = os.path.getsize(out)
        os.replace(out, lib_path)  # atomic: concurrent builders never see a half-written library
    cache_limit.after_build(options.cache_dir, options.cache_limit, size)
    return lib_path
