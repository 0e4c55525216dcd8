"""Compilation targets: which triple, CPU and features codegen emits for, and the SIMD width
that follows from them.

Accepted spellings::

    "llvm"                                  the host: its triple, CPU name and CPU features
    "llvm -mcpu=skylake-avx512"             host triple, another CPU (features implied by the CPU)
    "llvm -mcpu=znver3 -mattr=+avx2,-fma"   ... with features switched on/off
    "llvm -mtriple=aarch64-linux-gnu"       cross compilation (generic CPU unless -mcpu given)
    "aarch64-linux-gnu"                     the same, bare triple
    "armv7-linux-gnueabihf"                 32-bit ARM, hard float, NEON on by default
    "riscv64-linux-gnu -mattr=+v"           RV64GC (the Linux baseline) plus the vector extension

Foreign triples are linked by ``kiln.codegen.toolchain`` (zig cc or a system cross gcc) and run
under qemu-user (``kiln run``).

>>> t = parse_target("llvm -mtriple=aarch64-linux-gnu")
>>> t.triple, t.vector_bits
('aarch64-linux-gnu', 128)
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Dict

import llvmlite.binding as llvm

from .errors import CodegenError
from .objcompile import init_llvm, target_machine

# CPUs whose name alone implies a vector width, for targets given by -mcpu without -mattr
# (LLVM knows their features internally but llvmlite cannot list them). Unknown x86 CPUs
# fall back to the SSE2 baseline (128 bits), which is always correct, only slower.
_X86_512 = {"skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
            "icelake-server", "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
            "graniterapids", "graniterapids-d", "diamondrapids", "znver4", "znver5", "knl",
            "knm", "x86-64-v4"}
_X86_256 = {"haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
            "arrowlake", "arrowlake-s", "lunarlake", "pantherlake", "gracemont", "znver1",
            "znver2", "znver3", "x86-64-v3", "sandybridge", "ivybridge", "bdver1", "bdver2",
            "bdver3", "bdver4", "btver2", "core-avx2", "core-avx-i", "corei7-avx"}
# CPUs that have FMA3 among the 256-bit ones (Sandy/Ivy Bridge and btver2 do not).
_X86_NO_FMA = {"sandybridge", "ivybridge", "btver2", "corei7-avx", "core-avx-i"}

# GPU target kinds users name, by what is missing for them (see issue 13: the GPU tutorial
# flows fail here, naming the target, until a GPU backend exists).
_GPU_KINDS = {"cuda": "CUDA", "nvptx": "CUDA (NVPTX)", "rocm": "ROCm", "opencl": "OpenCL",
              "vulkan": "Vulkan", "metal": "Metal", "webgpu": "WebGPU"}

# Features every CPU of a triple family has on the Linux ABI that triple names, put before the
# user's -mattr (so "-mattr=-neon" still wins): RV64GC is what riscv64 Linux distributions
# require, and its "d" selects the lp64d hard-float ABI that their C libraries use (without it
# LLVM emits soft-float objects that no linker joins with the C library); ARMv7 hard-float
# Linux boards have NEON (Cortex-A7/A8/A9/A15/A17), which the targets assume.
_BASELINE_FEATURES = {"riscv64": "+m,+a,+f,+d,+c", "armv7": "+neon"}

_USAGE = ("expected 'llvm [-mtriple=TRIPLE] [-mcpu=NAME] [-mattr=+a,-b]' or a target triple "
          "such as 'aarch64-linux-gnu'")


@dataclass(frozen=True)
class Target:
    """What codegen compiles for.

    ``features`` is the string handed to LLVM (``"+avx2,+fma,..."``; empty means "whatever the
    CPU implies"); ``vector_bits`` is the natural SIMD register width that vectorized loops are
    strip-mined by (512 with AVX-512F, 256 with AVX, 128 with SSE/NEON).
    """
    triple: str
    cpu: str
    features: str
    vector_bits: int
    host: bool = False  # exactly the machine we run on (spelled "llvm")

    def __str__(self) -> str:
        if self.host:
            return "llvm"
        parts = ["llvm", f"-mtriple={self.triple}"]
        if self.cpu and self.cpu != "generic":
            parts.append(f"-mcpu={self.cpu}")
        if self.features:
            parts.append(f"-mattr={self.features}")
        return " ".join(parts)

    @property
    def linkable(self) -> bool:
        """Whether objects for this target can be linked into a library on this machine."""
        return self.host or _same_platform(self.triple)

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    def has_feature(self, name: str) -> bool:
        """True if ``name`` (``"fma"``, ``"avx512f"``, ``"neon"``) is switched on for this target."""
        return _implied_features(self).get(name, False)

    def lanes(self, elem_bits: int) -> int:
        """How many elements of ``elem_bits`` bits fill one natural vector register."""
        return max(1, self.vector_bits // max(8, elem_bits))

    def function_attributes(self) -> Dict[str, str]:
        """String attributes every generated function carries: the CPU and features (so the
        optimizer's cost model and instruction selection see the real target), and the
        preferred vector width (LLVM prefers 256-bit vectors on AVX-512 CPUs unless told)."""
        attrs = {"target-cpu": self.cpu or "generic", "prefer-vector-width": str(self.vector_bits),
                 "min-legal-vector-width": str(self.vector_bits), "no-trapping-math": "true"}
        if self.features:
            attrs["target-features"] = self.features
        return attrs

    def create_target_machine(self, opt: int = 3):
        """An llvmlite TargetMachine for this target (position independent code)."""
        try:
            return target_machine(self.triple, self.cpu, self.features, opt)
        except RuntimeError as e:
            raise CodegenError(f"unknown target triple {self.triple!r}: {e}") from None


_OS_NAMES = ("linux", "none", "windows", "darwin", "macos", "freebsd", "android")


def llvm_triple(triple: str) -> str:
    """``triple`` as LLVM parses it, with the vendor field filled in: LLVM reads a triple's
    fields by position, so in "armv7-linux-gnueabihf" it would take "linux" for the vendor and
    miss the hard-float environment (calls would pass floats in core registers, and glibc's
    armhf loader refuses the library). "aarch64-linux-gnu" -> "aarch64-unknown-linux-gnu"."""
    parts = triple.split("-")
    if len(parts) == 3 and parts[1].lower().startswith(_OS_NAMES):
        parts.insert(1, "unknown")
    return "-".join(parts)


def _init_llvm() -> None:
    init_llvm()


def _parse_features(text: str) -> Dict[str, bool]:
    out: Dict[str, bool] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if item[0] not in "+-":
            raise CodegenError(f"bad -mattr entry {item!r}: each feature starts with '+' or '-'")
        out[item[1:]] = item[0] == "+"
    return out


def _implied_features(t: Target) -> Dict[str, bool]:
    """The key SIMD features of a target: from the CPU name, then the explicit feature string."""
    feats: Dict[str, bool] = {}
    if t.arch in ("x86_64", "i386", "i686"):
        feats["sse2"] = True
        if t.cpu in _X86_512 or t.cpu in _X86_256:
            feats.update(avx=True, avx2=t.cpu not in _X86_NO_FMA, fma=t.cpu not in _X86_NO_FMA)
        if t.cpu in _X86_512:
            feats["avx512f"] = True
    elif t.arch in ("aarch64", "arm64", "aarch64_be"):
        feats.update(neon=True, fma=True)  # both mandatory in AArch64
    elif t.arch.startswith("riscv"):
        feats["fma"] = True   # fmadd.s is in F, which every Linux riscv64 has
    feats.update(_parse_features(t.features))
    if feats.get("avx512f"):
        feats.setdefault("avx", True)
    return feats


def _vector_bits(t: Target) -> int:
    f = _implied_features(t)
    if f.get("avx512f"):
        return 512
    if f.get("avx"):
        return 256
    return 128  # SSE2 / NEON, and a safe default elsewhere


def host_target() -> Target:
    """The machine we are running on, with every feature its CPU reports."""
    _init_llvm()
    feats = llvm.get_host_cpu_features().flatten()
    t = Target(llvm.get_process_triple(), llvm.get_host_cpu_name(), feats, 0, host=True)
    return Target(t.triple, t.cpu, t.features, _vector_bits(t), host=True)


def _same_platform(triple: str) -> bool:
    """Whether objects for ``triple`` can be linked and loaded on this machine."""
    host = llvm.get_process_triple().split("-")
    other = triple.split("-")
    norm = {"arm64": "aarch64", "amd64": "x86_64"}
    return norm.get(other[0], other[0]) == norm.get(host[0], host[0]) and \
        platform.system().lower() in triple.lower()


def parse_target(spec) -> Target:
    """Parse a target string (or pass a ``Target`` through). Raises ``CodegenError`` on an
    unknown target, option or triple."""
    if isinstance(spec, Target):
        # kiln.target.Target (a subclass built from a string) becomes the plain value, so that
        # targets compare and hash alike whichever way they were spelled.
        return spec if type(spec) is Target else Target(spec.triple, spec.cpu, spec.features,
                                                         spec.vector_bits, spec.host)
    if not isinstance(spec, str) or not spec.strip():
        raise CodegenError(f"bad target {spec!r}: {_USAGE}")
    tokens = spec.split()
    head, opts = tokens[0], tokens[1:]
    triple = cpu = None
    attrs = ""
    if head != "llvm":
        if head in ("cuda", "nvptx"):
            raise CodegenError(f"target {spec!r}: no CUDA code generation for CPU objects (this "
                               "path compiles for CPUs); kiln.build(mod, target='cuda') compiles "
                               "thread-bound tensor programs and kiln.compile(mod, target='cuda') "
                               "whole models (kiln.codegen.cuda, docs/cuda.md)")
        if head in _GPU_KINDS:
            raise CodegenError(f"target {spec!r}: no {_GPU_KINDS[head]} code generation in Kiln "
                               "yet; it compiles for CPUs through LLVM (target 'llvm ...' or a "
                               "CPU triple such as 'aarch64-linux-gnu')")
        if head.startswith("-") or "-" not in head:
            raise CodegenError(f"unknown target {spec!r}: {_USAGE}")
        triple = head
    for opt in opts:
        key, _, value = opt.partition("=")
        if not value:
            raise CodegenError(f"bad target option {opt!r} in {spec!r}: {_USAGE}")
        if key == "-mtriple":
            triple = value
        elif key == "-mcpu":
            cpu = value
        elif key == "-mattr":
            attrs = value
            _parse_features(attrs)
        else:
            raise CodegenError(f"unknown target option {key!r} in {spec!r}: {_USAGE}")
    _init_llvm()
    if triple is None or cpu in ("native", "host"):
        host = host_target()
        if triple is None and cpu is None and not attrs:
            return host
        triple = triple or host.triple
        if cpu in (None, "native", "host"):
            cpu, attrs = host.cpu, ",".join(filter(None, [host.features, attrs]))
    try:
        llvm.Target.from_triple(triple)
    except RuntimeError:
        raise CodegenError(f"unknown target triple {triple!r} in {spec!r}; LLVM has no backend "
                           f"for it ({_USAGE})") from None
    given = _parse_features(attrs)
    base = [f for f in _baseline_features(triple).split(",") if f and f[1:] not in given]
    attrs = ",".join(filter(None, [*base, attrs]))
    t = Target(triple, cpu or "generic", attrs, 0)
    return Target(t.triple, t.cpu, t.features, _vector_bits(t))


def _baseline_features(triple: str) -> str:
    """The ``_BASELINE_FEATURES`` of ``triple``'s family ("" for the others)."""
    arch = triple.split("-")[0].lower()
    if arch.startswith("riscv64"):
        return _BASELINE_FEATURES["riscv64"]
    if arch.startswith(("armv7", "thumbv7")) and "hf" in triple.lower():
        return _BASELINE_FEATURES["armv7"]
    return ""
