"""Shared setup for the runtime tests: an up-to-date kiln._ffi extension, and the fixture kernel
library (fixture_kernels.c) compiled in its variants."""

import pathlib
import subprocess
import sys
import sysconfig

import pytest

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
}


def _ensure_extension():
    """Rebuilds kiln._ffi when it is older than the runtime sources, so these tests always run
    the C code in the tree."""
    target = ROOT / "compiler" / "kiln" / ("_ffi" + sysconfig.get_config_var("EXT_SUFFIX"))
    sources = [*RUNTIME.glob("src/*.[ch]"), *RUNTIME.glob("include/*.h"), RUNTIME / "build_ffi.py"]
    if not target.exists() or target.stat().st_mtime < max(p.stat().st_mtime for p in sources):
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
