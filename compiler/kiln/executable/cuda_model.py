"""``kiln.compile(mod, target="cuda")``: a whole model for an NVIDIA GPU, in one artifact.

The graph functions become the same bytecode as on the CPU (``lower_module``: memory plan,
ALLOC_ARENA views, CALL_KERNEL); the tensor programs, scheduled by the default GPU rules
(``kiln.codegen.cuda.schedule.gpu_default_schedule``) unless already scheduled, become one PTX
module (``kiln.codegen.cuda.compile_cuda``) carried in the blob's CUDA section
(``kiln.executable.cuda_section``) with each program's launches. The library holds the blob
only: there is no CPU kernel. ``kiln.VirtualMachine(ex, kiln.cuda(0))`` runs it
(``kiln.runtime.cuda_vm``); from C, ``kiln_cuda_executable_open`` loads its GPU code.
"""
from __future__ import annotations

import hashlib
import os

from ..ir.function import IRModule, PrimFunc
from .cuda_section import cuda_section_of
from .format import layout, write_pieces
from .lower import lower_module


def _gpu_scheduled(mod: IRModule) -> IRModule:
    """Every unscheduled tensor program given its default GPU schedule; a kernel scheduled for
    a CPU is refused (its loops are not bound to GPU threads)."""
    from ..codegen.cuda.schedule import SCHEDULED_FOR_CUDA, gpu_default_schedule
    from ..transform.kernels import ATTR_SCHEDULED_FOR
    from .executable import TargetMismatchError
    for name, f in mod.functions.items():
        have = dict(f.attrs).get(ATTR_SCHEDULED_FOR) if isinstance(f, PrimFunc) else None
        if have is not None and have != SCHEDULED_FOR_CUDA:
            raise TargetMismatchError(
                f"kiln.compile: kernel {name!r} was scheduled for {have!r}, not for the GPU; "
                "schedule the module for cuda: kiln.get_pipeline(\"default\", target=\"cuda\")")
    return gpu_default_schedule()(mod)


def compile_cuda_model(mod: IRModule, target, pipeline=None, options=None):
    """The ``Executable`` of ``mod`` for the CUDA ``target`` (see the module docstring);
    ``pipeline``: a pipeline name (made for the GPU) or an ``IRModule -> IRModule`` callable."""
    from ..codegen.cuda import compile_cuda, parse_cuda_target
    from ..codegen.emit import build_library
    from ..transform.pipeline import get_pipeline
    from .executable import (Executable, ExecutableStats, _write_blob_object)
    from ..codegen.target import parse_target

    t = parse_cuda_target(target)
    if pipeline is not None:
        mod = (get_pipeline(pipeline, target=str(t)) if isinstance(pipeline, str) else pipeline)(mod)
    if not isinstance(mod, IRModule):
        raise TypeError(f"kiln.compile takes an IRModule, got {type(mod).__name__}")
    mod = _gpu_scheduled(mod)
    spec, plans = lower_module(mod, str(t))
    prims = IRModule({n: f for n, f in mod.items() if isinstance(f, PrimFunc)})
    if len(prims.functions):
        spec.cuda = cuda_section_of(compile_cuda(prims, t))
    size, pieces = layout(spec)
    digest = hashlib.sha256()
    write_pieces(size, pieces, digest.update)
    # The blob object is for the machine that loads the model; it holds no CPU code, so it
    # claims no CPU feature beyond the architecture's baseline (any such host may load it).
    host = parse_target("llvm -mcpu=generic")
    path = build_library(IRModule({}), host, options, allow_empty=True,
                         extra_objects=lambda tt, d: [_write_blob_object(spec, size, pieces, tt,
                                                                         os.path.join(d, "blob.o"))],
                         extra_key="cuda-blob:" + digest.hexdigest())
    stats = ExecutableStats(
        num_kernels=len(spec.kernels), num_externs=len(spec.externs), num_constants=len(spec.constants),
        constant_bytes=sum(c.nbytes for c in spec.constants),
        arena_size=sum(p.arena_size for p in plans.values()),
        naive_size=sum(p.naive_size for p in plans.values()), blob_size=size, plans=plans)
    return Executable(path, None, spec, stats)
