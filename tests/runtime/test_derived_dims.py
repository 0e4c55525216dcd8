"""Derived dimensions (kiln_kernel_abi.h kiln_derived_dim_t, executable format version 3): shapes
that are expressions of symbolic dims (m + n), in a kernel signature and in a VM function table.
The runtime evaluates them from the arguments and checks every tensor before any kernel runs;
the loaders refuse malformed entries with a message, and corrupted blobs fail cleanly or run."""

import ctypes
import struct

import numpy as np
import pytest

from kiln.executable.format import (ExecutableSpec, FormatError, FunctionSpec, Instruction as I, Op,
                                    ParamSpec, deserialize, serialize)
from kiln.ir.derived_dims import ADD, B_CONST, MUL, DerivedDim
from kiln.runtime import KilnError, Module, load_module
from kiln.runtime._base import check, ffi, lib

F32 = [2, 32, 1]
_KEEP = []


def _error(fn, *args):
    with pytest.raises(KilnError) as info:
        fn(*args)
    return str(info.value)


# ---- the kernel ABI -----------------------------------------------------------------------------
def test_kernel_with_a_derived_dimension(kernel_libs):
    mod = load_module(kernel_libs["derived"])
    a, b = np.arange(3, dtype="float32"), np.arange(10, 12, dtype="float32")
    c = np.zeros(5, "float32")
    mod["concat"](a, b, c)
    np.testing.assert_array_equal(c, np.concatenate([a, b]))
    msg = _error(mod["concat"], a, b, np.zeros(6, "float32"))
    assert "concat: argument 2 'C' dimension 0 expected m + n = 5, got 6" in msg, msg
    assert "expected shape (m + n,)" in msg, msg


def test_kernel_library_with_a_bad_derived_dimension_is_refused(kernel_libs):
    msg = _error(load_module, kernel_libs["bad_derived"])
    assert "kernel 5 'concat': derived dimension 0 refers to symbolic dimension 2" in msg, msg


# ---- the executable format ----------------------------------------------------------------------
M_PLUS_N = DerivedDim(ADD, 0, 0, 1)


def derived_spec(bounds=(), arena=False):
    """cat(a: f32[m], b: f32[n]) -> concat(a, b), f32[m + n]: ALLOC_OUTPUT (or an arena view of
    64 bytes with ``arena``) then the fixture's concat kernel, ``bounds`` on m and n; and
    check(a: f32[m], b: f32[n], c: f32[m + n], d: f32[2 * m]) -> concat(a, b)."""
    alloc = (I(Op.ALLOC_ARENA, [2, 0, *F32, 1, -3]) if arena else I(Op.ALLOC_OUTPUT, [2, *F32, 1, -3]))
    cat = FunctionSpec("cat", [ParamSpec("a", "float32", ["m"]), ParamSpec("b", "float32", ["n"])],
                       ["m", "n"], 3, 64 if arena else 0,
                       [alloc, I(Op.CALL_KERNEL, [0, 3, 0, 1, 2]), I(Op.RET, [2])],
                       derived=[M_PLUS_N], bounds=list(bounds) + [-1] if bounds else [])
    check_fn = FunctionSpec(
        "check", [ParamSpec("a", "float32", ["m"]), ParamSpec("b", "float32", ["n"]),
                  ParamSpec("c", "float32", ["m + n"]), ParamSpec("d", "float32", ["m * 2"])],
        ["m", "n"], 5, 0,
        [I(Op.ALLOC_OUTPUT, [4, *F32, 1, -3]), I(Op.CALL_KERNEL, [0, 3, 0, 1, 4]), I(Op.RET, [4])],
        derived=[M_PLUS_N, DerivedDim(MUL, B_CONST, 0, 2)])
    return ExecutableSpec("llvm", ["concat"], [], [], [cat, check_fn])


@pytest.fixture(scope="module")
def load_derived(kernel_libs):
    """blob -> its VM module over the 'derived' fixture kernels (kiln_module_from_static)."""
    fixture = ctypes.CDLL(str(kernel_libs["derived"]))
    _KEEP.append(fixture)
    info = ffi.cast("const kiln_library_info_t*",
                    ctypes.addressof(ctypes.c_char.in_dll(fixture, "kiln_library_info")))

    def load(blob):
        buf = ffi.new("void**")
        check(lib.kiln_memory_alloc(len(blob), buf))
        _KEEP.append(buf[0])  # never freed: tensors may view it until the session ends
        ffi.memmove(ffi.cast("uint8_t*", buf[0]), blob, len(blob))
        out = ffi.new("kiln_module_t**")
        check(lib.kiln_module_from_static(info, ffi.cast("uint8_t*", buf[0]), len(blob), out))
        vm = Module(out[0])["load_executable"]()
        vm["init"]()
        return vm
    return load


