"""load_executable never trusts the blob: every malformed header, section table, table entry and
instruction is refused with a message naming what and where; truncated and randomly corrupted
blobs fail cleanly or run. (The same fuzzing runs in C under ASan/UBSan: test_vm_c.py.)"""

import struct

import numpy as np
import pytest

import kiln
from kiln.executable.format import (ExecutableSpec, FunctionSpec, Instruction as I, Op, ParamSpec,
                                    serialize)
from kiln.runtime import KilnError, register_func
from kiln.runtime._base import lib

STRINGS, KERNELS, EXTERNS, CONSTANTS, FUNCTIONS, BYTECODE = range(1, 7)


@pytest.fixture(scope="module", autouse=True)
def relu_shift():
    register_func("test.relu_shift", lambda c, out: np.maximum(np.from_dlpack(c) - 3, 0,
                                                                out=np.from_dlpack(out)),
                  override=True)


@pytest.fixture(scope="module")
def blob(fixture_spec):
    return serialize(fixture_spec())


def sections(blob):
    """kind -> (offset, size, offset of its section table entry)."""
    num, table = struct.unpack_from("<I", blob, 24)[0], struct.unpack_from("<Q", blob, 32)[0]
    out = {}
    for i in range(num):
        kind, _, off, size = struct.unpack_from("<IIQQ", blob, table + 24 * i)
        out[kind] = (off, size, table + 24 * i)
    return out


def patch(blob, offset, fmt, *values):
    b = bytearray(blob)
    struct.pack_into("<" + fmt, b, offset, *values)
    return bytes(b)


def instruction(blob, index):
    """Blob offset of instruction `index` of the first function (forward)."""
    pos = sections(blob)[BYTECODE][0]
    for _ in range(index):
        pos += 8 + 8 * struct.unpack_from("<I", blob, pos + 4)[0]
    return pos


def forward_fields(blob):
    """Field offsets of the first FUNCTIONS entry (format version 2; the fixture has no
    symbolic dimensions)."""
    base = sections(blob)[FUNCTIONS][0] + 4
    return {"name": base, "flags": base + 4, "num_params": base + 8, "num_registers": base + 12,
            "num_sym": base + 16, "arena_size": base + 20, "code_offset": base + 28,
            "code_size": base + 36, "param0": base + 44}


def load_error(load_static, blob, misalign=0):
    with pytest.raises(KilnError) as info:
        load_static(blob, misalign)["load_executable"]()
    return info.value


def test_the_fixture_blob_loads_and_runs(load_static, blob):
    exe = load_static(blob)["load_executable"]()
    exe["init"]()
    np.testing.assert_array_equal(exe["quad"](np.ones(4, "float32")).numpy(), 4)


# (mutation of the blob, status, expected message: exact when it starts with "=", else a substring)
def _const0(b):
    return sections(b)[CONSTANTS][0] + 4


