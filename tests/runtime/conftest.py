"""Shared setup for the runtime tests: an up-to-date kiln._ffi extension, and the fixture kernel
library (fixture_kernels.c) compiled in its variants."""

import pathlib
import subprocess
import sys
import sysconfig

import pytest

from build_lock import repo_build_lock

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
HERE = pathlib.Path(__file__).resolve().parent

VARIANTS = {
    "fixture": [],
    "bad_abi": ["-DFIXTURE_ABI_VERSION=99"],
    "bad_dtype": ["-DFIXTURE_BAD_DTYPE"],
    "single": ["-DFIXTURE_SINGLE"],
    "no_main": ["-DFIXTURE_NO_MAIN"],
    "no_info": ["-DFIXTURE_NO_INFO"],
    "derived": ["-DFIXTURE_DERIVED"],
    "bad_derived": ["-DFIXTURE_BAD_DERIVED"],
}


def _ensure_extension():
    """Rebuilds kiln._ffi when it is older than the runtime sources, so these tests always run
    the C code in the tree. Under the build lock, so parallel workers build it once."""
    target = ROOT / "compiler" / "kiln" / ("_ffi" + sysconfig.get_config_var("EXT_SUFFIX"))
    sources = [*RUNTIME.glob("src/*.[ch]"), *RUNTIME.glob("include/*.h"), RUNTIME / "build_ffi.py"]

    def stale():
        return not target.exists() or target.stat().st_mtime < max(p.stat().st_mtime for p in sources)
    if stale():
        with repo_build_lock():
            if stale():  # not rebuilt by another worker while this one waited
                subprocess.run([sys.executable, str(RUNTIME / "build_ffi.py")], check=True,
                               stdout=subprocess.DEVNULL, timeout=300)


_ensure_extension()


@pytest.fixture(scope="session")
def kernel_libs(tmp_path_factory):
    """name -> path of each fixture library variant."""
    out = tmp_path_factory.mktemp("kernels")
    paths = {name: out / f"{name}.so" for name in VARIANTS}
    procs = [subprocess.Popen(["gcc", "-shared", "-fPIC", "-O2", f"-I{RUNTIME / 'include'}",
                               *flags, str(HERE / "fixture_kernels.c"), "-o", str(paths[name]),
                               "-lpthread"], stderr=subprocess.PIPE)
             for name, flags in VARIANTS.items()]
    for p in procs:
        _, err = p.communicate()
        assert p.returncode == 0, err.decode()
    return paths


@pytest.fixture(scope="session")
def lib_path(kernel_libs):
    return kernel_libs["fixture"]


# ---- executables over the fixture kernels (test_vm*.py) ------------------------------------------

def _fixture_spec(extern="test.relu_shift"):
    """An executable over the fixture kernels using every opcode:

    forward(x: float32[8]) -> ((2 * (x + 1), relu(c - 3), c), relu(c - 3)) with c = arange(8)
        (x + 1 in the arena, the rest ALLOC_OUTPUT, relu by the external function `extern`)
    quad(x: float32[n]) -> 4 * x        (an arena view of symbolic size: n <= 16 fits the arena)
    escape(x: float32[8]) -> x + 1      (returns a view of its arena)
    ident(x: float32[8]) -> x           (returns its argument)
    """
    import numpy as np
    from kiln.executable.format import ExecutableSpec, FunctionSpec, Instruction as I, Op, ParamSpec

    f32 = [2, 32, 1]
    forward = FunctionSpec("forward", [ParamSpec("x", "float32", [8])], [], 9, 64, [
        I(Op.ALLOC_ARENA, [1, 0, *f32, 1, 8]),
        I(Op.CALL_KERNEL, [0, 2, 0, 1]),
        I(Op.LOAD_CONST, [2, 0]),
        I(Op.ALLOC_OUTPUT, [3, *f32, 1, 8]),
        I(Op.CALL_KERNEL, [1, 2, 1, 3]),
        I(Op.ALLOC_OUTPUT, [4, *f32, 1, 8]),
        I(Op.CALL_EXTERN, [0, 2, 2, 4]),
        I(Op.MAKE_TUPLE, [5, 3, 3, 4, 2]),
        I(Op.GET_ITEM, [6, 5, 1]),
        I(Op.MOVE, [8, 6]),
        I(Op.MAKE_TUPLE, [7, 2, 5, 8]),
        I(Op.RET, [7])])
    quad = FunctionSpec("quad", [ParamSpec("x", "float32", ["n"])], ["n"], 3, 64, [
        I(Op.ALLOC_ARENA, [1, 0, *f32, 1, -1]),
        I(Op.CALL_KERNEL, [1, 2, 0, 1]),
        I(Op.ALLOC_OUTPUT, [2, *f32, 1, -1]),
        I(Op.CALL_KERNEL, [1, 2, 1, 2]),
        I(Op.RET, [2])])
    escape = FunctionSpec("escape", [ParamSpec("x", "float32", [8])], [], 2, 64, [
        I(Op.ALLOC_ARENA, [1, 0, *f32, 1, 8]),
        I(Op.CALL_KERNEL, [0, 2, 0, 1]),
        I(Op.RET, [1])])
    ident = FunctionSpec("ident", [ParamSpec("x", "float32", [8])], [], 1, 0, [I(Op.RET, [0])])
    return ExecutableSpec("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=generic", ["main", "scale"],
                          [extern], [np.arange(8, dtype="float32")], [forward, quad, escape, ident])


