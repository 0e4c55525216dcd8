"""libkiln_cuda.so, the C runtime's CUDA device as a library of its own: it builds without the
CUDA toolkit, never links the driver (it dlopens libcuda.so.1 when a device is opened), and
adds nothing to the shared runtime. A C program reports the missing driver like Python does."""
from __future__ import annotations

import ctypes
import subprocess

import pytest

from build_lock import RUNTIME


def _needed(path) -> list:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True)
    return [line.split("[")[1].rstrip("]") for line in out.stdout.splitlines() if "(NEEDED)" in line]


@pytest.fixture(scope="module")
def cuda_lib(tmp_path_factory, runtime_make):
    out = tmp_path_factory.mktemp("cudalib")
    runtime_make("cuda", copy={"libkiln_cuda.so": out / "libkiln_cuda.so",
                               "libkiln_runtime.so": out / "libkiln_runtime.so"})
    return out


def test_links_the_runtime_and_not_the_driver(cuda_lib):
    needed = _needed(cuda_lib / "libkiln_cuda.so")
    assert "libkiln_runtime.so" in needed
    assert not [n for n in needed if "cuda" in n], needed
    # The shared runtime knows nothing of CUDA: the device lives only in libkiln_cuda.so.
    syms = subprocess.run(["nm", "-D", str(cuda_lib / "libkiln_runtime.so")], capture_output=True,
                          text=True, check=True).stdout
    assert "kiln_cuda_" not in syms


def test_c_program_gets_the_missing_driver_error(cuda_lib, tmp_path):
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("libcuda.so.1 is installed here: this checks a machine without a CUDA driver")
    except OSError:
        pass
    src = tmp_path / "open_gpu.c"
    src.write_text("""
#include <stdio.h>
#include "kiln_cuda.h"
int main(void) {
  kiln_cuda_device_t* gpu = NULL;
  kiln_status_t st = kiln_cuda_device_open(0, &gpu);
  printf("%d %s\\n", (int)st, kiln_last_error());
  return gpu == NULL && st == KILN_ERR_UNSUPPORTED ? 0 : 1;
}
""")
    exe = tmp_path / "open_gpu"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", f"-I{RUNTIME / 'include'}", str(src),
                    "-o", str(exe), f"-L{cuda_lib}", "-lkiln_cuda", "-lkiln_runtime",
                    f"-Wl,-rpath,{cuda_lib}"], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert "no CUDA driver: libcuda.so.1 not found" in run.stdout
