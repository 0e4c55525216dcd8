"""The executable blob: a plain data model, ``serialize`` and ``deserialize``.

``docs/executable-format.md`` is the contract; this module writes exactly that layout, and
``deserialize`` checks a blob the way the C loader (``runtime_c``) does, so tests, test-blob
makers and ``kiln inspect`` share one reader. Everything here is plain data: no IR, no codegen.

>>> spec = ExecutableSpec("llvm", kernels=["add"], externs=[], constants=[],
...     functions=[FunctionSpec("main", [ParamSpec("x", "float32", ["n"]), ParamSpec("y", "float32", ["n"])],
...                             sym_names=["n"], num_registers=2, arena_size=0,
...                             code=[Instruction(Op.CALL_KERNEL, [0, 2, 0, 1]), Instruction(Op.RET, [1])])])
>>> deserialize(serialize(spec)) == spec
True

Layout written (the doc allows any order; this one keeps the tables small and first)::

    header (64) | section table | STRINGS | KERNELS | EXTERNS | FUNCTIONS | BYTECODE |
    CONSTANTS (table, then each constant's data at a 64-byte aligned offset)

Dtypes are Kiln dtype strings here (``"float32"``, ``"bool"``, ``"float32x8"``); on disk they
are DLPack (code, bits, lanes). Shapes of parameters hold ints (fixed) or symbolic dimension
names; bytecode operands are the raw i64 operands of the doc (dims < 0 symbolic: -1 - k).
"""
from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import subbyte
from ..ir import dtype as dt
from ..ir.derived_dims import DerivedDim, DimError, check_table, format_dims
from .cuda_section import CUDA_SECTION, CudaSection

MAGIC = b"KILNEXE\0"
FORMAT_VERSION = 4
# Version 2 added IF (control flow), FREE and the FUNCTIONS entry's flags (private functions).
MIN_FORMAT_VERSION_WITH_FLAGS = 2
# Version 3 added derived dimensions and symbolic-dimension bounds to FUNCTIONS entries. The
# writer emits version 2 when no function uses them, so older runtimes read those blobs.
MIN_FORMAT_VERSION_WITH_DERIVED = 3
# Version 4 added CALL_PACKED (an external function's result kept in a register) and string
# parameters (docs/strings.md); written only by blobs that use them.
MIN_FORMAT_VERSION_WITH_PACKED = 4
FUNCTION_PRIVATE = 1  # FUNCTIONS flags bit: callable only through IF, not from the VM module
PARAM_WRITTEN = 1     # version 3 parameter flag: the function updates this argument in place
HEADER_SIZE = 64
SECTION_ENTRY_SIZE = 24
ALIGN = 64


class Section(enum.IntEnum):
    STRINGS = 1
    KERNELS = 2
    EXTERNS = 3
    CONSTANTS = 4
    FUNCTIONS = 5
    BYTECODE = 6


# Kinds >= this are optional: readers skip the ones they do not know.
OPTIONAL_SECTION_BASE = 0x100
# The optional WRITER section: ``u32 length`` + that many bytes of UTF-8 naming the Kiln that wrote
# the blob ("kiln 0.1.0"), so a runtime refusing a newer format can say which Kiln wrote it.
WRITER_SECTION = OPTIONAL_SECTION_BASE
MAX_WRITER_BYTES = 64

# Limits of the C runtime (kiln_runtime.h, internal.h, vm.h), so a blob the writer accepts is
# one the loader accepts.
MAX_NDIM = 64
MAX_SYMS = 64
MAX_REGISTERS = 1 << 20
MAX_CALL_DEPTH = 64  # IF calls nest at most this many functions deep (the VM recurses on IF)
# The VM module's own functions: a graph function may not take these names.
RESERVED_NAMES = ("init", "profile")


class Op(enum.IntEnum):
    LOAD_CONST = 1
    ALLOC_ARENA = 2
    ALLOC_OUTPUT = 3
    CALL_KERNEL = 4
    CALL_EXTERN = 5
    MAKE_TUPLE = 6
    GET_ITEM = 7
    MOVE = 8
    RET = 9
    IF = 10
    FREE = 11
    CALL_PACKED = 12


