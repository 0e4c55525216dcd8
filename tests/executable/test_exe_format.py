"""The executable blob: round trip, exact layout, and every check of the Python-side reader."""
import os
import random
import re
import struct

import numpy as np
import pytest

import kiln
from kiln.executable.format import (ALIGN, FORMAT_VERSION, MAGIC, WRITER_SECTION, ExecutableSpec, FormatError,
                                    FunctionSpec, Instruction, Op, ParamSpec, Section, deserialize,
                                    dtype_from_dl, dtype_to_dl, serialize)

from exe_blobs import first_function, patch, sample_spec, section_start, sections

I = Instruction


def fn(code, params=None, sym_names=(), num_registers=4, arena_size=64, name="main"):
    params = [ParamSpec("x", "float32", [4])] if params is None else params
    return FunctionSpec(name, params, list(sym_names), num_registers, arena_size, code)


def spec_with(*functions, constants=(), kernels=("k",), externs=("e",)):
    return ExecutableSpec("llvm", list(kernels), list(externs), list(constants), list(functions))


# ---- round trip and layout -----------------------------------------------------------------
def test_round_trip():
    spec = sample_spec()
    blob = serialize(spec)
    back = deserialize(blob)
    assert back == spec
    assert back.function("main").params[0].shape == ["n", 4]
    assert back.constants[1].dtype == np.bool_ and back.constants[2].shape == ()
    assert serialize(back) == blob  # deterministic


def test_header_and_sections():
    blob = serialize(sample_spec())
    magic, version, header_size, size, nsec, target, table = struct.unpack_from("<8sIIQIIQ", blob, 0)
    # Version 2 while no function uses derived dims or bounds (version 3), so old runtimes read it.
    # a blob that needs no later feature is written as version 2 (older runtimes read it)
    assert (magic, version, header_size, size, nsec) == (MAGIC, 2, 64, len(blob), 7)
    assert blob[40:64] == bytes(24)
    secs = sections(blob)
    assert sorted(secs) == [int(k) for k in Section] + [WRITER_SECTION]
    ranges = sorted((off, off + size) for off, size, _ in secs.values())
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:])), "sections overlap"
    assert ranges[-1][1] <= len(blob)


def test_the_blob_names_the_kiln_that_wrote_it():
    """The optional WRITER section (kind 0x100; older runtimes skip it) says "kiln <version>",
    the reader returns it, and a blob of a newer format is refused naming both Kilns."""
    blob = serialize(sample_spec())
    off, size, _ = sections(blob)[WRITER_SECTION]
    (n,) = struct.unpack_from("<I", blob, off)
    assert blob[off + 4:off + 4 + n].decode() == f"kiln {kiln.__version__}" and size == 4 + n
    assert deserialize(blob).writer == f"kiln {kiln.__version__}"
    newer = bytearray(blob)
    struct.pack_into("<I", newer, 8, FORMAT_VERSION + 1)
    other = f"kiln {kiln.__version__}"[:-1] + "9"                 # "kiln 0.1.0" -> "kiln 0.1.9"
    newer[off + 4 + n - 1] = ord("9")
    with pytest.raises(FormatError, match=rf"version {FORMAT_VERSION + 1} is newer than this runtime "
                       rf"supports \({FORMAT_VERSION}\): written by {re.escape(other)}, this is kiln "
                       rf"{re.escape(kiln.__version__)}"):
        deserialize(bytes(newer))


def test_the_runtime_and_the_compiler_are_one_release():
    """KILN_VERSION in kiln_runtime.h (named in the runtime's version errors) is kiln.__version__."""
    header = os.path.join(os.path.dirname(kiln.__file__), "..", "..", "runtime_c", "include",
                          "kiln_runtime.h")
    text = open(header).read()
    assert f'#define KILN_VERSION "{kiln.__version__}"' in text


def test_constants_aligned_and_in_place():
    spec = sample_spec()
    blob = serialize(spec)
    pos = section_start(blob, Section.CONSTANTS)
    (count,) = struct.unpack_from("<I", blob, pos)
    pos += 4
    assert count == 3
    for c in spec.constants:
        code, bits, lanes, ndim = struct.unpack_from("<BBHI", blob, pos)
        shape = struct.unpack_from(f"<{ndim}q", blob, pos + 8)
        off, nbytes = struct.unpack_from("<QQ", blob, pos + 8 + 8 * ndim)
        pos += 8 + 8 * ndim + 16
        assert (code, bits, lanes) == dtype_to_dl(str(c.dtype)) and shape == c.shape
        assert off % ALIGN == 0 and nbytes == c.nbytes
        assert blob[off:off + nbytes] == c.tobytes()


