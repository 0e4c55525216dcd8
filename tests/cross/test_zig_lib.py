"""tests/zig_lib.py: the suite's zig runs on a per-machine copy of ziglang's lib folder, the
same files with the same mtimes as the installed one (so that zig's cache serves new venvs)."""
from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

from zig_lib import stable_zig_lib


def test_the_suite_points_zig_at_an_identical_copy():
    spec = importlib.util.find_spec("ziglang")
    if spec is None:
        pytest.skip("needs the ziglang package (pip install 'kiln[cross]')")
    src = pathlib.Path(list(spec.submodule_search_locations)[0]) / "lib"
    copy = stable_zig_lib()
    assert os.environ.get("ZIG_LIB_DIR") == str(copy)
    assert copy != src and copy.is_dir()
    names = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file())
    for rel in names[:: max(1, len(names) // 200)]:     # a sample of ~200 files
        a, b = (src / rel).stat(), (copy / rel).stat()
        assert (a.st_size, int(a.st_mtime)) == (b.st_size, int(b.st_mtime)), rel