@pytest.fixture(scope="session")
def fixture_spec():
    """The function making that spec: fixture_spec(extern="test.relu_shift")."""
    return _fixture_spec


def _if_spec():
    """Control flow over the fixture kernels: pick(c: int32[1], x: float32[8]) = IF(c, twice_plus1,
    same, x) with private branches twice_plus1(x) = 2 * (x + 1) (kernels "main" then "scale",
    the intermediate released by FREE) and same(x) = x."""
    from kiln.executable.format import ExecutableSpec, FunctionSpec, Instruction as I, Op, ParamSpec

    x8 = ParamSpec("x", "float32", [8])
    pick = FunctionSpec("pick", [ParamSpec("c", "int32", [1]), x8], [], 3, 0, [
        I(Op.IF, [2, 0, 1, 2, 1, 1]), I(Op.RET, [2])])
    plus1 = FunctionSpec("twice_plus1", [x8], [], 3, 0, [
        I(Op.ALLOC_OUTPUT, [1, 2, 32, 1, 1, 8]), I(Op.CALL_KERNEL, [0, 2, 0, 1]),
        I(Op.ALLOC_OUTPUT, [2, 2, 32, 1, 1, 8]), I(Op.CALL_KERNEL, [1, 2, 1, 2]),
        I(Op.FREE, [1]), I(Op.RET, [2])], private=True)
    same = FunctionSpec("same", [x8], [], 1, 0, [I(Op.RET, [0])], private=True)
    return ExecutableSpec("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=generic", ["main", "scale"], [], [],
                          [pick, plus1, same])


@pytest.fixture(scope="session")
def if_spec():
    return _if_spec


@pytest.fixture(scope="session")
def build_model(tmp_path_factory):
    """blob -> path of a shared library holding the fixture kernels and that executable blob,
    linked the way kiln.compile links a model (the blob as a second object)."""
    import hashlib

    from kiln.executable.executable import blob_object

    out = tmp_path_factory.mktemp("models")
    cache = {}

    def build(blob):
        key = hashlib.sha256(blob).hexdigest()[:16]
        if key not in cache:
            obj, path = out / f"{key}.o", out / f"{key}.so"
            obj.write_bytes(blob_object(blob, "llvm"))
            subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{RUNTIME / 'include'}",
                            str(HERE / "fixture_kernels.c"), str(obj), "-o", str(path), "-lpthread"],
                           check=True)
            cache[key] = path
        return cache[key]

    return build


_STATIC_KEEP = []  # blob copies and the fixture library handle, alive for the whole session


@pytest.fixture(scope="session")
def load_static(lib_path):
    """blob -> a library Module over the fixture kernels and `blob` made with
    kiln_module_from_static (no linking: fast for the many corrupted blobs). `misalign` shifts
    the blob off its 64-byte alignment."""
    import ctypes

    from kiln.runtime import Module
    from kiln.runtime._base import check, ffi, lib

    fixture = ctypes.CDLL(str(lib_path))
    info = ffi.cast("const kiln_library_info_t*",
                    ctypes.addressof(ctypes.c_char.in_dll(fixture, "kiln_library_info")))
    _STATIC_KEEP.append(fixture)

    def load(blob, misalign=0):
        buf = ffi.new("void**")
        check(lib.kiln_memory_alloc(len(blob) + misalign, buf))
        _STATIC_KEEP.append(buf[0])  # never freed: tensors may view it until the session ends
        data = ffi.cast("uint8_t*", buf[0]) + misalign
        ffi.memmove(data, blob, len(blob))
        out = ffi.new("kiln_module_t**")
        check(lib.kiln_module_from_static(info, data, len(blob), out))
        return Module(out[0])

    return load