class FormatError(ValueError):
    """A blob (or a spec being serialized) breaks the format; the message names what and where."""


# ---- the data model ------------------------------------------------------------------------
Dim = Union[int, str]


@dataclass
class ParamSpec:
    """One argument of a graph function: a tensor of ``dtype`` and ``shape`` (ints or sym names)."""
    name: str
    dtype: str
    shape: List[Dim]
    written: bool = False  # updated in place by the function (format >= 3): see PARAM_WRITTEN


@dataclass
class Instruction:
    """One bytecode instruction: an ``Op`` and its i64 operands, exactly as on disk."""
    opcode: int
    operands: List[int] = field(default_factory=list)

    def __eq__(self, other):
        return (isinstance(other, Instruction) and int(self.opcode) == int(other.opcode)
                and list(self.operands) == list(other.operands))

    def __repr__(self):
        try:
            name = Op(self.opcode).name
        except ValueError:
            name = f"op{self.opcode}"
        return f"{name} {' '.join(str(o) for o in self.operands)}".rstrip()


@dataclass
class FunctionSpec:
    """One graph function: its signature, register count, planned arena and code."""
    name: str
    params: List[ParamSpec]
    sym_names: List[str]
    num_registers: int
    arena_size: int
    code: List[Instruction]
    private: bool = False   # a branch of an IF: not exposed by the VM module
    # Dimensions computed from the symbolic ones (kiln.ir.derived_dims): number len(sym_names)+j.
    # A parameter or ALLOC dim refers to one by its display name (dim_names()) / its number.
    derived: List[DerivedDim] = field(default_factory=list)
    # Upper bound per symbolic then derived dimension (-1: none); empty = none at all. The VM
    # refuses a call whose arguments exceed one (the arena was planned at the bounds).
    bounds: List[int] = field(default_factory=list)

    def dim_names(self) -> List[str]:
        """Names of every dimension number: ``sym_names``, then each derived one's expression."""
        return format_dims(self.sym_names, self.derived)

    def uses_v4(self) -> bool:
        return (any(Op(i.opcode) == Op.CALL_PACKED for i in self.code)
                or any(p.dtype == "string" for p in self.params))

    def uses_v3(self) -> bool:
        return bool(self.derived) or any(b >= 0 for b in self.bounds) or any(p.written for p in self.params)


@dataclass
class ExecutableSpec:
    """Everything one blob holds."""
    target: str
    kernels: List[str]
    externs: List[str]
    constants: List[np.ndarray]
    functions: List[FunctionSpec]
    writer: str = ""   # who wrote it ("kiln 0.1.0"); written as the WRITER section, not compared
    cuda: Optional[CudaSection] = None   # a CUDA model's PTX and launches (optional section 0x101)

    def __eq__(self, other):
        if not isinstance(other, ExecutableSpec):
            return NotImplemented
        return (self.target == other.target and self.kernels == other.kernels
                and self.externs == other.externs and self.functions == other.functions
                and self.cuda == other.cuda
                and len(self.constants) == len(other.constants)
                and all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
                        for a, b in zip(self.constants, other.constants)))

    def function(self, name: str) -> FunctionSpec:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no function {name!r}; functions: {[f.name for f in self.functions]}")


# ---- dtypes --------------------------------------------------------------------------------
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BOOL = 0, 1, 2, 6
_DL_NARROW = dt.NARROW_FLOAT_DLPACK   # bfloat16, float8: kDLBfloat and DLPack 1.1's codes
_NARROW_OF_DL = {v: k for k, v in _DL_NARROW.items()}
# A string tensor (docs/strings.md): kDLOpaqueHandle, one 128-bit {offset, length} record per
# element; only graph function parameters have this dtype in a blob.
_DL_STRING = (3, 128, 1)


