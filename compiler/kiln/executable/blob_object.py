"""The executable blob as an object file: two data symbols, the blob and its size, to link next
to the kernels.

For ELF targets of a 64-bit little-endian architecture that Kiln compiles for (x86-64, AArch64
and RISC-V 64 on Linux), the object is written here directly, streaming the blob's pieces (header,
tables, then every constant straight from its array) into the file: no copy of the weights is
ever made, whatever their size. The object has one ``.rodata`` section (64-byte aligned) holding
the blob and, 8-byte aligned after it, its size as a u64; a symbol table naming both (global,
default visibility, STT_OBJECT) and an empty ``.note.GNU-stack`` (the stack stays
non-executable). No relocations: the data holds no addresses.

Other targets (Mach-O, COFF, other architectures) go through LLVM instead: the blob as the
initializer of a global in a tiny module, emitted by the target machine. That path holds the
blob several times over (the IR text alone is three bytes per byte), which is why it is only
the fallback.
"""
from __future__ import annotations

import struct
from typing import Callable, Optional

import numpy as np

# e_machine of the ELF targets written directly.
_ELF_MACHINE = {"x86_64": 62, "aarch64": 183, "riscv64": 243}
# e_flags per e_machine: RISC-V linkers refuse to join objects of different float ABIs, and
# Linux riscv64 is lp64d (EF_RISCV_FLOAT_ABI_DOUBLE), as kiln.codegen.target's baseline.
_ELF_FLAGS = {243: 0x4}


def elf_machine(triple: str) -> Optional[int]:
    """The ELF ``e_machine`` to write for ``triple``, or None when this module does not write
    objects for it (not ELF, not 64-bit little-endian, or an architecture it does not know)."""
    parts = triple.lower().split("-")
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(parts[0], parts[0])
    if arch not in _ELF_MACHINE or not any(p.startswith("linux") for p in parts[1:]):
        return None
    if any(p.endswith("x32") or p.endswith("ilp32") for p in parts[1:]):
        return None   # 32-bit pointer ABIs on a 64-bit architecture: ELFCLASS32
    return _ELF_MACHINE[arch]


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def write_elf_object(write: Callable[[bytes], object], machine: int, size: int,
                     stream: Callable[[Callable[[bytes], object]], int],
                     blob_symbol: str, size_symbol: str) -> int:
    """Write an ELF64 little-endian relocatable object defining ``blob_symbol`` (``size`` bytes,
    which ``stream(write)`` writes) and ``size_symbol`` (a u64 holding ``size``) through
    ``write``; returns the number of bytes written."""
    EHDR, SHDR, SYM = 64, 64, 24
    rodata_off = EHDR                        # 64: already 64-byte aligned
    size_at = _align(size, 8)                # offset of the size word inside .rodata
    rodata_size = size_at + 8
    strtab = b"\0" + blob_symbol.encode() + b"\0" + size_symbol.encode() + b"\0"
    names = [b"", b".rodata", b".note.GNU-stack", b".symtab", b".strtab", b".shstrtab"]
    shstrtab, name_off = b"", []
    for n in names:
        name_off.append(len(shstrtab))
        shstrtab += n + b"\0"
    symtab_off = _align(rodata_off + rodata_size, 8)
    symtab = b"".join([
        bytes(SYM),                                                        # the null symbol
        struct.pack("<IBBHQQ", 1, 0x11, 0, 1, 0, size),                    # GLOBAL OBJECT, .rodata
        struct.pack("<IBBHQQ", 2 + len(blob_symbol), 0x11, 0, 1, size_at, 8),
    ])
    strtab_off = symtab_off + len(symtab)
    shstrtab_off = strtab_off + len(strtab)
    shdr_off = _align(shstrtab_off + len(shstrtab), 8)

    def shdr(name, type_, flags, off, sz, link=0, info=0, align=1, entsize=0):
        return struct.pack("<IIQQQQIIQQ", name_off[name], type_, flags, 0, off, sz, link, info,
                           align, entsize)
    SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHF_ALLOC = 1, 2, 3, 2
    headers = b"".join([
        bytes(SHDR),
        shdr(1, SHT_PROGBITS, SHF_ALLOC, rodata_off, rodata_size, align=64),
        shdr(2, SHT_PROGBITS, 0, symtab_off, 0),
        shdr(3, SHT_SYMTAB, 0, symtab_off, len(symtab), link=4, info=1, align=8, entsize=SYM),
        shdr(4, SHT_STRTAB, 0, strtab_off, len(strtab)),
        shdr(5, SHT_STRTAB, 0, shstrtab_off, len(shstrtab)),
    ])
    ehdr = (b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
            + struct.pack("<HHIQQQIHHHHHH", 1, machine, 1, 0, 0, shdr_off,
                          _ELF_FLAGS.get(machine, 0), EHDR, 0, 0,
                          SHDR, len(names), 5))
    write(ehdr)
    written = stream(write)
    if written != size:
        raise ValueError(f"blob object: the blob streamed {written} bytes, expected {size}")
    write(bytes(size_at - size) + struct.pack("<Q", size))
    write(bytes(symtab_off - (rodata_off + rodata_size)) + symtab + strtab + shstrtab)
    write(bytes(shdr_off - (shstrtab_off + len(shstrtab))) + headers)
    return shdr_off + len(headers)


def llvm_blob_object(blob: bytes, target, blob_symbol: str, size_symbol: str) -> bytes:
    """An object for ``target`` defining the two symbols, emitted by LLVM (any target).

    The initializer is written as LLVM IR text directly: llvmlite's constant formatter escapes
    byte by byte in Python, far too slow for hundreds of megabytes of weights.
    """
    from llvmlite import ir
    import llvmlite.binding as llvm
    from ..codegen.target import parse_target

    target = parse_target(target)
    tm = target.create_target_machine()
    mod = ir.Module(name="kiln_executable")
    mod.triple, mod.data_layout = target.triple, str(tm.target_data)
    sz = ir.GlobalVariable(mod, ir.IntType(64), size_symbol)
    sz.global_constant, sz.initializer, sz.align = True, ir.Constant(ir.IntType(64), len(blob)), 8
    # Every byte as \XX: three characters per byte, built with numpy in one pass.
    raw = np.frombuffer(blob, dtype=np.uint8)
    hexd = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
    text = np.empty((raw.size, 3), dtype=np.uint8)
    text[:, 0], text[:, 1], text[:, 2] = ord("\\"), hexd[raw >> 4], hexd[raw & 15]
    init = text.tobytes().decode("ascii")
    del text
    ir_text = (str(mod) + f'\n@{blob_symbol} = constant [{len(blob)} x i8] c"{init}", align 64\n')
    del init
    llmod = llvm.parse_assembly(ir_text)
    del ir_text
    llmod.verify()
    return bytes(tm.emit_object(llmod))


__all__ = ["elf_machine", "write_elf_object", "llvm_blob_object"]