def test_bytecode_encoding():
    spec = spec_with(fn([I(Op.ALLOC_OUTPUT, [1, 2, 32, 1, 1, 4]), I(Op.CALL_KERNEL, [0, 2, 0, 1]),
                         I(Op.RET, [1])]))
    blob = serialize(spec)
    f = first_function(blob)
    code_offset, code_size = struct.unpack_from("<QQ", blob, f["code_offset"])
    words = [struct.unpack_from("<II", blob, code_offset)]
    assert words[0] == (Op.ALLOC_OUTPUT, 6)
    assert struct.unpack_from("<6q", blob, code_offset + 8) == (1, 2, 32, 1, 1, 4)
    assert code_size == (8 + 48) + (8 + 32) + (8 + 8)


def test_dtypes():
    assert dtype_to_dl("bool") == (6, 8, 1)
    assert dtype_to_dl("float32x8") == (2, 32, 8)
    assert dtype_to_dl("uint8") == (1, 8, 1) and dtype_to_dl("int64") == (0, 64, 1)
    for d in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64", "float32x4"):
        assert dtype_from_dl(*dtype_to_dl(d)) == d
    with pytest.raises(FormatError, match="unsupported dtype"):
        dtype_from_dl(2, 8, 1)


def test_empty_tables_and_optional_section_skipped():
    spec = spec_with(fn([I(Op.RET, [0])], arena_size=0, num_registers=1), kernels=(), externs=())
    blob = serialize(spec)
    assert deserialize(blob) == spec
    # Append an unknown optional section (kind >= 0x100): readers skip it.
    secs = sections(blob)
    table = struct.unpack_from("<Q", blob, 32)[0]
    extra = bytearray(blob) + b"\xab" * 16
    # Move the section table to the end with one more entry.
    entries = [blob[table + 24 * i: table + 24 * (i + 1)] for i in range(len(secs))]
    entries.append(struct.pack("<IIQQ", 0x123, 0, len(blob), 16))
    new_table = len(extra)
    extra += b"".join(entries)
    struct.pack_into("<QIQ", extra, 16, len(extra), len(entries), 0)  # blob_size, num_sections
    struct.pack_into("<I", extra, 28, 0)  # target: string 0 ("llvm")
    struct.pack_into("<Q", extra, 32, new_table)
    assert deserialize(bytes(extra)) == spec


# ---- spec checks (serialize refuses what the loader would) ---------------------------------
GOOD_RET = [I(Op.RET, [0])]