def dtype_to_dl(dtype: str) -> Tuple[int, int, int]:
    """Kiln dtype string -> DLPack (code, bits, lanes); ``bool`` is (6, 8, 1) as in the kernel ABI."""
    if dtype == "string":
        return _DL_STRING
    e = dt.element(dtype)
    if e == "bool":
        return _DL_BOOL, 8, dt.lanes(dtype)
    if e in _DL_NARROW:
        return _DL_NARROW[e] + (dt.lanes(dtype),)
    code = _DL_UINT if dt.is_uint(e) else (_DL_FLOAT if dt.is_float(e) else _DL_INT)
    return code, dt.bits(e), dt.lanes(dtype)


def dtype_from_dl(code: int, bits: int, lanes: int) -> str:
    """DLPack (code, bits, lanes) -> Kiln dtype; ``FormatError`` for one Kiln does not have."""
    if (code, bits, lanes) == _DL_STRING:
        return "string"
    if (code, bits) in _NARROW_OF_DL and (lanes == 1 or (lanes > 1 and bits >= 8)):
        return dt.with_lanes(_NARROW_OF_DL[code, bits], lanes)
    name = {(_DL_INT, 8): "int8", (_DL_INT, 16): "int16", (_DL_INT, 32): "int32", (_DL_INT, 64): "int64",
            (_DL_UINT, 8): "uint8", (_DL_UINT, 16): "uint16", (_DL_UINT, 32): "uint32",
            (_DL_UINT, 64): "uint64", (_DL_FLOAT, 16): "float16", (_DL_FLOAT, 32): "float32",
            (_DL_FLOAT, 64): "float64", (_DL_BOOL, 8): "bool",
            (_DL_INT, 4): "int4", (_DL_UINT, 4): "uint4", (_DL_INT, 2): "int2",
            (_DL_UINT, 2): "uint2"}.get((code, bits))
    if name is None or lanes < 1 or (bits < 8 and lanes != 1):
        raise FormatError(f"unsupported dtype (code {code}, bits {bits}, lanes {lanes})")
    return dt.with_lanes(name, lanes)


def dtype_nbytes(dtype: str) -> int:
    """Bytes of one element (bool: one byte; a packed sub-byte element: its whole byte)."""
    _, bits, lanes = dtype_to_dl(dtype)
    return (bits * lanes + 7) // 8


def tensor_nbytes(dtype: str, shape) -> int:
    """Bytes of a compact tensor: ``ceil(numel * bits / 8)``, so sub-byte elements (int4, int2)
    are packed, as the runtime sizes them."""
    _, bits, lanes = dtype_to_dl(dtype)
    return (math.prod(int(d) for d in shape) * bits * lanes + 7) // 8


def _constant_bytes(c: np.ndarray) -> int:
    """Bytes constant ``c`` takes in the blob (sub-byte dtypes packed)."""
    return subbyte.packed_nbytes(c.dtype.name, c.size) if subbyte.is_subbyte(c.dtype) else c.nbytes


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


# Operand counts: fixed prefix, and which operand (if any) counts the variable tail.
_FIXED = {Op.LOAD_CONST: 2, Op.GET_ITEM: 3, Op.MOVE: 2, Op.RET: 1, Op.FREE: 1}
_VARIADIC = {Op.ALLOC_ARENA: (6, 5), Op.ALLOC_OUTPUT: (5, 4), Op.CALL_KERNEL: (2, 1),
             Op.CALL_EXTERN: (2, 1), Op.MAKE_TUPLE: (2, 1), Op.IF: (5, 4), Op.CALL_PACKED: (3, 2)}


# ---- writer --------------------------------------------------------------------------------
class _Strings:
    """Interned string table: each distinct string once, in first-use order."""

    def __init__(self):
        self.items: List[str] = []
        self.index: Dict[str, int] = {}

    def __call__(self, s: str) -> int:
        if not isinstance(s, str):
            raise FormatError(f"expected a string, got {s!r}")
        if s not in self.index:
            self.index[s] = len(self.items)
            self.items.append(s)
        return self.index[s]