def test_round_trip_and_version():
    spec = derived_spec(bounds=[16, -1])
    spec.functions[0].bounds[2] = 20  # m + n
    blob = serialize(spec)
    assert struct.unpack_from("<I", blob, 8)[0] == 3
    assert deserialize(blob) == spec
    assert deserialize(blob).functions[1].dim_names() == ["m", "n", "m + n", "m * 2"]
    plain = ExecutableSpec("llvm", ["concat"], [], [], [FunctionSpec(
        "f", [ParamSpec("a", "float32", ["m"])], ["m"], 1, 0, [I(Op.RET, [0])])])
    assert struct.unpack_from("<I", serialize(plain), 8)[0] == 2  # nothing new: old runtimes read it


def test_writer_refuses_bad_tables():
    spec = derived_spec()
    spec.functions[0].derived = [DerivedDim(ADD, 0, 0, 2)]  # refers to itself
    with pytest.raises(FormatError, match="derived dimension 0 refers to dimension 2"):
        serialize(spec)
    spec = derived_spec()
    spec.functions[1].params[2].shape = ["m - n"]
    with pytest.raises(FormatError, match="'m - n'"):
        serialize(spec)


def test_vm_computes_and_checks_derived_dims(load_derived):
    vm = load_derived(serialize(derived_spec()))
    a, b = np.arange(4, dtype="float32"), np.arange(7, dtype="float32")
    np.testing.assert_array_equal(vm["cat"](a, b).numpy(), np.concatenate([a, b]))
    np.testing.assert_array_equal(vm["cat"](a[:0], b).numpy(), b)
    c, d = np.zeros(11, "float32"), np.zeros(8, "float32")
    np.testing.assert_array_equal(vm["check"](a, b, c, d).numpy(), np.concatenate([a, b]))
    msg = _error(vm["check"], a, b, np.zeros(10, "float32"), d)
    assert "check: argument 2 'c' dimension 0 expected m + n = 11, got 10" in msg, msg
    msg = _error(vm["check"], a, b, c, np.zeros(9, "float32"))
    assert "argument 3 'd' dimension 0 expected m * 2 = 8, got 9" in msg, msg


def test_bounds_and_arena_views(load_derived):
    spec = derived_spec(bounds=[8, 8], arena=True)
    spec.functions[0].bounds[2] = 12  # a bound on the derived m + n
    vm = load_derived(serialize(spec))
    a, b = np.ones(6, "float32"), np.full(6, 2, "float32")
    np.testing.assert_array_equal(vm["cat"](a, b).numpy(), np.concatenate([a, b]))
    msg = _error(vm["cat"], np.ones(9, "float32"), b[:1])
    assert "symbolic dimension 'm' = 9 exceeds its bound 8" in msg, msg
    msg = _error(vm["cat"], np.ones(7, "float32"), b)
    assert "symbolic dimension 'm + n' = 13 exceeds its bound 12" in msg, msg
    vm = load_derived(serialize(derived_spec(bounds=[8, 8], arena=True)))
    # m + n = 16 floats fill the 64-byte arena exactly
    np.testing.assert_array_equal(vm["cat"](np.ones(8, "float32"), np.ones(8, "float32")).numpy(), np.ones(16))
    vm = load_derived(serialize(derived_spec(arena=True)))  # no bound: the view's check catches it
    msg = _error(vm["cat"], np.ones(9, "float32"), np.ones(11, "float32"))
    assert "does not fit in the arena of 64 bytes" in msg, msg


def _functions_derived_offset(blob):
    """Blob offset of the first function's first derived entry (after name, flags, num_params,
    num_registers, num_sym, 2 sym names and num_derived)."""
    num, table = struct.unpack_from("<I", blob, 24)[0], struct.unpack_from("<Q", blob, 32)[0]
    for i in range(num):
        kind, _, off, _ = struct.unpack_from("<IIQQ", blob, table + 24 * i)
        if kind == 5:
            return off + 4 + 20 + 8 + 4
    raise AssertionError("no FUNCTIONS section")


