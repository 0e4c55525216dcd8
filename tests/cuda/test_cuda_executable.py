"""The PTX inside the executable: ``kiln.compile(mod, target="cuda")`` writes the optional CUDA
section (0x101), the Python reader and the C loader (``kiln_cuda_executable_load`` in
libkiln_cuda) check every byte of it, and a good artifact loads up to the point where the
driver is needed: without one, the driver's error."""
from __future__ import annotations

import ctypes
import struct
import subprocess

import pytest

import kiln
from kiln import nn
from kiln.executable.cuda_section import CUDA_SECTION
from kiln.executable.format import FormatError, deserialize
from kiln.runtime import KilnError, ffi, lib

from build_lock import RUNTIME
from cuda_programs import assemble, ptxas


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


needs_no_driver = pytest.mark.skipif(_has_driver(), reason="libcuda.so.1 is installed here: this "
                                     "checks the machine without a CUDA driver")


@pytest.fixture(scope="module")
def mlp_exe():
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    mod, _ = mlp.export({"forward": {"x": nn.spec.Tensor(("batch", 16), "float32")}})
    return kiln.compile(mod, target="cuda -arch=sm_80", pipeline="default")


def _section(blob: bytes):
    num, table = struct.unpack_from("<I", blob, 24)[0], struct.unpack_from("<Q", blob, 32)[0]
    for i in range(num):
        kind, _, off, size = struct.unpack_from("<IIQQ", blob, table + 24 * i)
        if kind == CUDA_SECTION:
            return off, size
    raise AssertionError("no CUDA section")


def _c_load(blob: bytes):
    """(status, message) of the C loader on ``blob`` (through the Python binding's copy of it)."""
    out = ffi.new("kiln_cuda_executable_t**")
    st = lib.kiln_cuda_executable_load(0, blob, len(blob), out)
    if st == lib.KILN_OK:
        lib.kiln_cuda_executable_free(out[0])
    return st, ffi.string(lib.kiln_last_error()).decode()


def test_artifact_carries_the_ptx_and_round_trips(mlp_exe, tmp_path):
    spec = deserialize(mlp_exe.blob)
    assert spec == mlp_exe.spec and spec.cuda is not None
    assert set(spec.cuda.functions) == set(spec.kernels)        # every CALL_KERNEL target has PTX
    for name in spec.cuda.entries:
        assert f".entry {name}(" in spec.cuda.ptx
    assert spec.cuda.description["target"] == "cuda -arch=sm_80"
    if ptxas() is not None:
        r = assemble(spec.cuda.ptx, "sm_80", tmp_path)
        assert r.returncode == 0, r.stderr


def _corrupt(blob: bytes, at: int, data: bytes) -> bytes:
    return blob[:at] + data + blob[at + len(data):]


def _corruptions(blob: bytes):
    off, size = _section(blob)
    _, num, ptx_size, desc_size = struct.unpack_from("<IIQQ", blob, off)
    first_len = struct.unpack_from("<I", blob, off + 24)[0]
    names_end = off + 24
    for _ in range(num):
        names_end += 5 + struct.unpack_from("<I", blob, names_end)[0]
    return {
        "version": (_corrupt(blob, off, struct.pack("<I", 7)), "version 7"),
        "entry count": (_corrupt(blob, off + 4, struct.pack("<I", 1 << 30)), "cannot fit"),
        "entry length": (_corrupt(blob, off + 24, struct.pack("<I", size)), "name length"),
        "entry NUL": (_corrupt(blob, off + 28 + first_len, b"x"), "NUL-terminated"),
        "ptx size": (_corrupt(blob, off + 8, struct.pack("<Q", ptx_size + 1)), "fill"),
        "ptx NUL": (_corrupt(blob, names_end + ptx_size - 1, b" "), "PTX is not one"),
        "ptx inner NUL": (_corrupt(blob, names_end + 3, b"\0"), "PTX is not one"),
        "desc NUL": (_corrupt(blob, off + size - 1, b" "), "description is not one"),
    }


@pytest.mark.parametrize("case", ["version", "entry count", "entry length", "entry NUL", "ptx size",
                                  "ptx NUL", "ptx inner NUL", "desc NUL"])
def test_every_byte_of_the_section_is_checked(mlp_exe, case):
    blob, words = _corruptions(mlp_exe.blob)[case]
    with pytest.raises(FormatError, match=words):
        deserialize(blob)
    st, message = _c_load(blob)                  # the C loader refuses it before any driver call
    assert st in (lib.KILN_ERR_INVALID_FORMAT, lib.KILN_ERR_VERSION_MISMATCH), message
    assert words in message and "CUDA section" in message


def test_a_cpu_model_has_no_cuda_section(mlp_exe):
    mlp = nn.Sequential(nn.Linear(4, 2))
    mod, _ = mlp.export({"forward": {"x": nn.spec.Tensor((1, 4), "float32")}})
    st, message = _c_load(kiln.compile(mod, target="llvm", pipeline="zero").blob)
    assert st == lib.KILN_ERR_NOT_FOUND and "no CUDA section" in message
    assert _c_load(b"\0" * 10)[0] == lib.KILN_ERR_INVALID_FORMAT
    with pytest.raises(KilnError, match="run it on a GPU"):
        kiln.VirtualMachine(mlp_exe, kiln.cpu())