def _shape_codes(shape: Sequence[Dim], sym_names: Sequence[str], where: str) -> List[int]:
    out = []
    for d in shape:
        if isinstance(d, str):
            if d not in sym_names:
                raise FormatError(f"{where}: symbolic dimension {d!r} is not in sym_names {list(sym_names)}")
            out.append(-1 - list(sym_names).index(d))
        elif int(d) >= 0:
            out.append(int(d))
        else:
            raise FormatError(f"{where}: negative dimension {d}; name symbolic dimensions by string")
    return out


def serialize(spec: ExecutableSpec) -> bytes:
    """The blob for ``spec``. Checks it first (``validate``): a bad spec raises ``FormatError``."""
    size, pieces = layout(spec)
    blob = bytearray(size)
    for off, data in pieces:
        blob[off:off + len(data)] = data
    return bytes(blob)


def write_blob(spec: ExecutableSpec, write) -> int:
    """Stream the blob for ``spec`` into ``write`` (e.g. ``file.write`` or a hash's ``update``),
    piece by piece, without ever holding it whole: the constants go out straight from their
    arrays. Writes the very bytes ``serialize(spec)`` returns; returns their count."""
    size, pieces = layout(spec)
    return write_pieces(size, pieces, write)


def write_pieces(size: int, pieces, write) -> int:
    """Write a blob given as ``layout``'s ``(size, pieces)`` through ``write``, zero bytes in
    the gaps; returns ``size``."""
    pos = 0
    for off, data in pieces:
        if off > pos:
            write(bytes(off - pos))
        write(data)
        pos = off + len(data)
    if size > pos:
        write(bytes(size - pos))
    return size


def writer_string() -> str:
    """What the WRITER section of a blob written now says: ``"kiln <version>"``."""
    from .. import __version__
    return f"kiln {__version__}"


