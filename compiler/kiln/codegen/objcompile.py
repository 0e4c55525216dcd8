"""LLVM IR text -> object code: LLVM's optimisation pipeline and the target machine, the one
place that says how Kiln runs LLVM (``kiln.codegen.emit`` and its worker processes use it).
"""
from __future__ import annotations

import functools

import llvmlite.binding as llvm


@functools.lru_cache(maxsize=None)
def init_llvm() -> None:
    # All targets, not only the native one: cross compilation needs the others' backends.
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # The native assembler parses inline asm (the CPUID check of x86-64 libraries,
    # kiln.codegen.cpu_features); without it LLVM aborts the process on inline asm.
    llvm.initialize_native_asmparser()


def target_machine(triple: str, cpu: str, features: str, opt: int = 3):
    """An llvmlite TargetMachine (position independent code). Raises RuntimeError for a
    triple LLVM has no backend for."""
    from .target import llvm_triple
    init_llvm()
    triple = llvm_triple(triple)
    t = llvm.Target.from_triple(triple)
    return t.create_target_machine(cpu=cpu or "generic", features=features, opt=opt,
                                   reloc="pic", codemodel="default")


def optimize(llmod, tm, opt_level: int = 3) -> None:
    """Run LLVM's standard O1-O3 pipeline (new pass manager) with loop and SLP vectorization."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = True
    pto.loop_interleaving = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(llmod, pb)


def parse(text: str):
    """Parse and verify LLVM IR text; RuntimeError (LLVM's message) when it is invalid."""
    m = llvm.parse_assembly(text)
    m.verify()
    return m


def compile_text(text: str, tm, opt_level: int = 3) -> bytes:
    """Parse, optimize and emit one module's object code."""
    m = parse(text)
    optimize(m, tm, opt_level)
    m.verify()
    return bytes(tm.emit_object(m))
