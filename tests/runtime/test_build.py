"""The runtime's build products and the seams they promise: exported symbols, size, the DLPack
layout, the generated cffi declarations, the C++ view of the header, the single-threaded
build."""

import pathlib
import re
import subprocess

from kiln.runtime._base import ffi, lib

RUNTIME = pathlib.Path(__file__).resolve().parents[2] / "runtime_c"


def test_shared_library_exports_only_the_api_and_is_small(runtime_make, tmp_path):
    so = tmp_path / "libkiln_runtime.so"
    # One locked make: the size printed is that of the library copied.
    size = int(runtime_make("all", "single", "size", copy={"libkiln_runtime.so": so}).split()[-1])
    assert size < 100 * 1024
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(so)],
                             check=True, capture_output=True, text=True).stdout.split("\n")
    names = {line.split()[-1] for line in symbols if line.strip()}
    assert names == set(_api_functions())


def _api_functions():
    header = (RUNTIME / "include" / "kiln_runtime.h").read_text()
    return re.findall(r"KILN_API\s[^;{]*?\b(kiln_\w+)\s*\(", header)


def test_every_api_function_is_in_the_binding():
    functions = _api_functions()
    assert len(functions) >= 30
    assert [f for f in functions if not hasattr(lib, f)] == []


def test_dlpack_layout_matches_the_spec():
    assert ffi.sizeof("DLDevice") == 8 and ffi.sizeof("DLDataType") == 4
    assert ffi.sizeof("DLTensor") == 48
    assert [ffi.offsetof("DLTensor", f) for f in
            ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")] == \
        [0, 8, 16, 20, 24, 32, 40]
    assert [ffi.offsetof("DLManagedTensor", f) for f in
            ("dl_tensor", "manager_ctx", "deleter")] == [0, 48, 56]
    assert [ffi.offsetof("DLManagedTensorVersioned", f) for f in
            ("version", "manager_ctx", "deleter", "flags", "dl_tensor")] == [0, 8, 16, 24, 32]
    assert (lib.DLPACK_MAJOR_VERSION, lib.DLPACK_MINOR_VERSION) == (1, 1)
    assert (lib.kDLCPU, lib.kDLCUDA, lib.kDLOneAPI, lib.kDLMAIA) == (1, 2, 14, 17)
    assert (lib.kDLInt, lib.kDLBool, lib.kDLFloat8_e3m4, lib.kDLFloat4_e2m1fn) == (0, 6, 7, 17)
    assert (lib.DLPACK_FLAG_BITMASK_READ_ONLY, lib.DLPACK_FLAG_BITMASK_IS_COPIED,
            lib.DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) == (1, 2, 4)


def test_headers_compile_as_cpp(tmp_path):
    src = tmp_path / "use.cpp"
    src.write_text('#include "kiln_runtime.h"\nint main() { return kiln_get_num_threads() > 0 ? 0 : 1; }\n')
    subprocess.run(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                    f"-I{RUNTIME / 'include'}", str(src)], check=True)