@needs_no_driver
def test_good_artifact_loads_up_to_the_driver(mlp_exe, tmp_path):
    st, message = _c_load(mlp_exe.blob)
    assert st == lib.KILN_ERR_UNSUPPORTED and "no CUDA driver: libcuda.so.1 not found" in message
    with pytest.raises(KilnError, match="cannot load the model on device cuda:0: no CUDA driver"):
        kiln.VirtualMachine(mlp_exe, kiln.cuda(0))
    # The exported .so alone is the artifact.
    path = mlp_exe.export_library(tmp_path / "model.so")
    with pytest.raises(KilnError, match="cannot load the model on device cuda:0: no CUDA driver"):
        kiln.VirtualMachine(path, kiln.cuda(0))


@needs_no_driver
def test_c_program_opens_the_model_library(mlp_exe, runtime_make, tmp_path):
    """A C program with only libkiln_cuda + libkiln_runtime and the exported model .so."""
    runtime_make("cuda", copy={"libkiln_cuda.so": tmp_path / "libkiln_cuda.so",
                               "libkiln_runtime.so": tmp_path / "libkiln_runtime.so"})
    model = mlp_exe.export_library(tmp_path / "model.so")
    src = tmp_path / "open_model.c"
    src.write_text("""
#include <stdio.h>
#include "kiln_cuda.h"
int main(int argc, char** argv) {
  kiln_cuda_executable_t* exe = NULL;
  kiln_status_t st = kiln_cuda_executable_open(argv[1], 0, &exe);
  printf("%d %s\\n", (int)st, kiln_last_error());
  st = kiln_cuda_executable_open("/nonexistent/model.so", 0, &exe);
  printf("%d %s\\n", (int)st, kiln_last_error());
  return exe == NULL ? 0 : 1;
}
""")
    exe = tmp_path / "open_model"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", f"-I{RUNTIME / 'include'}", str(src), "-o",
                    str(exe), f"-L{tmp_path}", "-lkiln_cuda", "-lkiln_runtime",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    run = subprocess.run([str(exe), str(model)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    first, second = run.stdout.splitlines()
    assert first.startswith(f"{lib.KILN_ERR_UNSUPPORTED} no CUDA driver: libcuda.so.1 not found")
    assert second.startswith(f"{lib.KILN_ERR_NOT_FOUND} kiln_cuda_executable_open: cannot load")


def test_inspect_names_the_gpu_code(mlp_exe, tmp_path, capsys):
    from kiln import cli
    path = mlp_exe.export_library(tmp_path / "model.so")
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    n = len(mlp_exe.spec.cuda.entries)
    assert f"gpu:       cuda -arch=sm_80: {n} kernel entries" in out
    assert "cpu:       the architecture's baseline only" in out     # no CPU code in it


@needs_no_driver
def test_mutated_sections_under_asan(mlp_exe, runtime_make, tmp_path):
    """The C loader on 4000 corrupted copies of the section (random bytes overwritten, random
    truncations of the blob), built with AddressSanitizer + UBSan: every one is refused or
    reaches the driver, none reads out of bounds (no driver here, so no PTX reaches a JIT)."""
    runtime_make("cuda", copy={"libkiln_runtime.so": tmp_path / "libkiln_runtime.so"})
    off, size = _section(mlp_exe.blob)
    (tmp_path / "blob.bin").write_bytes(mlp_exe.blob)
    src = tmp_path / "mutate.c"
    src.write_text("""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln_cuda.h"
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb");
  size_t off = (size_t)atol(argv[2]), len = (size_t)atol(argv[3]), n, i;
  unsigned char *blob, *copy;
  unsigned seed = 12345u;
  int counts[2] = {0, 0};
  fseek(f, 0, SEEK_END); n = (size_t)ftell(f); fseek(f, 0, SEEK_SET);
  blob = malloc(n); copy = malloc(n);
  if (fread(blob, 1, n, f) != n) return 2;
  fclose(f);
  for (i = 0; i < 4000; ++i) {
    size_t size = n, k, flips = 1 + i % 4;
    kiln_cuda_executable_t* exe = NULL;
    kiln_status_t st;
    memcpy(copy, blob, n);
    for (k = 0; k < flips; ++k) {
      seed = seed * 1103515245u + 12345u;
      copy[off + (seed >> 8) % len] = (unsigned char)(seed >> 3);
    }
    if (i % 5 == 4) { seed = seed * 1103515245u + 12345u; size = off + (seed >> 8) % len; }
    /* a copy of exactly `size` bytes, so ASan sees any read past it */
    {
      unsigned char* exact = malloc(size ? size : 1);
      memcpy(exact, copy, size);
      st = kiln_cuda_executable_load(0, exact, size, &exe);
      free(exact);
    }
    if (exe != NULL) return 3;
    counts[st == KILN_ERR_UNSUPPORTED]++;
  }
  printf("%d refused %d reached the driver\\n", counts[0], counts[1]);
  free(blob); free(copy);
  return 0;
}
""")
    exe = tmp_path / "mutate"
    cuda = RUNTIME / "cuda"
    subprocess.run(["cc", "-std=c99", "-O1", "-g", "-fno-omit-frame-pointer",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                    f"-I{RUNTIME / 'include'}", str(src), str(cuda / "kiln_cuda.c"),
                    str(cuda / "kiln_cuda_executable.c"), "-o", str(exe), f"-L{tmp_path}",
                    "-lkiln_runtime", f"-Wl,-rpath,{tmp_path}", "-ldl"], check=True)
    run = subprocess.run([str(exe), str(tmp_path / "blob.bin"), str(off), str(size)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    refused, reached = [int(w) for w in run.stdout.split() if w.isdigit()]
    # Most overwritten bytes land in the PTX text, which stays a valid string (the driver's
    # JIT checks its contents); the refusals are the truncations and the structural fields.
    assert refused >= 800 and reached >= 1 and refused + reached == 4000