def layout(spec: ExecutableSpec) -> Tuple[int, List[Tuple[int, memoryview]]]:
    """``(blob_size, [(offset, bytes), ...])``: the blob for ``spec`` as pieces in increasing
    offset order; the gaps between them (alignment padding) are zero bytes. A constant's piece
    is a view of its array's memory when that already is little-endian and C-ordered (no copy).
    Checks ``spec`` first (``validate``)."""
    validate(spec)
    version = (FORMAT_VERSION if any(f.uses_v4() for f in spec.functions) else
               MIN_FORMAT_VERSION_WITH_DERIVED if any(f.uses_v3() for f in spec.functions) else
               MIN_FORMAT_VERSION_WITH_FLAGS)
    strings = _Strings()
    strings(spec.target)
    kernels = b"".join(struct.pack("<I", strings(k)) for k in spec.kernels)
    externs = b"".join(struct.pack("<I", strings(e)) for e in spec.externs)

    bytecode = bytearray()
    code_ranges = []
    for f in spec.functions:
        start = len(bytecode)
        for ins in f.code:
            bytecode += struct.pack("<II", int(ins.opcode), len(ins.operands))
            bytecode += struct.pack(f"<{len(ins.operands)}q", *[int(o) for o in ins.operands])
        code_ranges.append((start, len(bytecode) - start))

    # FUNCTIONS entries need the BYTECODE offset, which needs their size: build with relative
    # code offsets first (the entries have a fixed size either way), then patch.
    def functions_blob(code_base: int) -> bytes:
        out = bytearray(struct.pack("<I", len(spec.functions)))
        for f, (start, size) in zip(spec.functions, code_ranges):
            out += struct.pack("<IIIII", strings(f.name), FUNCTION_PRIVATE if f.private else 0, len(f.params),
                               f.num_registers, len(f.sym_names))
            out += struct.pack(f"<{len(f.sym_names)}I", *[strings(s) for s in f.sym_names])
            if version >= MIN_FORMAT_VERSION_WITH_DERIVED:
                out += struct.pack("<I", len(f.derived))
                for d in f.derived:
                    out += struct.pack("<IIqq", d.op, d.flags, d.a, d.b)
                bounds = list(f.bounds) or [-1] * (len(f.sym_names) + len(f.derived))
                out += struct.pack(f"<{len(bounds)}q", *bounds)
            out += struct.pack("<QQQ", f.arena_size, code_base + start, size)
            for i, p in enumerate(f.params):
                shape = _shape_codes(p.shape, f.dim_names(), f"{f.name}: parameter {i} '{p.name}'")
                out += struct.pack("<IBBHI", strings(p.name), *dtype_to_dl(p.dtype), len(shape))
                out += struct.pack(f"<{len(shape)}q", *shape)
            if version >= MIN_FORMAT_VERSION_WITH_DERIVED:
                out += struct.pack(f"<{len(f.params)}I", *[PARAM_WRITTEN if p.written else 0 for p in f.params])
        return bytes(out)

    functions_blob(0)  # interns every string, so STRINGS is final before the layout is fixed
    string_blob = struct.pack("<I", len(strings.items)) + b"".join(
        struct.pack("<I", len(b)) + b for b in (s.encode("utf-8") for s in strings.items))

    consts = [np.asarray(c, order="C") for c in spec.constants]  # not ascontiguousarray: it makes 0-d 1-d
    const_table_size = 4 + sum(4 + 4 + 8 * c.ndim + 16 for c in consts)

    # Section order and offsets (each section starts 8-byte aligned: nicer for readers).
    writer = (spec.writer or writer_string()).encode("utf-8")[:MAX_WRITER_BYTES]
    cuda = spec.cuda.to_bytes() if spec.cuda is not None else None
    order = [Section.STRINGS, Section.KERNELS, Section.EXTERNS, Section.FUNCTIONS, Section.BYTECODE,
             WRITER_SECTION, *([CUDA_SECTION] if cuda else []), Section.CONSTANTS]
    table_offset = HEADER_SIZE
    pos = table_offset + SECTION_ENTRY_SIZE * len(order)
    sizes = {Section.STRINGS: len(string_blob), Section.KERNELS: 4 + len(kernels),
             Section.EXTERNS: 4 + len(externs), Section.FUNCTIONS: len(functions_blob(0)),
             Section.BYTECODE: len(bytecode), WRITER_SECTION: 4 + len(writer),
             CUDA_SECTION: len(cuda or b"")}
    offsets = {}
    for kind in order[:-1]:
        pos = align_up(pos, 8)
        offsets[kind] = pos
        pos += sizes[kind]
    offsets[Section.CONSTANTS] = pos = align_up(pos, 8)
    pos += const_table_size
    data_offsets = []
    for c in consts:
        pos = align_up(pos, ALIGN)
        data_offsets.append(pos)
        pos += _constant_bytes(c)
    sizes[Section.CONSTANTS] = pos - offsets[Section.CONSTANTS]
    blob_size = align_up(pos, 8)

    head = bytearray(table_offset + SECTION_ENTRY_SIZE * len(order))
    head[0:HEADER_SIZE] = struct.pack("<8sIIQIIQ24x", MAGIC, version, HEADER_SIZE, blob_size,
                                      len(order), strings.index[spec.target], table_offset)
    for i, kind in enumerate(order):
        struct.pack_into("<IIQQ", head, table_offset + i * SECTION_ENTRY_SIZE, kind, 0,
                         offsets[kind], sizes[kind])
    pieces = [(0, head),
              (offsets[Section.STRINGS], string_blob),
              (offsets[Section.KERNELS], struct.pack("<I", len(spec.kernels)) + kernels),
              (offsets[Section.EXTERNS], struct.pack("<I", len(spec.externs)) + externs),
              (offsets[Section.FUNCTIONS], functions_blob(offsets[Section.BYTECODE])),
              (offsets[Section.BYTECODE], bytes(bytecode)),
              (offsets[WRITER_SECTION], struct.pack("<I", len(writer)) + writer)]
    if cuda:
        pieces.append((offsets[CUDA_SECTION], cuda))
    table = bytearray(struct.pack("<I", len(consts)))
    for c, off in zip(consts, data_offsets):
        table += struct.pack("<BBHI", *dtype_to_dl(dt.from_numpy(c.dtype)), c.ndim)
        table += struct.pack(f"<{c.ndim}q", *c.shape)
        table += struct.pack("<QQ", off, _constant_bytes(c))
    pieces.append((offsets[Section.CONSTANTS], bytes(table)))
    for c, off in zip(consts, data_offsets):
        if subbyte.is_subbyte(c.dtype):   # packed, several elements to a byte
            pieces.append((off, subbyte.pack(c)))
            continue
        # Little-endian on disk whatever the host; bool is stored as one byte 0/1. ``astype``
        # copies only on a big-endian host; the view then shares the array's memory.
        le = np.ascontiguousarray(c.astype(c.dtype.newbyteorder("<"), copy=False)).reshape(-1)
        pieces.append((off, le.view(np.uint8)))
    return blob_size, [(off, memoryview(data)) for off, data in pieces]