@pytest.mark.parametrize("field,value,message", [
    (0, 99, "derived dimension 0 has unknown op 99"),
    (4, 4, "derived dimension 0 has unknown op 1 or flags 0x4"),
    (16, 2, "derived dimension 0 refers to symbolic dimension 2"),
    (16, -5, "derived dimension 0 refers to symbolic dimension -5"),
])
def test_loader_refuses_a_corrupted_derived_entry(load_derived, field, value, message):
    blob = serialize(derived_spec())
    at = _functions_derived_offset(blob) + field
    data = bytearray(blob)
    struct.pack_into("<I" if field < 8 else "<q", data, at, value)
    msg = _error(load_derived, bytes(data))
    assert "function 'cat'" in msg and message in msg, msg
    with pytest.raises(FormatError):  # the Python reader applies the same rules
        deserialize(bytes(data))


def test_division_by_zero_and_overflow_are_errors(load_derived):
    spec = derived_spec()
    # cat's output becomes m // n: n = 0 must be an error, not a crash
    spec.functions[0].derived = [DerivedDim(4, 0, 0, 1)]
    vm = load_derived(serialize(spec))
    msg = _error(vm["cat"], np.ones(3, "float32"), np.ones(0, "float32"))
    assert "m // n = 3 // 0, which divides by zero" in msg, msg


def test_corrupted_derived_blobs_fail_cleanly_or_run(load_derived):
    blob = serialize(derived_spec(bounds=[8, -1], arena=True))
    rng = np.random.default_rng(7)
    a, b = np.ones(3, "float32"), np.ones(2, "float32")
    outcomes = {"ok": 0, "error": 0}
    start = _functions_derived_offset(blob) - 40
    for _ in range(300):
        data = bytearray(blob)
        for _ in range(int(rng.integers(1, 3))):
            at = int(rng.integers(start, start + 120))  # the FUNCTIONS entries and around
            data[at] ^= 1 << int(rng.integers(0, 8))
        try:
            vm = load_derived(bytes(data))
            for name, args in (("cat", (a, b)), ("check", (a, b, np.ones(5, "float32"), np.ones(6, "float32")))):
                try:
                    vm[name](*args)
                except KilnError as e:
                    assert str(e)
            outcomes["ok"] += 1
        except KilnError as e:
            assert str(e) and e.status != lib.KILN_ERR_INTERNAL
            outcomes["error"] += 1
    assert outcomes["error"] > 50 and outcomes["ok"] > 0, outcomes


def test_written_parameter_flags(load_derived):
    """Format 3 parameter flags: a WRITTEN parameter round-trips; unknown bits are refused by
    both loaders."""
    spec = derived_spec()
    spec.functions[1].params[2].written = True
    blob = serialize(spec)
    assert deserialize(blob).functions[1].params[2].written
    vm = load_derived(blob)
    a, b = np.arange(2, dtype="float32"), np.arange(3, dtype="float32")
    np.testing.assert_array_equal(vm["check"](a, b, np.zeros(5, "float32"), np.zeros(4, "float32")).numpy(),
                                  np.concatenate([a, b]))
    # the written argument may not share memory with another one
    buf = np.zeros(8, "float32")
    vm["check"](buf[:2], b, buf[3:8], np.zeros(4, "float32"))  # disjoint parts of one buffer: fine
    msg = _error(vm["check"], buf[:2], b, buf[:5], np.zeros(4, "float32"))
    assert "argument 2 'c' is updated in place and shares memory with argument 0 'a'" in msg, msg
    # an unknown flag bit: the flags of check's 4 parameters are the FUNCTIONS section's last bytes
    num, table = struct.unpack_from("<I", blob, 24)[0], struct.unpack_from("<Q", blob, 32)[0]
    off, size = next(struct.unpack_from("<QQ", blob, table + 24 * i + 8) for i in range(num)
                     if struct.unpack_from("<I", blob, table + 24 * i)[0] == 5)
    flags_at = off + size - 16
    assert struct.unpack_from("<IIII", blob, flags_at) == (0, 0, 1, 0)
    bad = bytearray(blob)
    struct.pack_into("<I", bad, flags_at + 8, 5)
    assert "parameter 2 'c' has unknown flags 0x5" in _error(load_derived, bytes(bad))
    with pytest.raises(FormatError, match="unknown flags 0x5"):
        deserialize(bytes(bad))