CASES = {
    "magic": (lambda b: b"KILNEXF\0" + b[8:], "INVALID_FORMAT",
              "=executable: bad magic at offset 0 (not a Kiln executable)"),
    "tiny": (lambda b: b[:10], "INVALID_FORMAT", "blob too small for a header"),
    "newer": (lambda b: patch(b, 8, "I", 5), "VERSION_MISMATCH",
              "=executable format version 5 is newer than this runtime supports (4): written by "
              f"kiln {kiln.__version__}, this is kiln {kiln.__version__}"),
    "version0": (lambda b: patch(b, 8, "I", 0), "INVALID_FORMAT", "format_version 0 at offset 0x8"),
    "truncated": (lambda b: b[:1000], "INVALID_FORMAT",
                  "=executable: header blob_size 1632 at offset 0x10 does not match the 1000 bytes "
                  "given (truncated?)"),
    "short header": (lambda b: patch(b[:40], 16, "Q", 40), "INVALID_FORMAT", "shorter than its 64-byte header"),
    "header_size": (lambda b: patch(b, 12, "I", 32), "INVALID_FORMAT", "header_size 32 at offset 0xc (expected 64)"),
    "reserved": (lambda b: patch(b, 41, "B", 7), "INVALID_FORMAT", "reserved header byte 41 is 0x7"),
    "table offset": (lambda b: patch(b, 32, "Q", 1560), "INVALID_FORMAT",
                     "section table (7 entries of 24 bytes at offset 0x618) does not fit"),
    "table in header": (lambda b: patch(b, 32, "Q", 8), "INVALID_FORMAT", "section table"),
    "flags": (lambda b: patch(b, 64 + 4, "I", 1), "INVALID_FORMAT",
              "=executable: section table entry 0 (section 1 STRINGS): flags 0x1 must be 0"),
    "section bounds": (lambda b: patch(b, 64 + 16, "Q", 10**6), "INVALID_FORMAT",
                       "=executable: section table entry 0 (section 1 STRINGS): offset 0xe8 + size "
                       "1000000 exceeds blob size 1632"),
    "section size overflow": (lambda b: patch(b, 64 + 8, "QQ", 2**64 - 8, 16), "INVALID_FORMAT",
                              "exceeds blob size"),
    "duplicate": (lambda b: patch(b, 64 + 24, "I", 1), "INVALID_FORMAT",
                  "=executable: section table entry 1: section 1 (STRINGS) appears twice (also entry 0)"),
    "unknown kind": (lambda b: patch(b, 64 + 24, "I", 7), "INVALID_FORMAT", "unknown section kind 7"),
    "missing": (lambda b: patch(b, 64 + 48, "I", 0x100), "INVALID_FORMAT",
                "=executable: missing section 3 (EXTERNS)"),
    "overlap": (lambda b: patch(b, 64 + 24 + 8, "Q", 300), "INVALID_FORMAT",
                "entry 1 (section 2 KERNELS) [0x12c, 0x138) overlaps entry 0 (section 1 STRINGS)"),
    "overlaps header": (lambda b: patch(b, 64 + 8, "Q", 0), "INVALID_FORMAT",
                        "overlaps the header"),
    "string count": (lambda b: patch(b, sections(b)[STRINGS][0], "I", 1000), "INVALID_FORMAT",
                     "=executable: section 1 (STRINGS): count 1000 needs at least 4000 bytes, but the "
                     "section has 140 left"),
    "string length": (lambda b: patch(b, sections(b)[STRINGS][0] + 4, "I", 500), "INVALID_FORMAT",
                      "section 1 (STRINGS) entry 0: string of 500 bytes"),
    "utf8": (lambda b: patch(b, sections(b)[STRINGS][0] + 8, "B", 0xff), "INVALID_FORMAT",
             "section 1 (STRINGS) entry 0: byte 0 of the string (offset 0xf0) is not valid UTF-8"),
    "nul": (lambda b: patch(b, sections(b)[STRINGS][0] + 9, "B", 0), "INVALID_FORMAT", "is NUL"),
    "target": (lambda b: patch(b, 28, "I", 99), "INVALID_FORMAT",
               "header target (offset 0x1c): string index 99 out of range"),
    "kernel index": (lambda b: patch(b, sections(b)[KERNELS][0] + 4, "I", 99), "INVALID_FORMAT",
                     "=executable: section 2 (KERNELS) entry 0: name: string index 99 out of range (10 strings)"),
    "kernel missing": (lambda b: patch(b, sections(b)[KERNELS][0] + 4, "I", 3), "NOT_FOUND",
                       "section 2 (KERNELS) entry 0: kernel 'test.relu_shift' is not in the kernel library"),
    "kernel count": (lambda b: patch(b, sections(b)[KERNELS][0], "I", 2**32 - 1), "INVALID_FORMAT",
                     "count 4294967295 needs at least"),
    "extern index": (lambda b: patch(b, sections(b)[EXTERNS][0] + 4, "I", 10), "INVALID_FORMAT",
                     "section 3 (EXTERNS) entry 0: name: string index 10"),
    "const bounds": (lambda b: patch(b, _const0(b) + 16, "Q", 1664), "INVALID_FORMAT",
                     "=executable: section 4 (CONSTANTS) entry 0: data_offset 0x680 + nbytes 32 exceeds "
                     "blob size 1632"),
    "const align": (lambda b: patch(b, _const0(b) + 16, "Q", 1500), "INVALID_FORMAT",
                    "section 4 (CONSTANTS) entry 0: data_offset 0x5dc is not 64-byte aligned"),
    "const nbytes": (lambda b: patch(b, _const0(b) + 24, "Q", 28), "INVALID_FORMAT",
                     "section 4 (CONSTANTS) entry 0: nbytes 28 does not match shape (8,) of float32"),
    "const dim": (lambda b: patch(b, _const0(b) + 8, "q", -8), "INVALID_FORMAT", "dimension 0 is negative"),
    # the string dtype (opaque handle, 128 bits) is for graph function parameters only
    "const string": (lambda b: patch(patch(b, _const0(b), "B", 3), _const0(b) + 1, "B", 128), "INVALID_FORMAT",
                     "unsupported dtype handle128"),
    "const dtype": (lambda b: patch(b, _const0(b), "B", 9), "INVALID_FORMAT",
                    "section 4 (CONSTANTS) entry 0: unsupported dtype float8_e4m3"),
    "const vector": (lambda b: patch(b, _const0(b) + 2, "H", 4), "INVALID_FORMAT", "unsupported dtype float32x4"),
    "const ndim": (lambda b: patch(b, _const0(b) + 4, "I", 65), "INVALID_FORMAT", "ndim 65 exceeds the limit"),
    "const huge shape": (lambda b: patch(b, _const0(b) + 8, "q", 2**62), "INVALID_FORMAT",
                         "does not match shape (4611686018427387904,)"),
    "function count": (lambda b: patch(b, sections(b)[FUNCTIONS][0], "I", 50), "INVALID_FORMAT",
                       "section 5 (FUNCTIONS): count 50 needs at least 2000 bytes"),
    "registers < params": (lambda b: patch(b, forward_fields(b)["num_registers"], "I", 0), "INVALID_FORMAT",
                           "function 'forward': num_registers 0 must be at least num_params 1"),
    "too many registers": (lambda b: patch(b, forward_fields(b)["num_registers"], "I", 2**21),
                           "INVALID_FORMAT", "and at most 1048576"),
    "num_sym": (lambda b: patch(b, forward_fields(b)["num_sym"], "I", 65), "INVALID_FORMAT",
                "num_sym 65 exceeds the limit of 64"),
    "arena alignment": (lambda b: patch(b, forward_fields(b)["arena_size"], "Q", 65), "INVALID_FORMAT",
                        "arena_size 65 is not a multiple of 64"),
    "code outside": (lambda b: patch(b, forward_fields(b)["code_offset"], "Q", 8), "INVALID_FORMAT",
                     "function 'forward': code_offset 0x8 + code_size"),
    "code size": (lambda b: patch(b, forward_fields(b)["code_size"], "Q", 10**9), "INVALID_FORMAT",
                  "lies outside section 6 (BYTECODE)"),
    "param dtype": (lambda b: patch(b, forward_fields(b)["param0"] + 5, "B", 12), "INVALID_FORMAT",
                    "section 5 (FUNCTIONS) entry 0: unsupported dtype float12"),
    "param sym": (lambda b: patch(b, forward_fields(b)["param0"] + 12, "q", -1), "INVALID_FORMAT",
                  "parameter 0 'x' dimension 0 refers to symbolic dimension 0, but the function has 0"),
    "param count": (lambda b: patch(b, forward_fields(b)["num_params"], "I", 10**6), "INVALID_FORMAT",
                    "must be at least num_params 1000000"),
    "opcode": (lambda b: patch(b, instruction(b, 2), "I", 42), "INVALID_FORMAT",
               "=executable: function 0 'forward': instruction 2 (opcode?) at offset 0x300: unknown opcode 42"),
    "register": (lambda b: patch(b, instruction(b, 2) + 8, "q", 9), "INVALID_FORMAT",
                 "instruction 2 (LOAD_CONST) at offset 0x300: dst register 9 out of range (the function has 9 registers)"),
    "negative register": (lambda b: patch(b, instruction(b, 11) + 8, "q", -1), "INVALID_FORMAT",
                          "instruction 11 (RET) at offset 0x468: src register -1 out of range"),
    "constant index": (lambda b: patch(b, instruction(b, 2) + 16, "q", 1), "INVALID_FORMAT",
                       "constant index 1 out of range (1 constants)"),
    "kernel arity": (lambda b: patch(b, instruction(b, 1) + 16, "q", 1), "INVALID_FORMAT",
                     "instruction 1 (CALL_KERNEL) at offset 0x2d8: count operand 1 does not match its 4 operands"),
    "kernel table": (lambda b: patch(b, instruction(b, 1) + 8, "q", 2), "INVALID_FORMAT",
                     "kernel index 2 out of range (2 kernels)"),
    "extern table": (lambda b: patch(b, instruction(b, 6) + 8, "q", 1), "INVALID_FORMAT",
                     "extern index 1 out of range (1 externs)"),
    "operand count": (lambda b: patch(b, instruction(b, 2) + 4, "I", 3), "INVALID_FORMAT",
                      "instruction 2 (LOAD_CONST) at offset 0x300: takes 2 operands, got 3"),
    "operands past end": (lambda b: patch(b, instruction(b, 11) + 4, "I", 2**31), "INVALID_FORMAT",
                          "2147483648 operands run past the end of the function's code"),
    "no RET": (lambda b: patch(b, instruction(b, 11), "I", Op.MOVE), "INVALID_FORMAT",
               "function 0 'forward': code at offset 0x298 (480 bytes) does not end with RET"),
    "alloc ndim": (lambda b: patch(b, instruction(b, 0) + 8 + 5 * 8, "q", 70), "INVALID_FORMAT",
                   "count operand 70 does not match its 7 operands"),
    "alloc dtype": (lambda b: patch(b, instruction(b, 0) + 8 + 2 * 8, "q", 300), "INVALID_FORMAT",
                    "unsupported dtype (code 300, bits 32, lanes 1)"),
    "alloc sym": (lambda b: patch(b, instruction(b, 0) + 8 + 6 * 8, "q", -1), "INVALID_FORMAT",
                  "dimension 0 refers to symbolic dimension 0, but the function has 0"),
    "arena bounds": (lambda b: patch(b, instruction(b, 0) + 8 + 8, "q", 64), "INVALID_FORMAT",
                     "instruction 0 (ALLOC_ARENA) at offset 0x298: arena view at offset 64 of 32 bytes "
                     "exceeds arena_size 64"),
    "arena misaligned": (lambda b: patch(b, instruction(b, 0) + 8 + 8, "q", 2), "INVALID_FORMAT",
                         "arena offset 2 is not a non-negative multiple of the element size 4"),
    "output overflow": (lambda b: patch(b, instruction(b, 3) + 8 + 5 * 8, "q", 2**62), "INVALID_FORMAT",
                        "instruction 3 (ALLOC_OUTPUT) at offset 0x318: the tensor's size overflows"),
    "tuple index": (lambda b: patch(b, instruction(b, 8) + 24, "q", -1), "INVALID_FORMAT",
                    "tuple index -1 out of range"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_blob(load_static, blob, case):
    mutate, status, message = CASES[case]
    e = load_error(load_static, mutate(blob))
    if message.startswith("="):
        assert str(e) == message[1:]
    else:
        assert message in str(e)
    assert e.status == getattr(lib, "KILN_ERR_" + status), str(e)


def test_unaligned_blob(load_static, blob):
    e = load_error(load_static, blob, misalign=8)
    assert "is not 64-byte aligned" in str(e) and e.status == lib.KILN_ERR_INVALID_ARGUMENT


def _spec(functions, kernels=("main", "scale"), consts=()):
    return ExecutableSpec("llvm", list(kernels), [], list(consts), functions)


def test_an_empty_tensor_whose_other_extents_overflow_is_refused(load_static):
    """(0, 2^40, 2^40) holds no element, but its strides are products of the other extents
    (2^80 elements): the loader refuses it as it refuses any shape whose size overflows, so no
    stride is computed past int64 (a fuzzed blob found this under UBSan)."""
    ret = [I(Op.RET, [1])]
    x8 = [ParamSpec("x", "float32", [8])]
    empty = serialize(_spec([FunctionSpec("f", x8, [], 2, 64, [
        I(Op.ALLOC_ARENA, [1, 0, 2, 32, 1, 3, 0, 2**40, 2**40])] + ret)]))
    e = load_error(load_static, empty)
    assert "instruction 0 (ALLOC_ARENA)" in str(e) and "the tensor's size overflows" in str(e)
    fine = serialize(_spec([FunctionSpec("f", x8, [], 2, 64, [
        I(Op.ALLOC_ARENA, [1, 0, 2, 32, 1, 3, 0, 2**20, 2**20])] + ret)]))
    load_static(fine)


def test_spec_level_rules(load_static):
    """Rules the serializer does not check (or cannot express) are checked by the loader."""
    ret0 = [I(Op.RET, [0])]
    x8 = [ParamSpec("x", "float32", [8])]
    named = serialize(_spec([FunctionSpec("inix", x8, [], 1, 0, ret0)]))
    e = load_error(load_static, named.replace(b"\x04\x00\x00\x00inix", b"\x04\x00\x00\x00init"))
    assert str(e) == "executable: section 5 (FUNCTIONS) entry 0: function name 'init' is reserved by the VM"
    e = load_error(load_static, serialize(_spec([FunctionSpec("f", x8, [], 2, 0, [
        I(Op.CALL_KERNEL, [0, 1, 0]), I(Op.RET, [0])])])))
    assert "instruction 0 (CALL_KERNEL) at offset 0x" in str(e)
    assert str(e).endswith("kernel 'main' takes 2 arguments, the instruction passes 1")
    aligned = serialize(_spec([FunctionSpec("f", x8, [], 2, 64, [
        I(Op.ALLOC_ARENA, [1, 8, 2, 64, 1, 0]), I(Op.RET, [1])])]))
    e = load_error(load_static, patch(aligned, sections(aligned)[BYTECODE][0] + 16, "q", 4))
    assert "arena offset 4 is not a non-negative multiple of the element size 8" in str(e)
    # the kernel table is resolved against the library
    e = load_error(load_static, serialize(_spec([FunctionSpec("f", x8, [], 1, 0, ret0)],
                                                kernels=("main", "nope"))))
    assert str(e) == ("executable: section 2 (KERNELS) entry 1: kernel 'nope' is not in the kernel "
                      "library '<linked>'")
    assert e.status == lib.KILN_ERR_NOT_FOUND


def test_duplicate_function_and_unbound_symbol(load_static):
    ret0 = [I(Op.RET, [0])]
    blob = serialize(_spec([FunctionSpec("f", [ParamSpec("x", "float32", [8])], [], 1, 0, ret0),
                            FunctionSpec("g", [ParamSpec("x", "float32", [8])], [], 1, 0, ret0)]))
    f_name = struct.unpack_from("<I", blob, sections(blob)[FUNCTIONS][0] + 4)[0]
    second = sections(blob)[FUNCTIONS][0] + 4 + 44 + 20  # after f's entry (one 1-d param)
    e = load_error(load_static, patch(blob, second, "I", f_name))
    assert "entry 1: function name 'f' is used twice (also entry 0)" in str(e)
    sym = serialize(_spec([FunctionSpec("f", [ParamSpec("x", "float32", ["n"])], ["n"], 1, 0, ret0)]))
    param_dim = sections(sym)[FUNCTIONS][0] + 4 + 48 + 12
    e = load_error(load_static, patch(sym, param_dim, "q", 8))
    assert ("function 'f': symbolic dimension 0 'n' appears in no parameter's shape, so no argument "
            "binds it") in str(e)


def test_optional_sections_are_skipped(load_static, blob):
    """An unknown optional section (kind >= 0x100) is ignored: append one, with a new table."""
    num, table = struct.unpack_from("<I", blob, 24)[0], struct.unpack_from("<Q", blob, 32)[0]
    entries = blob[table:table + 24 * num]
    extra_at = len(blob)
    new_table_at = extra_at + 16
    entries += struct.pack("<IIQQ", 0x1234, 0, extra_at, 16)
    grown = bytearray(blob + b"optional-data!!!" + entries)
    struct.pack_into("<QIIQ", grown, 16, len(grown), num + 1, struct.unpack_from("<I", blob, 28)[0],
                     new_table_at)
    exe = load_static(bytes(grown))["load_executable"]()
    exe["init"]()
    np.testing.assert_array_equal(exe["quad"](np.ones(2, "float32")).numpy(), 4)


def _outcome(load_static, data):
    """Loads and runs `data`; returns "ok" or the error. Must never crash."""
    try:
        exe = load_static(data)["load_executable"]()
        exe["init"]()
        for name, arg in (("forward", np.ones(8, "float32")), ("quad", np.ones(5, "float32")),
                          ("escape", np.ones(8, "float32")), ("ident", np.ones(8, "float32"))):
            try:
                exe[name](arg)
            except KilnError:
                pass
        return "ok"
    except KilnError as e:
        return e


def test_truncated_everywhere(load_static, blob):
    for n in range(0, len(blob), 7):
        e = _outcome(load_static, blob[:n])
        assert isinstance(e, KilnError) and "truncated" in str(e) or n < 64, (n, e)
        # the same cut with a consistent blob_size: the section checks must catch it
        if n >= 64:
            assert isinstance(_outcome(load_static, patch(blob[:n], 16, "Q", n)), KilnError), n


def test_random_corruption_fails_cleanly_or_runs(load_static, blob):
    rng = np.random.default_rng(1234)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(400):
        data = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(data)))
            data[at] = int(rng.integers(0, 256)) if rng.random() < 0.5 else data[at] ^ (1 << int(rng.integers(0, 8)))
        result = _outcome(load_static, bytes(data))
        outcomes["ok" if result == "ok" else "error"] += 1
        if result != "ok":
            assert str(result) and result.status != lib.KILN_ERR_INTERNAL, str(result)
    # Most corruptions are caught; the rest (in constant data, names, unused fields) ran.
    assert outcomes["error"] > 100 and outcomes["ok"] > 0