@pytest.mark.parametrize("function, constants, message", [
    (fn([I(Op.RET, [0])], name="f"), [], None),
    (fn([]), [], "does not end with RET"),
    (fn([I(Op.MOVE, [1, 0])]), [], "does not end with RET"),
    (fn([I(99, [])] + GOOD_RET), [], "unknown opcode 99"),
    (fn([I(Op.RET, [0, 1])]), [], "RET takes 1 operands, got 2"),
    (fn([I(Op.CALL_KERNEL, [0])] + GOOD_RET), [], "at least 2 operands"),
    (fn([I(Op.CALL_KERNEL, [0, 2, 0])] + GOOD_RET), [], "count 2 takes 4 operands, got 3"),
    (fn([I(Op.MAKE_TUPLE, [1, -1])] + GOOD_RET), [], "count -1"),
    (fn([I(Op.RET, [4])]), [], "src register 4 out of range"),
    (fn([I(Op.MOVE, [-1, 0])] + GOOD_RET), [], "dst register -1 out of range"),
    (fn([I(Op.LOAD_CONST, [1, 0])] + GOOD_RET), [], "constant index 0 out of range"),
    (fn([I(Op.CALL_KERNEL, [1, 1, 0])] + GOOD_RET), [], "kernel index 1 out of range"),
    (fn([I(Op.CALL_EXTERN, [3, 1, 0])] + GOOD_RET), [], "extern index 3 out of range"),
    (fn([I(Op.CALL_EXTERN, [0, 1, 9])] + GOOD_RET), [], "argument register 9"),
    (fn([I(Op.MAKE_TUPLE, [1, 1, 7])] + GOOD_RET), [], "field register 7"),
    (fn([I(Op.GET_ITEM, [1, 0, -2])] + GOOD_RET), [], "negative tuple index"),
    (fn([I(Op.GET_ITEM, [1, 5, 0])] + GOOD_RET), [], "src register 5"),
    (fn([I(Op.ALLOC_OUTPUT, [1, 2, 8, 1, 1, 4])] + GOOD_RET), [], "unsupported dtype"),
    (fn([I(Op.ALLOC_OUTPUT, [1, 2, 32, 1, 1, -1])] + GOOD_RET), [], "symbolic dimension 0 out of range"),
    (fn([I(Op.ALLOC_ARENA, [1, 0, 2, 32, 1, 1, 17])] + GOOD_RET), [], r"arena view \[0, 68\) exceeds arena_size 64"),
    (fn([I(Op.ALLOC_ARENA, [1, -64, 2, 32, 1, 1, 1])] + GOOD_RET), [], "arena offset -64 is not"),
    (fn([I(Op.ALLOC_ARENA, [1, 2, 2, 32, 1, 1, 1])] + GOOD_RET), [], "multiple of the element size 4"),
    (fn([I(Op.ALLOC_OUTPUT, [1, 2, 32, 1, 65] + [1] * 65)] + GOOD_RET), [], "ndim 65 exceeds"),
    (fn(GOOD_RET, name="profile"), [], "'profile' is reserved"),
    (fn(GOOD_RET, num_registers=2 ** 21), [], "exceeds the limit"),
    (fn(GOOD_RET, arena_size=65), [], "not a multiple of 64"),
    (fn(GOOD_RET, num_registers=0), [], "1 parameters but only 0 registers"),
    (fn(GOOD_RET, sym_names=["n"]), [], "'n' appears in no parameter shape"),
    (fn(GOOD_RET, params=[ParamSpec("x", "float32", ["n"]), ParamSpec("y", "float32", ["n"])],
        sym_names=["n", "n"]), [], "duplicate symbolic dimension names"),
    (fn(GOOD_RET, params=[ParamSpec("x", "float32", ["m"])]), [], "'m' is not in sym_names"),
    (fn(GOOD_RET, params=[ParamSpec("x", "float32", [-3])]), [], "negative dimension"),
    (fn(GOOD_RET, params=[ParamSpec("x", "complex64", [3])]), [], "unknown dtype"),
    (fn(GOOD_RET), [np.zeros(2, dtype="complex64")], "constant 0: unsupported dtype"),
    # CALL_PACKED (version 4): dst, extern, nargs, args; string parameters (docs/strings.md)
    (fn([I(Op.CALL_PACKED, [1, 0, 1, 0])] + GOOD_RET), [], None),
    (fn([I(Op.CALL_PACKED, [9, 0, 1, 0])] + GOOD_RET), [], "dst register 9"),
    (fn([I(Op.CALL_PACKED, [1, 3, 1, 0])] + GOOD_RET), [], "extern index 3 out of range"),
    (fn([I(Op.CALL_PACKED, [1, 0, 1, 8])] + GOOD_RET), [], "argument register 8"),
    (fn([I(Op.CALL_PACKED, [1, 0, 2, 0])] + GOOD_RET), [], "operand"),
    (fn(GOOD_RET, params=[ParamSpec("s", "string", [3])]), [], None),
    (fn(GOOD_RET), [np.array(["a"], dtype=object)], "constant 0: unsupported dtype"),
])
def test_spec_checks(function, constants, message):
    spec = spec_with(function, constants=constants)
    if message is None:
        assert deserialize(serialize(spec)) == spec
        return
    with pytest.raises(FormatError, match=message):
        serialize(spec)


def test_duplicate_function_names():
    with pytest.raises(FormatError, match="duplicate function names"):
        serialize(spec_with(fn(GOOD_RET), fn(GOOD_RET)))


