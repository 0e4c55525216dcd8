"""``compile``: an IRModule of graph functions and tensor programs -> an ``Executable``.

The executable is one shared library in the build cache holding

- the kernels: every PrimFunc of the module, lowered and compiled by ``kiln.codegen``, with
  their ``kiln_library_info`` table;
- the blob (``docs/executable-format.md``) as two data symbols, ``kiln_executable_blob``
  (64-byte aligned bytes) and ``kiln_executable_blob_size`` (u64), in a second object linked
  next to the kernels (``kiln.executable.blob_object``: written directly for ELF targets,
  streaming the constants from their arrays, so the weights are never copied).

>>> ex = kiln.compile(mod, target="llvm")           # doctest: +SKIP
>>> ex.stats.arena_size, ex.kernel_names            # doctest: +SKIP
>>> ex.export_library("model.so")                   # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import weakref
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union


from ..ir.function import IRModule, PrimFunc
from .blob_object import elf_machine, llvm_blob_object, write_elf_object
from .format import ExecutableSpec, deserialize, disassemble, layout, serialize, write_pieces
from .lower import lower_module
from .plan import MemoryPlan

BLOB_SYMBOL = "kiln_executable_blob"
BLOB_SIZE_SYMBOL = "kiln_executable_blob_size"


@dataclass
class ExecutableStats:
    """What an executable holds; sizes in bytes. ``arena_size`` and ``naive_size`` add up the
    graph functions' planned arenas (one arena per call of each function) with and without
    sharing storage between tensors whose lifetimes do not overlap."""
    num_kernels: int
    num_externs: int
    num_constants: int
    constant_bytes: int
    arena_size: int
    naive_size: int
    blob_size: int
    plans: Dict[str, MemoryPlan] = field(default_factory=dict)


class Executable:
    """A compiled model: kernels plus the serialized graph functions, in one shared library.

    ``library_path`` (the library in the build cache), ``blob`` (the serialized executable;
    made from ``spec`` on first use when not given, since a compile never needs it whole),
    ``spec`` (its data model, ``kiln.executable.format.ExecutableSpec``), ``stats``,
    ``kernel_names``, ``function_names``. ``export_library(path)`` copies the library out;
    ``export_static(dir, name)`` writes ``<name>.a`` + ``<name>.h`` for static linking;
    ``kiln.VirtualMachine(ex, kiln.cpu())`` runs it.
    """

    def __init__(self, library_path: str, blob: Optional[bytes], spec: ExecutableSpec,
                 stats: ExecutableStats):
        self._library_path, self._blob, self.spec, self.stats = library_path, blob, spec, stats
        # The build cache may evict the library while this object lives (its size limit,
        # kiln.codegen.cache_limit): an open descriptor keeps the bytes to put it back.
        try:
            self._fd: Optional[int] = os.open(library_path, os.O_RDONLY)
            weakref.finalize(self, os.close, self._fd)
        except OSError:
            self._fd = None

    @property
    def library_path(self) -> str:
        """The library in the build cache; written back from this object's open copy when the
        cache evicted it meanwhile."""
        if self._fd is not None and not os.path.exists(self._library_path):
            _restore(self._fd, self._library_path)
        return self._library_path

    @property
    def blob(self) -> bytes:
        if self._blob is None:
            self._blob = serialize(self.spec)
        return self._blob

    @property
    def target(self) -> str:
        return self.spec.target

    @property
    def kernel_names(self) -> List[str]:
        """The kernels the bytecode calls, in table order."""
        return list(self.spec.kernels)

    @property
    def function_names(self) -> List[str]:
        return [f.name for f in self.spec.functions if not f.private]

    def export_library(self, path: Union[str, os.PathLike]) -> str:
        """Copy the library (machine code + executable blob) to ``path``; returns the path.
        Load it back with ``kiln.load_module(path)``."""
        path = os.fspath(path)
        if path.endswith((".a", ".o", ".lib")):
            raise ValueError(f"export_library({path!r}) writes a shared library (.so); for a static "
                             "archive + header use export_static(directory, name)")
        shutil.copyfile(self.library_path, path)
        return path

    def export_static(self, directory, name: str = "model", options=None):
        """Write ``<name>.a`` + ``<name>.h`` for static linking (``kiln.executable.static``), and
        the typed bindings ``<name>_bindings.h`` (C) and ``<name>.hpp`` (C++) when every public
        function has fixed shapes (``kiln.bindgen``); returns the paths written by kind."""
        from ..bindgen import BindgenError, write_bindings
        from .static import export_static
        paths = dict(export_static(self, directory, name, options) or {})
        try:
            paths.update(write_bindings(self.spec, directory, name, ("c", "cpp"), static=True))
        except BindgenError:
            pass  # symbolic shapes: the untyped header is all there is
        return paths

    def load_module(self):
        """The library loaded by the runtime (``kiln.load_module``), which has ``load_executable``."""
        from ..runtime import load_module
        return load_module(self.library_path)

    def disassemble(self) -> str:
        """The bytecode as text, one instruction per line (what ``kiln inspect`` shows)."""
        return disassemble(self.spec)

    def __repr__(self):
        s = self.stats
        return (f"Executable(functions={self.function_names}, kernels={s.num_kernels}, externs={s.num_externs}, "
                f"constants={s.num_constants} ({s.constant_bytes} bytes), arena={s.arena_size} bytes "
                f"(naive {s.naive_size}), target={self.spec.target!r})")


def blob_object(blob: bytes, target) -> bytes:
    """An object file for ``target`` defining the two blob symbols (``kiln.executable.blob_object``)."""
    from ..codegen.target import parse_target
    machine = elf_machine(parse_target(target).triple)
    if machine is None:
        return llvm_blob_object(blob, target, BLOB_SYMBOL, BLOB_SIZE_SYMBOL)
    out = bytearray()

    def stream(write):
        write(blob)
        return len(blob)
    write_elf_object(out.extend, machine, len(blob), stream, BLOB_SYMBOL, BLOB_SIZE_SYMBOL)
    return bytes(out)


def _write_blob_object(spec: ExecutableSpec, size: int, pieces, target, path: str) -> str:
    """Write the blob object of ``spec`` (its ``layout``: ``size``, ``pieces``) to ``path``."""
    machine = elf_machine(target.triple)
    with open(path, "wb") as f:
        if machine is None:
            f.write(llvm_blob_object(serialize(spec), target, BLOB_SYMBOL, BLOB_SIZE_SYMBOL))
        else:
            write_elf_object(f.write, machine, size, lambda w: write_pieces(size, pieces, w),
                             BLOB_SYMBOL, BLOB_SIZE_SYMBOL)
    return path


def _restore(fd: int, path: str) -> None:
    """Write the file open at ``fd`` to ``path`` again (through a temporary name: another
    process may be restoring or building the same library)."""
    tmp = f"{path}.{os.getpid()}.restore"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(tmp, "wb") as out:
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            out.write(chunk)
            offset += len(chunk)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def read_blob(library_path: Union[str, os.PathLike]) -> bytes:
    """The executable blob of a library built by ``compile`` (dlopen + the two symbols; for a
    library of another CPU, read from its ELF file by ``kiln.executable.foreign``)."""
    from .foreign import library_triple, read_blob_elf
    if library_triple(library_path) is not None:
        return read_blob_elf(library_path, BLOB_SYMBOL, BLOB_SIZE_SYMBOL)
    lib = ctypes.CDLL(os.fspath(library_path))
    try:
        n = ctypes.c_uint64.in_dll(lib, BLOB_SIZE_SYMBOL).value
        base = ctypes.addressof(ctypes.c_uint8.in_dll(lib, BLOB_SYMBOL))
    except ValueError:
        raise ValueError(f"{library_path} has no executable blob (symbols {BLOB_SYMBOL}, "
                         f"{BLOB_SIZE_SYMBOL}); it is a kernel library, not a compiled model") from None
    return ctypes.string_at(base, n)


def _canonical_target(target) -> str:
    """The target as recorded in the blob: the host spelled out (triple and CPU), so the blob
    says what it was built for even when compiled with plain ``"llvm"``."""
    from ..codegen.target import parse_target
    t = parse_target(target)
    if not t.host:
        return str(t)
    return f"llvm -mtriple={t.triple} -mcpu={t.cpu}"


class TargetMismatchError(ValueError):
    """A kernel was scheduled for a target of another kind than the one being compiled for."""


def schedule_for_target(mod: IRModule, target, tuning_db=None) -> IRModule:
    """``mod`` with every unscheduled tensor program given the default schedule for
    ``target`` (or the decisions of its best record in ``tuning_db``, ``kiln.tune``); raises
    ``TargetMismatchError`` for a kernel whose ``kiln.scheduled_for`` fingerprint
    (``kiln.codegen.machine.Machine.key``) differs from ``target``'s."""
    from ..codegen.machine import machine_of
    from ..ir.function import PrimFunc
    from ..transform.default_schedule import needs_schedule, schedule_kernel
    from ..transform.infra import PassContext
    from ..transform.kernels import ATTR_SCHEDULED_FOR

    want = machine_of(target).key()
    ctx = None
    funcs = {}
    for name, f in mod.functions.items():
        if isinstance(f, PrimFunc):
            have = dict(f.attrs).get(ATTR_SCHEDULED_FOR)
            if have is not None and have != want:
                raise TargetMismatchError(
                    f"kiln.compile: kernel {name!r} was scheduled for {have!r} but the target "
                    f"{str(target)!r} is {want!r}; schedule the module for this target: "
                    f"kiln.get_pipeline(\"default\", target=...) or kiln.compile(mod, target, "
                    f"pipeline=\"default\") on the unscheduled module")
            if needs_schedule(f):
                ctx = ctx or PassContext(target=target, tuning_db=tuning_db)
                f = schedule_kernel(f, ctx)
        funcs[name] = f
    return mod if ctx is None else IRModule(funcs, mod.attrs)


