"""What the schedule rules know about a target: a handful of numbers (Halide's machine model is
three; this is the same idea with the register file and the FMA pipes added).

The numbers come from the target's ISA (vector width and register count are architectural),
from well-known microarchitecture facts (two FMA pipes of latency 4 on every x86 core with FMA3
and on current AArch64 cores), and, for the host, from the operating system (cache sizes from
sysfs, usable cores from the affinity mask). Everything a rule derives — register tile shapes,
accumulator budgets, vector chunks, channel blocks — is a function of a ``Machine``, so the
same rule gives 6 x 16 tiles on an AVX2 core, 6 x 64 on AVX-512 and 6 x 16 on NEON.

>>> m = machine_of("llvm -mtriple=aarch64-linux-gnu")
>>> m.lanes(32), m.vector_registers, m.tile_vectors, m.accumulators
(4, 32, 4, 24)
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Optional, Tuple

from .target import Target, parse_target

# Cache sizes assumed for a target that is not the host (typical of current cores).
DEFAULT_L1, DEFAULT_L2 = 32 * 1024, 1024 * 1024
# One core's memory stream (bytes/ns) assumed for a CPU ``stream_rate`` does not know.
DEFAULT_STREAM_RATE = 10.0


@dataclass(frozen=True)
class Machine:
    """The schedule-relevant facts of one target.

    - ``vector_bits`` / ``vector_registers``: the SIMD register file (512 x 32 with AVX-512,
      256 x 16 with AVX2, 128 x 32 on AArch64 NEON, 128 x 16 with SSE or ARMv7 NEON);
    - ``fma_units`` x ``fma_latency``: how many independent multiply-adds must be in flight
      to keep the FMA pipes busy (``min_accumulators``);
    - ``l1_bytes`` / ``l2_bytes``: per-core data caches; ``cores``: usable cores;
    - ``stream_bytes_per_ns``: how fast one core streams data from memory, for rules that weigh
      a weight read from memory against multiply-adds (``conv_winograd``'s cost rule). The
      ISA does not say; the CPU family does (``stream_rate``).
    """
    arch: str
    vector_bits: int
    vector_registers: int
    fma_units: int = 2
    fma_latency: int = 4
    l1_bytes: int = DEFAULT_L1
    l2_bytes: int = DEFAULT_L2
    cores: int = 1
    stream_bytes_per_ns: float = DEFAULT_STREAM_RATE

    def lanes(self, elem_bits: int = 32) -> int:
        """Elements of ``elem_bits`` in one vector register (float32: 16 / 8 / 4)."""
        return max(1, self.vector_bits // max(8, elem_bits))

    @property
    def min_accumulators(self) -> int:
        """Independent vector accumulators that hide the FMA latency on every pipe."""
        return self.fma_units * self.fma_latency

    @property
    def tile_vectors(self) -> int:
        """Vectors across a register tile's row (its width NR is ``tile_vectors * lanes``):
        2 with 16 registers, 4 with 32. Wider rows load fewer broadcasts per FMA, and with 32
        registers 4 x 6 accumulators still leave room for the operands."""
        return 4 if self.vector_registers >= 32 else 2

    @property
    def accumulators(self) -> int:
        """Vector registers a register tile may keep its accumulators in: the register file
        less the row of vector operands and an eighth for broadcasts and addresses (12 of
        AVX2's 16, 24 of AVX-512's or NEON's 32)."""
        return max(1, self.vector_registers - self.tile_vectors - self.vector_registers // 8)

    def key(self) -> str:
        """The fingerprint that decides whether a schedule made for one target fits another:
        the ISA family, the vector register file and the FMA pipes (caches and core counts
        change tile preferences little and are left out; the memory stream decides graph
        choices, not kernel schedules)."""
        return (f"{self.arch} v{self.vector_bits}x{self.vector_registers} "
                f"fma{self.fma_units}x{self.fma_latency}")


def machine_of(target) -> Machine:
    """The ``Machine`` of a target (a ``Target`` or a target string such as ``"llvm"``)."""
    t = parse_target(target)
    return _machine(t)


@functools.lru_cache(maxsize=64)
def _machine(t: Target) -> Machine:
    arch = _arch_family(t.arch)
    bits = t.vector_bits
    if arch == "x86_64":
        regs = 32 if t.has_feature("avx512f") else 16
    elif arch == "aarch64":
        regs = 32
    elif arch == "riscv64":
        regs = 32
    else:                # ARMv7 NEON (16 q registers) and anything else
        regs = 16
    fma = 2 if (t.has_feature("fma") or arch in ("aarch64", "riscv64")) else 1
    l1, l2, cores = (DEFAULT_L1, DEFAULT_L2, 1)
    if t.host:
        l1, l2 = _host_caches()
    if t.linkable:      # an artifact for this platform most likely runs on this machine
        cores = _host_cores()
    return Machine(arch, bits, regs, fma, 4, l1, l2, cores, stream_rate(t.cpu))


# One core's memory stream in bytes/ns, by CPU family. AMD's Zen cores keep enough misses in
# flight to stream about 30 (Zen 4, EPYC family 25 model 17: a matrix-vector product reading a
# 64 MB matrix at 29-30 GB/s on one core; ResNet-18's Winograd contractions inside the model
# agree); Intel's server cores about 10 (Xeon family 6 model 167: ResNet-18's 14 x 14
# contraction inside the model, bench/RESULTS.md "Session 18"). Other CPUs get the lower
# figure (``DEFAULT_STREAM_RATE``), which keeps a rule that trades multiply-adds for memory
# traffic cautious.
STREAM_RATES = {"znver": 30.0}


def stream_rate(cpu: Optional[str]) -> float:
    """Bytes per ns one core of ``cpu`` (an LLVM CPU name) streams from memory.

    >>> stream_rate("znver4"), stream_rate("rocketlake"), stream_rate(None)
    (30.0, 10.0, 10.0)
    """
    for prefix, rate in STREAM_RATES.items():
        if cpu and cpu.startswith(prefix):
            return rate
    return DEFAULT_STREAM_RATE


def _arch_family(arch: str) -> str:
    if arch in ("x86_64", "amd64", "i386", "i686"):
        return "x86_64"
    if arch in ("aarch64", "arm64", "aarch64_be"):
        return "aarch64"
    if arch.startswith("riscv64"):
        return "riscv64"
    if arch.startswith(("arm", "thumb")):
        return "arm"
    return arch


def _host_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):   # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _host_caches() -> Tuple[int, int]:
    """(L1 data, L2) bytes of CPU 0 from sysfs; the defaults where it cannot be read."""
    l1: Optional[int] = None
    l2: Optional[int] = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return DEFAULT_L1, DEFAULT_L2
    for e in entries:
        if not e.startswith("index"):
            continue
        try:
            with open(os.path.join(base, e, "level")) as f:
                level = int(f.read())
            with open(os.path.join(base, e, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, e, "size")) as f:
                size = _parse_size(f.read().strip())
        except (OSError, ValueError):
            continue
        if level == 1 and kind in ("Data", "Unified"):
            l1 = size
        elif level == 2 and kind in ("Data", "Unified"):
            l2 = size
    return l1 or DEFAULT_L1, l2 or DEFAULT_L2


def _parse_size(text: str) -> int:
    """``"48K"`` -> 49152."""
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    if text and text[-1] in mult:
        return int(text[:-1]) * mult[text[-1]]
    return int(text)
