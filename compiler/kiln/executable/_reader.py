"""``deserialize``: read and fully check a blob, as the C loader does (never trust a byte).

Every error is a ``FormatError`` naming the section and the byte offset where the blob went
wrong, e.g. ``KERNELS: truncated at byte 412 (need 4 bytes, section ends at 414)``.
"""
from __future__ import annotations

import struct
from typing import List

import numpy as np

from .. import subbyte
from ..ir import dtype as dt
from ..ir.derived_dims import DerivedDim, DimError, check_table, format_dims
from .format import (ALIGN, FORMAT_VERSION, FUNCTION_PRIVATE, HEADER_SIZE, MAGIC, MAX_NDIM, MAX_SYMS,
                     MIN_FORMAT_VERSION_WITH_DERIVED, MIN_FORMAT_VERSION_WITH_FLAGS, OPTIONAL_SECTION_BASE, PARAM_WRITTEN,
                     MAX_WRITER_BYTES, WRITER_SECTION, writer_string,
                     SECTION_ENTRY_SIZE,
                     ExecutableSpec, FormatError, FunctionSpec, Instruction, ParamSpec, Section,
                     _check_calls, _check_code, _check_function, dtype_from_dl, tensor_nbytes)
from .cuda_section import CUDA_SECTION, CudaSectionError, read_cuda_section


class _Cursor:
    """Reads little-endian values inside one range of the blob, checking every read."""

    def __init__(self, blob: bytes, start: int, end: int, what: str):
        self.blob, self.pos, self.end, self.what = blob, start, end, what

    def read(self, fmt: str):
        n = struct.calcsize("<" + fmt)
        if self.pos + n > self.end:
            raise FormatError(f"{self.what}: truncated at byte {self.pos} (need {n} bytes, "
                              f"section ends at {self.end})")
        vals = struct.unpack_from("<" + fmt, self.blob, self.pos)
        self.pos += n
        return vals

    def one(self, fmt: str):
        return self.read(fmt)[0]

    def array(self, fmt: str, count: int) -> List[int]:
        # Check the size before building a format string: count comes from the blob.
        n = struct.calcsize("<" + fmt) * count
        if count < 0 or self.pos + n > self.end:
            raise FormatError(f"{self.what}: {count} entries at byte {self.pos} run past the section end "
                              f"({self.end})")
        return list(self.read(f"{count}{fmt}")) if count else []


def _sections(blob: bytes, table_offset: int, num_sections: int):
    size = len(blob)
    if table_offset < HEADER_SIZE or table_offset > size or \
            num_sections * SECTION_ENTRY_SIZE > size - table_offset:
        raise FormatError(f"header: section table ({num_sections} entries at byte {table_offset}) "
                          f"does not fit between the header and the blob end ({size})")
    # The header and the table itself take part in the overlap check (kind shown as a name).
    found, ranges = {}, [(0, HEADER_SIZE, "header"),
                         (table_offset, num_sections * SECTION_ENTRY_SIZE, "section table")]
    for i in range(num_sections):
        at = table_offset + i * SECTION_ENTRY_SIZE
        kind, flags, off, sz = struct.unpack_from("<IIQQ", blob, at)
        if flags != 0:
            raise FormatError(f"section table entry {i} (byte {at}): flags {flags} must be 0")
        if off > size or sz > size - off:
            raise FormatError(f"section table entry {i} (byte {at}): section [{off}, {off + sz}) "
                              f"lies outside the blob (size {size})")
        for (o2, s2, k2) in ranges:
            if sz and off < o2 + s2 and o2 < off + sz:  # empty sections overlap nothing
                other = k2 if isinstance(k2, str) else f"section kind {k2}"
                raise FormatError(f"section table entry {i} (byte {at}): section kind {kind} "
                                  f"[{off}, {off + sz}) overlaps {other} [{o2}, {o2 + s2})")
        ranges.append((off, sz, kind))
        if kind in (WRITER_SECTION, CUDA_SECTION) and kind not in found:
            found[kind] = (off, off + sz)
        if kind >= OPTIONAL_SECTION_BASE:
            continue  # optional: read if known (WRITER), else skipped
        if kind not in Section._value2member_map_:
            raise FormatError(f"section table entry {i} (byte {at}): unknown required section kind {kind}")
        if kind in found:
            raise FormatError(f"section table entry {i} (byte {at}): section {Section(kind).name} appears twice")
        found[kind] = (off, off + sz)
    for kind in Section:
        if kind not in found:
            raise FormatError(f"missing required section {kind.name}")
    return found