# ---- IF (format version 2): callees, arity, recursion, depth, private functions --------------
def _if_spec(n_funcs=2, private=True):
    """main(x) = IF(x, f1, f1, x); f1 .. f_{n-1} chain to the next through IF; the last returns x."""
    def fn(k):
        name = "main" if k == 0 else f"f{k}"
        code = ([I(Op.IF, [1, 0, k + 1, k + 1, 1, 0]), I(Op.RET, [1])] if k + 1 < n_funcs
                else [I(Op.RET, [0])])
        return FunctionSpec(name, [ParamSpec("x", "int32", [1])], [], 2, 0, code, private=private and k > 0)
    return _spec([fn(k) for k in range(n_funcs)])


def _if_operand(blob, operand):
    """Blob offset of operand `operand` of the IF (main's instruction 0)."""
    return sections(blob)[BYTECODE][0] + 8 + 8 * operand


def test_if_calls_a_private_function(load_static):
    exe = load_static(serialize(_if_spec(3)))["load_executable"]()
    exe["init"]()
    x = kiln.nd.array(np.array([5], "int32"))
    assert exe["main"](x).numpy().tolist() == [5]
    with pytest.raises(KilnError):
        exe["f1"]   # private: reachable only through IF


@pytest.mark.parametrize("operand,value,message", [
    (2, 7, "instruction 0 (IF): function index 7 out of range (2 functions)"),
    (2, 0, "function 'main' reaches itself through IF"),
    (4, 0, "count operand 0 does not match its 6 operands"),
    (1, 5, "cond register 5 out of range"),
])
def test_if_refuses_bad_operands(load_static, operand, value, message):
    good = serialize(_if_spec(2, private=False))
    blob = patch(good, _if_operand(good, operand), "q", value)
    assert message in str(load_error(load_static, blob))


