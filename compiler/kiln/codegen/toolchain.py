"""Toolchains for foreign triples: the C compiler that links a model for another CPU, and the
qemu-user command that runs the result on this machine.

Linking (``cross_cc``): the system's cross gcc when one is on PATH (Debian's
``gcc-aarch64-linux-gnu``, ``gcc-arm-linux-gnueabihf``, ``gcc-riscv64-linux-gnu``), otherwise
``zig cc`` from the ``ziglang`` Python package (the ``cross`` extra, which ``make`` installs),
which compiles and links C for every triple here with its own C library stubs. Both give the
same artifacts as far as Kiln is concerned: a shared object of the kernels and the blob against
the target's glibc (``libm.so.6``, ``libc.so.6``).

Running (``qemu_command``): Debian's ``qemu-user`` (``qemu-aarch64``, ``qemu-arm``,
``qemu-riscv64``) with ``-L`` naming the target's C library, from Debian's
``libc6-<arch>-cross`` packages (``/usr/<triple>``), which the dynamic loader of a foreign
program needs. RISC-V runs with the vector extension on (``v=true,vlen=128``), so code built
with ``-mattr=+v`` runs; other code ignores it.

>>> cross_cc("aarch64-linux-gnu")           # doctest: +SKIP
['/usr/bin/python3', '-m', 'ziglang', 'cc', '-target', 'aarch64-linux-gnu', '-O2', '-fno-sanitize=undefined']
>>> qemu_command("riscv64-linux-gnu")       # doctest: +SKIP
['qemu-riscv64', '-L', '/usr/riscv64-linux-gnu', '-cpu', 'rv64,v=true,vlen=128']
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from typing import List, Optional

from .errors import CodegenError


@dataclass(frozen=True)
class Family:
    """What the tools call one CPU family: the zig target's architecture, Debian's triple (the
    cross gcc's prefix and the ``/usr/<triple>`` of its C library), its ``libc6-*-cross``
    package and the qemu-user binary."""
    zig_arch: str
    debian_triple: str
    libc_package: str
    qemu: str
    qemu_cpu: Optional[str] = None


_FAMILIES = {
    "aarch64": Family("aarch64", "aarch64-linux-gnu", "libc6-arm64-cross", "qemu-aarch64"),
    "arm": Family("arm", "arm-linux-gnueabihf", "libc6-armhf-cross", "qemu-arm"),
    "riscv64": Family("riscv64", "riscv64-linux-gnu", "libc6-riscv64-cross", "qemu-riscv64",
                      "rv64,v=true,vlen=128"),
}

QEMU_PACKAGE = "qemu-user"


def family(triple: str) -> Family:
    """The ``Family`` of a foreign ``triple``; CodegenError for one Kiln has no toolchain for."""
    arch = triple.split("-")[0].lower()
    if arch in ("aarch64", "arm64"):
        return _FAMILIES["aarch64"]
    if arch.startswith(("armv7", "thumbv7", "arm")) and "hf" in triple.lower():
        return _FAMILIES["arm"]
    if arch.startswith("riscv64"):
        return _FAMILIES["riscv64"]
    raise CodegenError(f"no cross toolchain for {triple!r}: Kiln links and runs aarch64-linux-gnu, "
                       "armv7-linux-gnueabihf and riscv64-linux-gnu besides the host")


def zig_target(triple: str) -> str:
    """The ``zig cc -target`` spelling of ``triple`` (zig names ARMv7 ``arm``: its baseline
    ``arm-linux-gnueabihf`` CPU is ARMv7-A with NEON)."""
    fam = family(triple)
    abi = "gnueabihf" if fam.zig_arch == "arm" else "gnu"
    return f"{fam.zig_arch}-linux-{abi}"


def have_zig() -> bool:
    """Whether the ``ziglang`` package is installed in this Python."""
    return importlib.util.find_spec("ziglang") is not None


def system_cross_gcc(triple: str) -> Optional[str]:
    """The system's cross gcc for ``triple`` (``<debian triple>-gcc``) when on PATH, else None."""
    name = f"{family(triple).debian_triple}-gcc"
    return name if shutil.which(name) else None


def cross_cc(triple: str) -> List[str]:
    """The command (a list) that compiles and links C for ``triple``: the system cross gcc when
    present, else ``python -m ziglang cc -target ...``. CodegenError naming both when neither
    is installed."""
    gcc = system_cross_gcc(triple)
    if gcc:
        return [gcc]
    if have_zig():
        # zig builds its compiler runtime (the target's libgcc) in the optimize mode of the
        # command, on first use: -O2 links an optimized one into the model library, the very
        # build the C runtime's own cross build uses (runtime_c/Makefile, -O2), where no -O
        # flag would link a Debug build and compile it once more (about 4 CPU-seconds per
        # target). -fno-sanitize=undefined: the links have no C sources for UBSan to check.
        return [sys.executable, "-m", "ziglang", "cc", "-target", zig_target(triple),
                "-O2", "-fno-sanitize=undefined"]
    raise CodegenError(
        f"no C toolchain to link for {triple}: install the ziglang package (pip install "
        f"'kiln[cross]', which `make` does) or the system cross compiler "
        f"{family(triple).debian_triple}-gcc")


def toolchain_name(triple: str) -> str:
    """Which toolchain ``cross_cc`` uses for ``triple``, in words (for messages and the README)."""
    gcc = system_cross_gcc(triple)
    return gcc if gcc else ("zig cc (ziglang)" if have_zig() else "none")


def sysroot(triple: str) -> str:
    """Where Debian's ``libc6-<arch>-cross`` puts the target's C library (qemu's ``-L``)."""
    return os.path.join("/usr", family(triple).debian_triple)


def missing_for_run(triple: str) -> Optional[str]:
    """What is missing to run programs for ``triple`` here, as the Debian packages to install
    (``"qemu-user"``, ``"libc6-arm64-cross"``), or None when nothing is."""
    fam = family(triple)
    missing = []
    if shutil.which(fam.qemu) is None:
        missing.append(QEMU_PACKAGE)
    if not os.path.exists(os.path.join(sysroot(triple), "lib", "libc.so.6")):
        missing.append(fam.libc_package)
    return " ".join(missing) or None


def qemu_command(triple: str) -> List[str]:
    """The command prefix that runs a program built for ``triple`` under qemu-user; CodegenError
    naming the Debian packages to install when qemu or the target's C library is missing."""
    missing = missing_for_run(triple)
    if missing:
        raise CodegenError(f"cannot run a {triple} program here: install Debian's {missing} "
                           f"(apt-get install {missing}; `make cross` does it when it can)")
    fam = family(triple)
    cmd = [fam.qemu, "-L", sysroot(triple)]
    if fam.qemu_cpu:
        cmd += ["-cpu", fam.qemu_cpu]
    return cmd


__all__ = ["Family", "family", "zig_target", "have_zig", "system_cross_gcc", "cross_cc",
           "toolchain_name", "sysroot", "missing_for_run", "qemu_command", "QEMU_PACKAGE"]