# ---- checks shared by the writer and the reader --------------------------------------------
def _check_code(f: FunctionSpec, num_consts: int, num_kernels: int, num_externs: int,
                where=lambda i: "") -> None:
    """Operand counts, registers, table indices, symbolic dims, static arena bounds, final RET."""
    nsym = len(f.sym_names) + len(f.derived)

    def fail(i, msg):
        raise FormatError(f"function '{f.name}': instruction {i}{where(i)}: {msg}")

    def reg(i, r, what):
        if not 0 <= r < f.num_registers:
            fail(i, f"{what} register {r} out of range (num_registers {f.num_registers})")

    def index(i, v, n, table):
        if not 0 <= v < n:
            fail(i, f"{table} index {v} out of range ({n} {table}s)")

    for i, ins in enumerate(f.code):
        try:
            op = Op(ins.opcode)
        except ValueError:
            fail(i, f"unknown opcode {ins.opcode}")
        ops = [int(o) for o in ins.operands]
        if op in _FIXED:
            if len(ops) != _FIXED[op]:
                fail(i, f"{op.name} takes {_FIXED[op]} operands, got {len(ops)}")
        else:
            prefix, count_at = _VARIADIC[op]
            if len(ops) < prefix:
                fail(i, f"{op.name} takes at least {prefix} operands, got {len(ops)}")
            n = ops[count_at]
            if n < 0 or len(ops) != prefix + n:
                fail(i, f"{op.name} with count {n} takes {prefix + max(n, 0)} operands, got {len(ops)}")
        if op == Op.LOAD_CONST:
            reg(i, ops[0], "dst")
            index(i, ops[1], num_consts, "constant")
        elif op in (Op.ALLOC_ARENA, Op.ALLOC_OUTPUT):
            reg(i, ops[0], "dst")
            a = 2 if op == Op.ALLOC_ARENA else 1
            try:
                dtype = dtype_from_dl(*ops[a:a + 3])
            except FormatError as e:
                fail(i, str(e))
            dims = ops[a + 4:]
            if len(dims) > MAX_NDIM:
                fail(i, f"ndim {len(dims)} exceeds the limit of {MAX_NDIM}")
            for d in dims:
                if d < 0 and -1 - d >= nsym:
                    fail(i, f"symbolic dimension {-1 - d} out of range ({nsym} symbolic dimensions)")
            if op == Op.ALLOC_ARENA:
                offset = ops[1]
                if offset < 0 or offset % dtype_nbytes(dtype):
                    fail(i, f"arena offset {offset} is not a non-negative multiple of the element size "
                            f"{dtype_nbytes(dtype)}")
                if all(d >= 0 for d in dims):
                    nbytes = tensor_nbytes(dtype, dims)  # Python ints: no overflow
                    if offset + nbytes > f.arena_size:
                        fail(i, f"arena view [{offset}, {offset + nbytes}) exceeds arena_size {f.arena_size}")
        elif op == Op.CALL_PACKED:
            reg(i, ops[0], "dst")
            index(i, ops[1], num_externs, "extern")
            for r in ops[3:]:
                reg(i, r, "argument")
        elif op in (Op.CALL_KERNEL, Op.CALL_EXTERN):
            index(i, ops[0], num_kernels if op == Op.CALL_KERNEL else num_externs,
                  "kernel" if op == Op.CALL_KERNEL else "extern")
            for r in ops[2:]:
                reg(i, r, "argument")
        elif op == Op.MAKE_TUPLE:
            reg(i, ops[0], "dst")
            for r in ops[2:]:
                reg(i, r, "field")
        elif op == Op.GET_ITEM:
            reg(i, ops[0], "dst")
            reg(i, ops[1], "src")
            if ops[2] < 0:
                fail(i, f"negative tuple index {ops[2]}")
        elif op == Op.MOVE:
            reg(i, ops[0], "dst")
            reg(i, ops[1], "src")
        elif op in (Op.RET, Op.FREE):
            reg(i, ops[0], "src" if op == Op.RET else "freed")
        elif op == Op.IF:
            reg(i, ops[0], "dst")
            reg(i, ops[1], "cond")
            for r in ops[5:]:
                reg(i, r, "argument")
            # Function indices, argument counts and recursion: _check_calls (needs every function).
    if not f.code or int(f.code[-1].opcode) != Op.RET:
        raise FormatError(f"function '{f.name}': code does not end with RET")


