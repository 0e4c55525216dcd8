"""Helpers for the executable tests: a small spec that uses every section and opcode, and a way
to find and patch fields of a serialized blob."""
import struct

import numpy as np

from kiln.executable.format import (HEADER_SIZE, ExecutableSpec, FunctionSpec, Instruction, Op, ParamSpec,
                                    Section)


def sample_spec() -> ExecutableSpec:
    """Two functions, two kernels, one extern, three constants (one bool), every opcode."""
    I = Instruction
    main = FunctionSpec(
        "main", [ParamSpec("x", "float32", ["n", 4]), ParamSpec("w", "float32", [4, 4])], ["n"],
        num_registers=10, arena_size=128,
        code=[I(Op.LOAD_CONST, [2, 0]),
              I(Op.ALLOC_ARENA, [3, 0, 2, 32, 1, 2, 4, 4]),
              I(Op.CALL_KERNEL, [0, 3, 1, 2, 3]),
              I(Op.ALLOC_OUTPUT, [4, 2, 32, 1, 2, -1, 4]),
              I(Op.CALL_KERNEL, [1, 3, 0, 3, 4]),
              I(Op.ALLOC_OUTPUT, [5, 2, 32, 1, 2, -1, 4]),
              I(Op.CALL_EXTERN, [0, 2, 4, 5]),
              I(Op.MAKE_TUPLE, [6, 2, 5, 3]),
              I(Op.GET_ITEM, [7, 6, 0]),
              I(Op.MOVE, [8, 7]),
              I(Op.MAKE_TUPLE, [9, 2, 8, 2]),
              I(Op.RET, [9])])
    other = FunctionSpec("other", [ParamSpec("a", "int64", [])], [], num_registers=2, arena_size=0,
                         code=[I(Op.LOAD_CONST, [1, 2]), I(Op.RET, [1])])
    consts = [np.arange(16, dtype="float32").reshape(4, 4), np.array([True, False, True]),
              np.array(7, dtype="int64")]
    return ExecutableSpec("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=generic", ["matmul", "add"],
                          ["env.relu"], consts, [main, other])


def sections(blob: bytes) -> dict:
    """kind -> (offset, size, table entry offset) from a blob's section table."""
    num, table = struct.unpack_from("<I", blob, 24)[0], struct.unpack_from("<Q", blob, 32)[0]
    out = {}
    for i in range(num):
        kind, _, off, size = struct.unpack_from("<IIQQ", blob, table + 24 * i)
        out[kind] = (off, size, table + 24 * i)
    return out


def patch(blob: bytes, offset: int, fmt: str, *values) -> bytes:
    b = bytearray(blob)
    struct.pack_into("<" + fmt, b, offset, *values)
    return bytes(b)


def section_start(blob: bytes, kind: Section) -> int:
    return sections(blob)[kind][0]


def first_function(blob: bytes):
    """Byte offsets of the fields of the first FUNCTIONS entry (format version 2: name, flags,
    num_params, num_registers, num_sym, sym_names, arena_size, code_offset, code_size, first
    param)."""
    base = section_start(blob, Section.FUNCTIONS) + 4
    num_sym = struct.unpack_from("<I", blob, base + 16)[0]
    after_syms = base + 20 + 4 * num_sym
    return {"name": base, "flags": base + 4, "num_params": base + 8, "num_registers": base + 12,
            "num_sym": base + 16, "sym_names": base + 20, "arena_size": after_syms,
            "code_offset": after_syms + 8, "code_size": after_syms + 16, "param0": after_syms + 24}


__all__ = ["sample_spec", "sections", "patch", "section_start", "first_function", "HEADER_SIZE"]
