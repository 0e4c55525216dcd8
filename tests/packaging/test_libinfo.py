"""``kiln.libinfo`` and ``kiln config`` in a source checkout (the editable install of ``make``):
they point into the checkout's build folders. The installed case is in test_wheel.py."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from kiln import libinfo

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _config(*opts):
    proc = subprocess.run([sys.executable, "-m", "kiln.cli", "config", *opts], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_checkout_paths():
    if libinfo.installed():
        pytest.skip("kiln is installed from a wheel here, not used from the checkout")
    assert libinfo.include_dir() == str(ROOT / "runtime_c" / "include")
    assert libinfo.include_dirs() == [str(ROOT / "runtime_c" / "include"), str(ROOT / "bindings" / "cpp")]
    assert libinfo.lib_dir() == str(ROOT / "runtime_c" / "build")
    assert (pathlib.Path(libinfo.include_dir()) / "kiln_runtime.h").is_file()
    assert libinfo.cflags() == ["-I" + d for d in libinfo.include_dirs()]


def test_runtime_library_kinds():
    with pytest.raises(ValueError, match="'shared' or 'static'"):
        libinfo.runtime_library("dynamic")
    for kind, name in (("shared", "libkiln_runtime.so"), ("static", "libkiln_runtime.a")):
        try:
            path = libinfo.runtime_library(kind)
        except FileNotFoundError as e:   # a checkout that has not run `make -C runtime_c`
            assert "make -C runtime_c" in str(e)
        else:
            assert path == str(pathlib.Path(libinfo.lib_dir()) / name)


def test_libs_flags():
    shared = libinfo.libs()
    assert shared[:3] == ["-L" + libinfo.lib_dir(), "-Wl,-rpath," + libinfo.lib_dir(), "-lkiln_runtime"]
    assert {"-lm", "-lpthread", "-ldl"} <= set(shared)
    try:
        static = libinfo.libs(static=True)
    except FileNotFoundError:
        pytest.skip("the static runtime is not built in this checkout")
    assert static[0].endswith("libkiln_runtime.a") and "-lkiln_runtime" not in static


def test_kiln_config_prints_flags_and_paths():
    rc, out, err = _config("--cflags", "--libs")
    assert rc == 0, err
    assert out.split() == libinfo.cflags() + libinfo.libs()
    rc, out, err = _config("--includedir", "--libdir")
    assert rc == 0, err
    assert out.splitlines() == [libinfo.include_dir(), libinfo.lib_dir()]
    rc, out, err = _config()
    assert rc == 0 and out.startswith("version: ") and "cflags: " in out, err


def test_kiln_config_names_what_a_checkout_lacks():
    if libinfo.installed():
        pytest.skip("kiln is installed from a wheel here: it has a CMake package")
    rc, out, err = _config("--cmakedir")
    assert rc == 1 and "KilnConfig.cmake is installed with a Kiln wheel only" in err