def _check_function(f: FunctionSpec) -> None:
    if f.name in RESERVED_NAMES:
        raise FormatError(f"function name '{f.name}' is reserved by the VM")
    if len(f.sym_names) + len(f.derived) > MAX_SYMS:
        raise FormatError(f"function '{f.name}': {len(f.sym_names)} symbolic and {len(f.derived)} derived "
                          f"dimensions exceed the limit of {MAX_SYMS}")
    try:
        check_table(f.sym_names, f.derived, f"function '{f.name}'")
    except DimError as e:
        raise FormatError(str(e)) from None
    if f.bounds and len(f.bounds) != len(f.sym_names) + len(f.derived):
        raise FormatError(f"function '{f.name}': {len(f.bounds)} bounds for {len(f.sym_names)} symbolic "
                          f"and {len(f.derived)} derived dimensions")
    if f.num_registers > MAX_REGISTERS:
        raise FormatError(f"function '{f.name}': num_registers {f.num_registers} exceeds the limit "
                          f"of {MAX_REGISTERS}")
    for i, p in enumerate(f.params):
        if len(p.shape) > MAX_NDIM:
            raise FormatError(f"function '{f.name}': parameter {i} '{p.name}': ndim {len(p.shape)} "
                              f"exceeds the limit of {MAX_NDIM}")
    if len(set(f.sym_names)) != len(f.sym_names):
        raise FormatError(f"function '{f.name}': duplicate symbolic dimension names {f.sym_names}")
    if len(f.params) > f.num_registers:
        raise FormatError(f"function '{f.name}': {len(f.params)} parameters but only "
                          f"{f.num_registers} registers")
    if f.arena_size < 0 or f.arena_size % ALIGN:
        raise FormatError(f"function '{f.name}': arena_size {f.arena_size} is not a multiple of {ALIGN}")
    used = {d for p in f.params for d in p.shape if isinstance(d, str)}
    for s in f.sym_names:
        # A symbolic dimension is bound from the arguments; one no parameter has is never bound.
        if s not in used:
            raise FormatError(f"function '{f.name}': symbolic dimension '{s}' appears in no parameter shape")