def writer_of(blob: bytes) -> str:
    """The WRITER section's text ("kiln 0.1.0") of a blob whose header and section table may be
    of any version, or "" when it has none (or what is there does not hold up): for messages
    about blobs this reader cannot otherwise read."""
    try:
        num_sections, _, table_offset = struct.unpack_from("<IIQ", blob, 24)
        for i in range(min(num_sections, 64)):
            kind, _, off, sz = struct.unpack_from("<IIQQ", blob, table_offset + i * SECTION_ENTRY_SIZE)
            if kind == WRITER_SECTION and 4 <= sz <= 4 + MAX_WRITER_BYTES:
                (n,) = struct.unpack_from("<I", blob, off)
                if n <= sz - 4 and off + 4 + n <= len(blob):
                    return blob[off + 4:off + 4 + n].decode("utf-8")
    except (struct.error, UnicodeDecodeError):
        pass
    return ""


def deserialize(blob: bytes) -> ExecutableSpec:
    """Parse and check ``blob``; the constants are read-only numpy views into it."""
    blob = bytes(blob)
    size = len(blob)
    if size < HEADER_SIZE:
        raise FormatError(f"header: blob is {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    magic, version, header_size, blob_size, num_sections, target_idx, table_offset = \
        struct.unpack_from("<8sIIQIIQ", blob, 0)
    if magic != MAGIC:
        raise FormatError(f"header: bad magic {magic!r} at byte 0 (expected {MAGIC!r}): not a Kiln executable")
    if version > FORMAT_VERSION:
        who = writer_of(blob)
        raise FormatError(f"executable format version {version} is newer than this runtime supports "
                          f"({FORMAT_VERSION}): written by {who or 'a newer Kiln'}, this is "
                          f"{writer_string()}")
    if version == 0:
        raise FormatError("header: format_version 0 at byte 8 is invalid")
    if header_size != HEADER_SIZE:
        raise FormatError(f"header: header_size {header_size} at byte 12 (expected {HEADER_SIZE})")
    if blob_size != size:
        raise FormatError(f"header: blob_size {blob_size} at byte 16 does not match the {size} bytes given")
    if any(blob[40:64]):
        raise FormatError("header: reserved bytes 40..63 are not zero")
    sec = _sections(blob, table_offset, num_sections)

    # STRINGS
    c = _Cursor(blob, *sec[Section.STRINGS], "STRINGS")
    strings = []
    for _ in range(c.one("I")):
        at = c.pos
        n = c.one("I")
        if n > c.end - c.pos:
            raise FormatError(f"STRINGS: string {len(strings)} at byte {at} (length {n}) runs past the "
                              f"section end ({c.end})")
        raw = blob[c.pos:c.pos + n]
        c.pos += n
        if b"\0" in raw:
            raise FormatError(f"STRINGS: string {len(strings)} at byte {at} contains NUL")
        try:
            strings.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise FormatError(f"STRINGS: string {len(strings)} at byte {at} is not UTF-8 ({e.reason})") from None

    def string(idx: int, what: str) -> str:
        if idx >= len(strings):
            raise FormatError(f"{what}: string index {idx} out of range ({len(strings)} strings)")
        return strings[idx]

    target = string(target_idx, "header: target (byte 28)")

    def names(kind: Section) -> List[str]:
        cur = _Cursor(blob, *sec[kind], kind.name)
        return [string(i, f"{kind.name} entry {k}") for k, i in enumerate(cur.array("I", cur.one("I")))]

    kernels, externs = names(Section.KERNELS), names(Section.EXTERNS)

    # CONSTANTS
    c = _Cursor(blob, *sec[Section.CONSTANTS], "CONSTANTS")
    constants = []
    for k in range(c.one("I")):
        at = c.pos
        code, bits, lanes, ndim = c.read("BBHI")
        try:
            dtype = dtype_from_dl(code, bits, lanes)
            if dtype == "string":   # string constants are uint8 blocks (docs/strings.md)
                raise FormatError(f"unsupported dtype (code {code}, bits {bits}, lanes {lanes})")
        except FormatError as e:
            raise FormatError(f"CONSTANTS: constant {k} (byte {at}): {e}") from None
        if ndim > MAX_NDIM:
            raise FormatError(f"CONSTANTS: constant {k} (byte {at}): ndim {ndim} exceeds the limit of {MAX_NDIM}")
        shape = c.array("q", ndim)
        data_offset, nbytes = c.read("QQ")
        if any(d < 0 for d in shape):
            raise FormatError(f"CONSTANTS: constant {k} (byte {at}): negative dimension in shape {shape}")
        if data_offset % ALIGN:
            raise FormatError(f"CONSTANTS: constant {k} (byte {at}): data_offset {data_offset} is not "
                              f"{ALIGN}-byte aligned")
        if data_offset > size or nbytes > size - data_offset:
            raise FormatError(f"CONSTANTS: constant {k} (byte {at}): data [{data_offset}, "
                              f"{data_offset + nbytes}) lies outside the blob (size {size})")
        expect = tensor_nbytes(dtype, shape)
        if nbytes != expect:
            raise FormatError(f"CONSTANTS: constant {k} (byte {at}): nbytes {nbytes} but shape "
                              f"{tuple(shape)} of {dtype} needs {expect}")
        if dt.lanes(dtype) != 1:
            raise FormatError(f"CONSTANTS: constant {k} (byte {at}): vector dtype {dtype} is not supported")
        if dt.is_subbyte(dtype):   # packed: unpacked into a copy
            constants.append(subbyte.unpack(blob[data_offset:data_offset + nbytes], dtype, shape))
            continue
        arr = np.frombuffer(blob, dtype=dt.to_numpy(dtype).newbyteorder("<"),
                            count=int(np.prod(shape, dtype=np.int64)), offset=data_offset)
        constants.append(arr.reshape(tuple(shape)))

    # FUNCTIONS (code ranges checked against BYTECODE)
    bc_start, bc_end = sec[Section.BYTECODE]
    c = _Cursor(blob, *sec[Section.FUNCTIONS], "FUNCTIONS")
    functions = []
    for k in range(c.one("I")):
        at = c.pos
        name_idx = c.one("I")
        flags = c.one("I") if version >= MIN_FORMAT_VERSION_WITH_FLAGS else 0
        num_params, num_registers, num_sym = c.read("III")
        name = string(name_idx, f"FUNCTIONS: function {k} (byte {at}) name")
        if flags & ~FUNCTION_PRIVATE:
            raise FormatError(f"FUNCTIONS: function '{name}' (byte {at}): unknown flags {flags:#x}")
        if num_sym > MAX_SYMS:
            raise FormatError(f"FUNCTIONS: function '{name}' (byte {at}): num_sym {num_sym} exceeds the "
                              f"limit of {MAX_SYMS}")
        sym_names = [string(i, f"function '{name}' symbolic dimension") for i in c.array("I", num_sym)]
        derived, bounds = [], []
        if version >= MIN_FORMAT_VERSION_WITH_DERIVED:
            num_derived = c.one("I")
            if num_sym + num_derived > MAX_SYMS:
                raise FormatError(f"FUNCTIONS: function '{name}' (byte {at}): num_derived {num_derived} exceeds "
                                  f"the limit of {MAX_SYMS} dimensions in all")
            derived = [DerivedDim(*c.read("IIqq")) for _ in range(num_derived)]
            bounds = c.array("q", num_sym + num_derived)
            if all(b < 0 for b in bounds):
                bounds = []
        try:
            check_table(sym_names, derived, f"FUNCTIONS: function '{name}' (byte {at})")
        except DimError as e:
            raise FormatError(str(e)) from None
        dim_names = format_dims(sym_names, derived)
        arena_size, code_offset, code_size = c.read("QQQ")
        params = []
        for p in range(num_params):
            p_at = c.pos
            pname_idx, code, bits, lanes, ndim = c.read("IBBHI")
            pname = string(pname_idx, f"function '{name}' parameter {p} name")
            if ndim > MAX_NDIM:
                raise FormatError(f"FUNCTIONS: function '{name}' parameter {p} '{pname}' (byte {p_at}): "
                                  f"ndim {ndim} exceeds the limit of {MAX_NDIM}")
            try:
                pdtype = dtype_from_dl(code, bits, lanes)
            except FormatError as e:
                raise FormatError(f"FUNCTIONS: function '{name}' parameter {p} (byte {p_at}): {e}") from None
            shape = []
            for d in c.array("q", ndim):
                if d < 0 and -1 - d >= len(dim_names):
                    raise FormatError(f"FUNCTIONS: function '{name}' parameter {p} '{pname}' (byte {p_at}): "
                                      f"symbolic dimension {-1 - d} out of range ({num_sym} symbolic dimensions, "
                                      f"{len(derived)} derived)")
                shape.append(d if d >= 0 else dim_names[-1 - d])
            params.append(ParamSpec(pname, pdtype, shape))
        if version >= MIN_FORMAT_VERSION_WITH_DERIVED:
            for p, flags in zip(params, c.array("I", num_params)):
                if flags & ~PARAM_WRITTEN:
                    raise FormatError(f"FUNCTIONS: function '{name}' parameter '{p.name}': unknown flags {flags:#x}")
                p.written = bool(flags & PARAM_WRITTEN)
        if not (bc_start <= code_offset <= bc_end and code_size <= bc_end - code_offset):
            raise FormatError(f"FUNCTIONS: function '{name}' (byte {at}): code [{code_offset}, "
                              f"{code_offset + code_size}) lies outside BYTECODE [{bc_start}, {bc_end})")
        code = _read_code(blob, name, code_offset, code_offset + code_size)
        f = FunctionSpec(name, params, sym_names, num_registers, arena_size, [ins for ins, _ in code],
                         private=bool(flags & FUNCTION_PRIVATE), derived=derived, bounds=list(bounds))
        _check_function(f)
        offsets = [o for _, o in code]
        _check_code(f, len(constants), len(kernels), len(externs), where=lambda i: f" (byte {offsets[i]})")
        if any(g.name == name for g in functions):
            raise FormatError(f"FUNCTIONS: function {k} (byte {at}): duplicate function name '{name}'")
        new_ops = [int(ins.opcode) for ins in f.code if int(ins.opcode) in (10, 11)]
        if version < 2 and new_ops:
            raise FormatError(f"FUNCTIONS: function '{name}': opcode {new_ops[0]} needs format version 2, "
                              f"the blob says {version}")
        functions.append(f)
    _check_calls(functions)
    writer = ""
    if WRITER_SECTION in sec:
        c = _Cursor(blob, *sec[WRITER_SECTION], "WRITER")
        n = c.one("I")
        if n > MAX_WRITER_BYTES:
            raise FormatError(f"WRITER: {n} bytes, more than {MAX_WRITER_BYTES}")
        try:
            writer = bytes(c.array("B", n)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"WRITER: not UTF-8: {e}") from None
    cuda = None
    if CUDA_SECTION in sec:
        try:
            cuda = read_cuda_section(blob, *sec[CUDA_SECTION])
        except CudaSectionError as e:
            raise FormatError(str(e)) from None
    return ExecutableSpec(target, kernels, externs, constants, functions, writer=writer, cuda=cuda)


def _read_code(blob: bytes, name: str, start: int, end: int):
    c = _Cursor(blob, start, end, f"BYTECODE of function '{name}'")
    out = []
    while c.pos < end:
        at = c.pos
        opcode, n = c.read("II")
        out.append((Instruction(opcode, c.array("q", n)), at))
    return out
