"""The C compiler that links kernel libraries: found among cc, gcc and clang, and when none is
there, an error that says what is missing and how to fix it."""
from __future__ import annotations

import os
import shutil

import pytest

import kiln
from kiln.codegen import emit
from kiln.codegen.emit import BuildOptions, build_library, find_cc


def _module():
    """A one-kernel module: B = A + 1 over 8 floats."""
    from kiln import te
    a = te.placeholder((8,), "float32", name="A")
    b = te.compute((8,), lambda i: a[i] + 1.0, name="B")
    return kiln.ir.IRModule({"main": te.create_prim_func([a, b])})


def _path_with(tmp_path, names):
    """A PATH holding only links named ``names`` to this machine's C compiler."""
    real = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if real is None:
        pytest.skip("needs a C compiler on PATH to stand in for the ones tried")
    d = tmp_path / "bin"
    d.mkdir()
    for n in names:
        os.symlink(real, d / n)
    return str(d)


def test_find_cc_takes_the_first_compiler_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _path_with(tmp_path, ["clang"]))
    assert find_cc() == "clang"
    assert BuildOptions().cc == "clang"
    os.symlink(shutil.which("clang"), tmp_path / "bin" / "gcc")
    assert find_cc() == "gcc"


def test_a_library_links_with_gcc_when_there_is_no_cc(tmp_path, monkeypatch):
    path = _path_with(tmp_path, ["gcc"])
    if shutil.which("ld"):   # the compiler driver runs the linker it finds on PATH
        os.symlink(shutil.which("ld"), os.path.join(path, "ld"))
    monkeypatch.setenv("PATH", path)
    path = build_library(_module(), "llvm", BuildOptions(cache_dir=str(tmp_path / "cache")))
    assert os.path.isfile(path)


def test_no_compiler_names_every_candidate_and_the_fix(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(emit.CodegenError) as e:
        build_library(_module(), "llvm", BuildOptions(cache_dir=str(tmp_path / "cache")))
    msg = str(e.value)
    assert "cc, gcc, clang not found" in msg and "BuildOptions(cc=" in msg and "install" in msg.lower()


def test_a_named_compiler_that_is_missing_is_named(tmp_path):
    with pytest.raises(emit.CodegenError, match="'no-such-cc-kiln' not found"):
        build_library(_module(), "llvm", BuildOptions(cache_dir=str(tmp_path / "cache"),
                                                      cc="no-such-cc-kiln"))