def _check_calls(functions: Sequence[FunctionSpec]) -> None:
    """IF targets: function indices in range, argument counts equal to the callee's parameter
    count, no recursion and at most ``MAX_CALL_DEPTH`` nested functions (the VM recurses on IF)."""
    callees: Dict[int, List[int]] = {}
    for k, f in enumerate(functions):
        callees[k] = []
        for i, ins in enumerate(f.code):
            if int(ins.opcode) != Op.IF:
                continue
            ops = [int(o) for o in ins.operands]
            for g in ops[2:4]:
                if not 0 <= g < len(functions):
                    raise FormatError(f"function '{f.name}': instruction {i}: IF function index {g} out of "
                                      f"range ({len(functions)} functions)")
                if ops[4] != len(functions[g].params):
                    raise FormatError(f"function '{f.name}': instruction {i}: IF passes {ops[4]} arguments "
                                      f"to '{functions[g].name}', which takes {len(functions[g].params)}")
                callees[k].append(g)
    depth = [0] * len(functions)  # 0 unvisited, -1 on the current path, else nesting depth

    def visit(k, path):
        if len(path) + 1 > MAX_CALL_DEPTH:
            raise FormatError(f"IF calls nest deeper than {MAX_CALL_DEPTH} functions (at '{functions[k].name}')")
        depth[k] = -1
        deepest = 0
        for g in callees[k]:
            if depth[g] == -1:
                cycle = " -> ".join(functions[j].name for j in path + [k, g])
                raise FormatError(f"IF calls form a cycle ({cycle}); recursion is not allowed")
            if depth[g] == 0:
                visit(g, path + [k])
            deepest = max(deepest, depth[g])
        depth[k] = deepest + 1
        if len(path) + depth[k] > MAX_CALL_DEPTH:
            raise FormatError(f"IF calls nest deeper than {MAX_CALL_DEPTH} functions (at '{functions[k].name}')")
    for k in range(len(functions)):
        if depth[k] == 0:
            visit(k, [])


def validate(spec: ExecutableSpec) -> None:
    """Check a spec against the format's rules; raises ``FormatError``."""
    names = [f.name for f in spec.functions]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise FormatError(f"duplicate function names {sorted(dup)}")
    for k, c in enumerate(spec.constants):
        try:
            if dt.from_numpy(np.asarray(c).dtype) == "string":   # stored as uint8 blocks
                raise ValueError("string")
        except ValueError:
            raise FormatError(f"constant {k}: unsupported dtype {np.asarray(c).dtype}") from None
        if np.ndim(c) > MAX_NDIM:
            raise FormatError(f"constant {k}: ndim {np.ndim(c)} exceeds the limit of {MAX_NDIM}")
    for s in [spec.target, *spec.kernels, *spec.externs]:
        if "\0" in s:
            raise FormatError(f"string {s!r} contains NUL")
    for f in spec.functions:
        _check_function(f)
        for i, p in enumerate(f.params):
            try:
                dt.check(p.dtype)
            except ValueError as e:
                raise FormatError(f"{f.name}: parameter {i} '{p.name}': {e}") from None
            _shape_codes(p.shape, f.dim_names(), f"{f.name}: parameter {i} '{p.name}'")
        _check_code(f, len(spec.constants), len(spec.kernels), len(spec.externs))
    _check_calls(spec.functions)


def disassemble(spec: ExecutableSpec) -> str:
    """The tables and bytecode of ``spec`` as text, one instruction per line."""
    lines = [f"target {spec.target!r}"]
    lines += [f"kernel {i}: {k}" for i, k in enumerate(spec.kernels)]
    lines += [f"extern {i}: {e}" for i, e in enumerate(spec.externs)]
    lines += [f"const {i}: {c.dtype}{list(c.shape)}" for i, c in enumerate(spec.constants)]
    for f in spec.functions:
        params = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in f.params)
        private = "private " if f.private else ""
        lines.append(f"{private}function {f.name}({params})  registers={f.num_registers} arena={f.arena_size}")
        lines += [f"  {i:4d}  {ins!r}" for i, ins in enumerate(f.code)]
    return "\n".join(lines)


from ._reader import deserialize  # noqa: E402  (the reader uses the definitions above)

__all__ = ["ExecutableSpec", "FunctionSpec", "ParamSpec", "Instruction", "Op", "Section", "FormatError",
           "serialize", "write_blob", "write_pieces", "layout", "deserialize", "validate", "disassemble", "dtype_to_dl", "dtype_from_dl", "dtype_nbytes", "tensor_nbytes",
           "MAGIC", "FORMAT_VERSION", "ALIGN"]
