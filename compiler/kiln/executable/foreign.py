"""Libraries compiled for another CPU: what they are for, their executable blob (read from the
ELF file, since this process cannot load them), and running them under qemu-user.

``kiln run model.so`` on an aarch64, armv7 or riscv64 library comes here: the runner program
of that triple (``runtime_c/tools/kiln_runner.c``, built next to the cross-built runtime by
``make -C runtime_c TARGET=<triple>``) loads the library and the inputs (.npy files) and
writes the outputs (.npy), all under qemu-user (``kiln.codegen.toolchain.qemu_command``).

>>> library_triple("model-aarch64.so")                    # doctest: +SKIP
'aarch64-linux-gnu'
>>> run_foreign("model-aarch64.so", "main", [x])         # doctest: +SKIP
[array(...)]
"""
from __future__ import annotations

import os
import struct
import subprocess
import tempfile
from typing import List, Optional, Sequence

# ELF e_machine -> the triple Kiln builds runners for (kiln.codegen.toolchain's families).
_MACHINES = {183: "aarch64-linux-gnu", 40: "armv7-linux-gnueabihf", 243: "riscv64-linux-gnu"}
_HOST_MACHINES = {"x86_64": 62, "aarch64": 183, "riscv64": 243, "armv7l": 40}


class ForeignRunError(RuntimeError):
    """Running a foreign library failed: no toolchain, runner or qemu, or the runner reported
    an error (its message is the runtime's)."""