def test_if_nesting_is_bounded(load_static, monkeypatch):
    load_static(serialize(_if_spec(64)))["load_executable"]()
    with pytest.raises(Exception, match="nest deeper than 64"):
        serialize(_if_spec(65))   # the writer refuses what the loader would
    import kiln.executable.format as fmt
    monkeypatch.setattr(fmt, "validate", lambda spec: None)
    e = load_error(load_static, serialize(_if_spec(65)))
    assert "IF calls nest deeper than 64 functions" in str(e)


def test_if_needs_version_2_and_known_flags(load_static):
    blob = serialize(_if_spec(2))
    e = load_error(load_static, patch(blob, 8, "I", 1))
    assert "function" in str(e)  # a v1 entry layout no longer parses, or IF is refused
    flags_at = sections(blob)[FUNCTIONS][0] + 4 + 4
    e = load_error(load_static, patch(blob, flags_at, "I", 6))
    assert "function 'main': unknown flags 0x6" in str(e)


def test_if_condition_must_be_one_integer(load_static):
    spec = _if_spec(2)
    spec.functions[0].params[0].shape = [2]
    spec.functions[1].params[0].shape = [2]
    exe = load_static(serialize(spec))["load_executable"]()
    exe["init"]()
    with pytest.raises(KilnError, match=r"main: instruction 0 \(IF\): the condition must be a one-element"):
        exe["main"](kiln.nd.array(np.array([1, 0], "int32")))
