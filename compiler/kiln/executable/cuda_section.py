"""The optional CUDA section of an executable (kind 0x101): a model's GPU code in its artifact.

A model compiled with ``kiln.compile(mod, target="cuda")`` carries, beside its bytecode and
constants, the PTX of every tensor program and how to launch it. The layout
(docs/executable-format.md, "CUDA"), little-endian, nothing between the parts::

    u32 version (1) | u32 num_entries | u64 ptx_size | u64 desc_size
    num_entries x (u32 length | length bytes of the kernel entry's name | NUL)
    ptx_size bytes: the PTX text, then one NUL (no other NUL)
    desc_size bytes: the description as JSON (UTF-8), then one NUL

The entries are the PTX ``.entry`` names the runtime resolves after loading the PTX
(``kiln_cuda_executable_load`` in runtime_c/cuda/kiln_cuda_executable.c, which checks every
byte of the section the way ``read_cuda_section`` does). The description is
``kiln.codegen.cuda.CudaModule``'s (target, and per tensor program its parameters, symbolic
dimensions, global scratch buffers and kernels with grid and block sizes); the kernel names in
it are the entries, in order. Optional: runtimes that predate it skip the section.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Dict, List

CUDA_SECTION = 0x101
CUDA_SECTION_VERSION = 1
_HEAD = struct.Struct("<IIQQ")
MAX_ENTRY_NAME = 1024     # bytes of one kernel entry's name (the C loader's limit too)


class CudaSectionError(ValueError):
    """A CUDA section that breaks its layout; the message names the byte."""


@dataclass
class CudaSection:
    """What the CUDA section holds: the PTX, its kernel entries in launch order, and the
    description (``{"target": ..., "functions": {...}}``, see the module docstring)."""
    ptx: str
    entries: List[str]
    description: Dict

    @property
    def functions(self) -> Dict[str, dict]:
        """Per tensor program (by name): params, dims, scratch, kernels."""
        return self.description["functions"]

    def to_bytes(self) -> bytes:
        """The section's bytes (its layout is the module docstring's)."""
        ptx = self.ptx.encode() + b"\0"
        desc = json.dumps(self.description, sort_keys=True).encode() + b"\0"
        if b"\0" in ptx[:-1]:
            raise CudaSectionError("the PTX text holds a NUL byte")
        out = bytearray(_HEAD.pack(CUDA_SECTION_VERSION, len(self.entries), len(ptx), len(desc)))
        for name in self.entries:
            raw = name.encode()
            if not raw or b"\0" in raw or len(raw) > MAX_ENTRY_NAME:
                raise CudaSectionError(f"kernel entry name {name!r}: empty, too long or with a NUL")
            out += struct.pack("<I", len(raw)) + raw + b"\0"
        return bytes(out + ptx + desc)


def cuda_section_of(cuda_module) -> CudaSection:
    """The section for a ``kiln.codegen.cuda.CudaModule``."""
    functions = cuda_module.functions
    # The description is written with sorted keys: the entries follow that order.
    entries = [k["name"] for name in sorted(functions) for k in functions[name]["kernels"]]
    return CudaSection(cuda_module.ptx, entries, {"target": cuda_module.target, "functions": functions})


def read_cuda_section(blob: bytes, start: int, end: int) -> CudaSection:
    """Parse and check the section at ``blob[start:end]``; ``CudaSectionError`` naming the byte
    (an offset into the blob) of anything malformed."""
    def fail(at, msg):
        raise CudaSectionError(f"CUDA section: {msg} (byte {at})")

    if end - start < _HEAD.size:
        fail(start, f"{end - start} bytes, shorter than its {_HEAD.size}-byte header")
    version, num_entries, ptx_size, desc_size = _HEAD.unpack_from(blob, start)
    if version != CUDA_SECTION_VERSION:
        fail(start, f"version {version}, this Kiln reads {CUDA_SECTION_VERSION}")
    pos = start + _HEAD.size
    if num_entries > (end - pos) // 6:       # each entry takes at least 6 bytes
        fail(start + 4, f"{num_entries} kernel entries cannot fit in the section")
    entries = []
    for k in range(num_entries):
        if end - pos < 4:
            fail(pos, f"kernel entry {k}: truncated length")
        (n,) = struct.unpack_from("<I", blob, pos)
        if n == 0 or n > MAX_ENTRY_NAME or n + 1 > end - pos - 4:
            fail(pos, f"kernel entry {k}: name length {n} is 0, over {MAX_ENTRY_NAME} or runs past "
                      "the section end")
        raw = bytes(blob[pos + 4:pos + 4 + n])
        if b"\0" in raw or blob[pos + 4 + n] != 0:
            fail(pos + 4, f"kernel entry {k}: name is not one NUL-terminated string")
        entries.append(raw.decode("utf-8", "replace"))
        pos += 5 + n
    if ptx_size == 0 or desc_size == 0 or ptx_size + desc_size != end - pos:
        fail(start + 8, f"ptx_size {ptx_size} + desc_size {desc_size} must be nonzero and fill "
                        f"the {end - pos} bytes left of the section")
    ptx = bytes(blob[pos:pos + ptx_size])
    if ptx[-1] != 0 or b"\0" in ptx[:-1]:
        fail(pos, "the PTX is not one NUL-terminated text")
    desc = bytes(blob[pos + ptx_size:end])
    if desc[-1] != 0 or b"\0" in desc[:-1]:
        fail(pos + ptx_size, "the description is not one NUL-terminated text")
    try:
        description = json.loads(desc[:-1])
        names = [k["name"] for f in description["functions"].values() for k in f["kernels"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        fail(pos + ptx_size, f"corrupt description ({e})")
    if names != entries:
        fail(start + _HEAD.size, "the kernel entries differ from the description's kernels")
    return CudaSection(ptx[:-1].decode("utf-8", "replace"), entries, description)