def test_symbolic_alloc_not_statically_bounded():
    # With a symbolic dim the arena bound is checked by the VM at run time, not by the loader.
    f = fn([I(Op.ALLOC_ARENA, [1, 0, 2, 32, 1, 1, -1])] + GOOD_RET,
           params=[ParamSpec("x", "float32", ["n"])], sym_names=["n"])
    assert deserialize(serialize(spec_with(f))) == spec_with(f)


# ---- corrupt blobs: every reader check -----------------------------------------------------
def _sec(blob, kind):
    return sections(blob)[kind]


def _corruptions():
    """(name, function blob -> corrupt blob, expected message)."""
    S = Section
    return [
        ("short", lambda b: b[:40], "shorter than the 64-byte header"),
        ("magic", lambda b: b"KILNEXF\0" + b[8:], "bad magic"),
        ("newer", lambda b: patch(b, 8, "I", 5), "format version 5 is newer than this runtime supports \\(4\\)"),
        ("version0", lambda b: patch(b, 8, "I", 0), "format_version 0"),
        ("header_size", lambda b: patch(b, 12, "I", 72), "header_size 72"),
        ("truncated", lambda b: b[:-8], "does not match the"),
        ("blob_size", lambda b: patch(b, 16, "Q", len(b) + 1), "does not match the"),
        ("reserved", lambda b: patch(b, 50, "B", 1), "reserved bytes"),
        ("table_past_end", lambda b: patch(b, 24, "I", 10_000), "section table"),
        ("table_offset", lambda b: patch(b, 32, "Q", 2 ** 63), "section table"),
        ("table_in_header", lambda b: patch(b, 32, "Q", 8), "does not fit between the header"),
        ("section_on_header", lambda b: patch(b, _sec(b, S.KERNELS)[2] + 8, "Q", 16), "overlaps header"),
        ("section_on_table", lambda b: patch(b, _sec(b, S.KERNELS)[2] + 8, "Q", 72), "overlaps section table"),
        ("nul", lambda b: patch(b, _sec(b, S.STRINGS)[0] + 8, "B", 0), "contains NUL"),
        ("const_ndim", lambda b: patch(b, _sec(b, S.CONSTANTS)[0] + 8, "I", 65), "ndim 65 exceeds"),
        ("num_sym_limit", lambda b: patch(b, first_function(b)["num_sym"], "I", 65), "num_sym 65 exceeds"),
        ("flags", lambda b: patch(b, _sec(b, S.KERNELS)[2] + 4, "I", 1), "flags 1 must be 0"),
        ("outside", lambda b: patch(b, _sec(b, S.KERNELS)[2] + 16, "Q", len(b)), "lies outside the blob"),
        ("overlap", lambda b: patch(b, _sec(b, S.KERNELS)[2] + 8, "Q", _sec(b, S.STRINGS)[0]), "overlaps"),
        ("unknown_kind", lambda b: patch(b, _sec(b, S.KERNELS)[2], "I", 7), "unknown required section kind 7"),
        ("duplicate", lambda b: patch(b, _sec(b, S.KERNELS)[2], "I", 1), "STRINGS appears twice"),
        ("missing", lambda b: patch(b, _sec(b, S.KERNELS)[2], "I", 0x100), "missing required section KERNELS"),
        ("strings_count", lambda b: patch(b, _sec(b, S.STRINGS)[0], "I", 10_000), "STRINGS: truncated"),
        ("string_len", lambda b: patch(b, _sec(b, S.STRINGS)[0] + 4, "I", 10_000), "runs past the section end"),
        ("utf8", lambda b: patch(b, _sec(b, S.STRINGS)[0] + 8, "B", 0xff), "not UTF-8"),
        ("target_index", lambda b: patch(b, 28, "I", 999), "header: target .*string index 999 out of range"),
        ("kernel_count", lambda b: patch(b, _sec(b, S.KERNELS)[0], "I", 3), "KERNELS: 3 entries"),
        ("kernel_name", lambda b: patch(b, _sec(b, S.KERNELS)[0] + 4, "I", 999), "KERNELS entry 0: string index 999"),
        ("extern_name", lambda b: patch(b, _sec(b, S.EXTERNS)[0] + 4, "I", 999), "EXTERNS entry 0"),
        ("const_dtype", lambda b: patch(b, _sec(b, S.CONSTANTS)[0] + 4, "B", 9), "constant 0 .*unsupported dtype"),
        ("const_dim", lambda b: patch(b, _sec(b, S.CONSTANTS)[0] + 12, "q", -4), "negative dimension"),
        ("const_nbytes", lambda b: patch(b, _sec(b, S.CONSTANTS)[0] + 12, "q", 5), "nbytes 64 but shape"),
        ("const_align", lambda b: patch(b, _sec(b, S.CONSTANTS)[0] + 28, "Q",
                                        struct.unpack_from("<Q", b, _sec(b, S.CONSTANTS)[0] + 28)[0] + 4),
         "not 64-byte aligned"),
        ("const_outside", lambda b: patch(b, _sec(b, S.CONSTANTS)[0] + 28, "Q", len(b) // 64 * 64),
         "lies outside the blob"),
        ("const_count", lambda b: patch(b, _sec(b, S.CONSTANTS)[0], "I", 1000), "CONSTANTS: constant 3 "),
        ("func_name", lambda b: patch(b, first_function(b)["name"], "I", 999), "function 0 .*name: string index"),
        ("func_count", lambda b: patch(b, _sec(b, S.FUNCTIONS)[0], "I", 50), "FUNCTIONS: truncated"),
        ("num_sym", lambda b: patch(b, first_function(b)["num_sym"], "I", 60), "run past the section end"),
        ("sym_in_param", lambda b: patch(b, first_function(b)["param0"] + 12, "q", -5),
         "parameter 0 'x' .*symbolic dimension 4 out of range"),
        ("param_dtype", lambda b: patch(b, first_function(b)["param0"] + 4, "B", 77), "parameter 0 .*unsupported"),
        ("registers", lambda b: patch(b, first_function(b)["num_registers"], "I", 1), "registers"),
        ("arena", lambda b: patch(b, first_function(b)["arena_size"], "Q", 32), "arena_size 32"),
        ("code_outside", lambda b: patch(b, first_function(b)["code_offset"], "Q", 0), "lies outside BYTECODE"),
        ("code_size", lambda b: patch(b, first_function(b)["code_size"], "Q", 2 ** 62), "lies outside BYTECODE"),
        ("code_cut", lambda b: patch(b, first_function(b)["code_size"], "Q",
                                     struct.unpack_from("<Q", b, first_function(b)["code_size"])[0] - 8),
         "BYTECODE of function 'main': .*run past"),
        ("opcode", lambda b: patch(b, struct.unpack_from("<Q", b, first_function(b)["code_offset"])[0], "I", 42),
         r"function 'main': instruction 0 \(byte \d+\): unknown opcode 42"),
        ("operand", lambda b: patch(b, struct.unpack_from("<Q", b, first_function(b)["code_offset"])[0] + 16,
                                    "q", 3), "constant index 3 out of range"),
        ("no_ret", lambda b: patch(b, struct.unpack_from("<Q", b, first_function(b)["code_offset"])[0]
                                   + struct.unpack_from("<Q", b, first_function(b)["code_size"])[0] - 16,
                                   "II", Op.MOVE, 1), "MOVE takes 2 operands|does not end with RET"),
    ]


@pytest.mark.parametrize("name, corrupt, message", _corruptions(), ids=[c[0] for c in _corruptions()])
def test_corrupt_blob(name, corrupt, message):
    blob = serialize(sample_spec())
    deserialize(blob)
    with pytest.raises(FormatError, match=message):
        deserialize(corrupt(blob))


def test_duplicate_function_in_blob():
    spec = sample_spec()
    spec.functions[1].name = "mbin"          # same length as "main": patch the string in place
    blob = serialize(spec)
    idx = blob.index(b"mbin")
    blob = blob[:idx] + b"main" + blob[idx + 4:]
    with pytest.raises(FormatError, match="duplicate function name 'main'"):
        deserialize(blob)


def test_random_corruption_fails_cleanly():
    """Flipped bytes and truncations give a FormatError or a valid spec, never another error."""
    blob = serialize(sample_spec())
    rng = random.Random(0)
    for _ in range(3000):
        b = bytearray(blob)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        if rng.random() < 0.2:
            b = b[:rng.randrange(len(b))]
        try:
            deserialize(bytes(b))
        except FormatError:
            pass