def _elf_header(path) -> Optional[tuple]:
    """(ei_class, e_machine) of an ELF little-endian file, or None for anything else."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:
        return None
    return head[4], struct.unpack_from("<H", head, 18)[0]


def library_triple(path) -> Optional[str]:
    """The triple of a library built for another CPU than this one (``"aarch64-linux-gnu"``,
    ``"armv7-linux-gnueabihf"``, ``"riscv64-linux-gnu"``), or None when it is for this machine
    (or not an ELF file Kiln knows: the normal loader then says what is wrong)."""
    import platform
    hdr = _elf_header(path)
    if hdr is None:
        return None
    host = _HOST_MACHINES.get(platform.machine())
    if hdr[1] == host:
        return None
    return _MACHINES.get(hdr[1])


def read_elf_symbols(path, names: Sequence[str]) -> dict:
    """The bytes of the named data symbols of an ELF shared object of any class and machine
    (little-endian), read from the file: ``{name: bytes}`` for those it defines. Every offset
    and size is checked against the file; ValueError names what is malformed."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 52 or data[:4] != b"\x7fELF" or data[5] != 1:
        raise ValueError(f"{path}: not a little-endian ELF file")
    is64 = data[4] == 2
    if is64:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        shfmt, symfmt, symsize = "<IIQQQQIIQQ", "<IBBHQQ", 24
    else:
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)
        shfmt, symfmt, symsize = "<IIIIIIIIII", "<IIIBBH", 16
    if shentsize != struct.calcsize(shfmt) or shoff + shnum * shentsize > len(data):
        raise ValueError(f"{path}: section headers outside the file")
    sections = []
    for i in range(shnum):
        name, type_, flags, addr, off, size, link, info, align, entsize = \
            struct.unpack_from(shfmt, data, shoff + i * shentsize)
        sections.append((type_, addr, off, size, link))

    def section_bytes(k):
        type_, _, off, size, _ = sections[k]
        if type_ == 8:   # SHT_NOBITS
            return b""
        if off + size > len(data):
            raise ValueError(f"{path}: section {k} (bytes {off}..{off + size}) outside the file")
        return data[off:off + size]

    want, found = set(names), {}
    for k, (type_, _, _, size, link) in enumerate(sections):
        if type_ not in (2, 11) or link >= len(sections):   # SHT_SYMTAB, SHT_DYNSYM
            continue
        syms, strtab = section_bytes(k), section_bytes(link)
        for j in range(len(syms) // symsize):
            fields = struct.unpack_from(symfmt, syms, j * symsize)
            if is64:
                name_off, _, _, shndx, value, sym_size = fields
            else:
                name_off, value, sym_size, _, _, shndx = fields
            end = strtab.find(b"\0", name_off)
            if name_off >= len(strtab) or end < 0:
                continue
            name = strtab[name_off:end].decode(errors="replace")
            if name not in want or name in found or not 0 < shndx < len(sections):
                continue
            s_type, s_addr, s_off, s_size, _ = sections[shndx]
            if not (s_addr <= value and value + sym_size <= s_addr + s_size) or s_type == 8:
                raise ValueError(f"{path}: symbol {name} ({sym_size} bytes at {value:#x}) lies "
                                 f"outside its section {shndx}")
            start = s_off + (value - s_addr)
            if start + sym_size > len(data):
                raise ValueError(f"{path}: symbol {name} lies outside the file")
            found[name] = data[start:start + sym_size]
    return found


def read_blob_elf(path, blob_symbol: str, size_symbol: str) -> bytes:
    """The executable blob of a library of any CPU, read from its ELF file."""
    syms = read_elf_symbols(path, [blob_symbol, size_symbol])
    if blob_symbol not in syms or size_symbol not in syms or len(syms[size_symbol]) != 8:
        raise ValueError(f"{path} has no executable blob (symbols {blob_symbol}, {size_symbol}); "
                         "it is a kernel library, not a compiled model")
    n, = struct.unpack("<Q", syms[size_symbol])
    blob = syms[blob_symbol]
    if n > len(blob):
        raise ValueError(f"{path}: {size_symbol} says {n} bytes, the blob symbol has {len(blob)}")
    return blob[:n]


def runtime_dir() -> Optional[str]:
    """The repository's ``runtime_c`` next to this package (a checkout), or None (installed)."""
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.normpath(os.path.join(here, "..", "..", "..", "runtime_c"))
    return d if os.path.isfile(os.path.join(d, "Makefile")) else None


def runner_path(triple: str) -> str:
    """The runner program for ``triple``, built (``make -C runtime_c TARGET=<triple> runner``,
    incremental) when this is a checkout; ForeignRunError saying what is missing otherwise."""
    import sys
    from ..codegen.errors import CodegenError
    from ..codegen.toolchain import cross_cc
    d = runtime_dir()
    if d is None:
        raise ForeignRunError(f"no runner for {triple}: build it in a Kiln checkout with "
                              f"`make -C runtime_c TARGET={triple} runner`")
    try:
        cross_cc(triple)       # names the missing toolchain before make would fail on it
    except CodegenError as e:
        raise ForeignRunError(str(e)) from None
    # The same lock as every other build in runtime_c/build (tests/build_lock.py), so that
    # parallel runs never build the same files at once.
    import fcntl
    os.makedirs(os.path.join(d, "build"), exist_ok=True)
    with open(os.path.join(d, "build", ".make.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            proc = subprocess.run(["make", "-s", "-C", d, f"TARGET={triple}",
                                   f"PYTHON={sys.executable}", "runner"],
                                  capture_output=True, text=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    path = os.path.join(d, "build", triple, "kiln_runner")
    if proc.returncode != 0 or not os.path.isfile(path):
        raise ForeignRunError(f"building the {triple} runner failed:\n{proc.stdout}{proc.stderr}")
    return path


def run_foreign(library, function: str, inputs: Sequence, threads: Optional[int] = None,
                triple: Optional[str] = None, timeout: float = 600) -> List:
    """Run graph function ``function`` of the foreign ``library`` on ``inputs`` (numpy arrays,
    in parameter order) under qemu-user; returns its outputs as numpy arrays. ForeignRunError
    when qemu, the target's C library, the toolchain or the runner is missing (naming what to
    install), or when the runtime reports an error (its message)."""
    import numpy as np
    from ..codegen.errors import CodegenError
    from ..codegen.toolchain import qemu_command
    library = os.path.abspath(os.fspath(library))
    triple = triple or library_triple(library)
    if triple is None:
        raise ForeignRunError(f"{library} is not a library for another CPU Kiln runs under qemu")
    try:
        qemu = qemu_command(triple)
    except CodegenError as e:
        raise ForeignRunError(str(e)) from None
    runner = runner_path(triple)
    with tempfile.TemporaryDirectory(prefix="kiln-run-") as tmp:
        paths = []
        for k, a in enumerate(inputs):
            p = os.path.join(tmp, f"in{k}.npy")
            np.save(p, np.asarray(a, order="C"))   # keeps 0-d arrays 0-d
            paths.append(p)
        prefix = os.path.join(tmp, "out")
        cmd = [*qemu, runner, library, function, prefix, *paths]
        if threads is not None:
            cmd += ["--threads", str(int(threads))]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            msg = "\n".join(line for line in proc.stderr.splitlines()
                            if not line.startswith("vector version is not specified"))
            raise ForeignRunError(msg.strip().removeprefix("kiln_runner: ") or
                                  f"the {triple} runner exited with status {proc.returncode}")
        outs, k = [], 0
        while os.path.exists(f"{prefix}{k}.npy"):
            outs.append(np.load(f"{prefix}{k}.npy", allow_pickle=False))
            k += 1
        return outs


__all__ = ["ForeignRunError", "library_triple", "read_elf_symbols", "read_blob_elf",
           "runner_path", "run_foreign", "runtime_dir"]