def compile(mod: IRModule, target="llvm", pipeline: Union[None, str, Callable] = None,
            options=None, tuning_db=None) -> Executable:
    """Compile ``mod`` (graph functions calling tensor programs through ``call_tir`` and
    external functions through ``call_dps_packed``) into an ``Executable`` for ``target``.

    ``pipeline`` runs first when given: a name for ``kiln.get_pipeline`` (``"zero"``,
    ``"default"``; made for ``target``) or any ``IRModule -> IRModule`` callable. Without one,
    the module must already be legalized: an operator call left in a graph function is an
    error saying so. Tensor programs nobody scheduled get the default schedules for
    ``target``; one that ``default_schedule`` made for a target of another kind (its
    ``kiln.scheduled_for`` names another ISA, vector register file or FMA pipes) is refused
    with an error naming both: schedule the module for the target you compile for
    (``kiln.get_pipeline("default", target=...)``).
    ``options`` is a ``kiln.codegen.BuildOptions`` (cache directory, C compiler, opt level).
    ``tuning_db`` (a path, ``kiln.tune``): kernels scheduled here (by a pipeline given by
    name, or unscheduled ones) get the best tuning record's decisions where there is one.
    ``target="cuda"`` (``"cuda -arch=sm_80"``): kernels get the default GPU schedules and the
    PTX goes into the blob (``kiln.executable.cuda_model``); run with
    ``kiln.VirtualMachine(ex, kiln.cuda(0))``.
    """
    from ..codegen.cuda.target import is_cuda_target
    from ..codegen.emit import build_library
    from ..codegen.target import parse_target

    if is_cuda_target(target):    # PTX in the blob's CUDA section; run on kiln.cuda(n)
        from .cuda_model import compile_cuda_model
        return compile_cuda_model(mod, target, pipeline, options)
    target = parse_target(target)
    if pipeline is not None:
        if isinstance(pipeline, str):
            from ..transform.infra import PassContext
            from ..transform.pipeline import get_pipeline
            cache_dir = options.cache_dir if options is not None else None
            pipeline = get_pipeline(pipeline, PassContext(tuning_db=tuning_db, cache_dir=cache_dir),
                                    target=target)
        mod = pipeline(mod)
    if not isinstance(mod, IRModule):
        raise TypeError(f"kiln.compile takes an IRModule, got {type(mod).__name__}")
    mod = schedule_for_target(mod, target, tuning_db)
    spec, plans = lower_module(mod, _canonical_target(target))
    # Kernels no instruction calls (a concat the memory plan does in place) are not built.
    called = set(spec.kernels)
    mod = IRModule({n: f for n, f in mod.items() if not isinstance(f, PrimFunc) or n in called},
                   mod.attrs)
    size, pieces = layout(spec)   # the blob in pieces, constants as views: never joined here
    digest = hashlib.sha256()
    write_pieces(size, pieces, digest.update)
    # Each kernel is lowered (kiln.lower) as part of its codegen job, in parallel for big models.
    path = build_library(mod, target, options, lower=True,
                         extra_objects=lambda t, d: [_write_blob_object(spec, size, pieces, t,
                                                                        os.path.join(d, "blob.o"))],
                         extra_key="blob:" + digest.hexdigest(), allow_empty=True)
    pieces = None   # the blob's pieces are written: let them go now (the lambda above is done)
    stats = ExecutableStats(
        num_kernels=len(spec.kernels), num_externs=len(spec.externs), num_constants=len(spec.constants),
        constant_bytes=sum(c.nbytes for c in spec.constants),
        arena_size=sum(p.arena_size for p in plans.values()),
        naive_size=sum(p.naive_size for p in plans.values()), blob_size=size, plans=plans)
    ex = Executable(path, None, spec, stats)
    ex._static_source = (mod, target, options)  # for export_static (lowers and recompiles the kernels)
    return ex


def load_spec(library_path: Union[str, os.PathLike]) -> ExecutableSpec:
    """The checked data model of the blob inside a compiled library (for ``kiln inspect``)."""
    return deserialize(read_blob(library_path))


__all__ = ["Executable", "ExecutableStats", "TargetMismatchError", "compile",
           "schedule_for_target", "blob_object", "read_blob", "load_spec",
           "BLOB_SYMBOL", "BLOB_SIZE_SYMBOL"]
