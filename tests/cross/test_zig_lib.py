"""tests/zig_lib.py: the suite's zig runs on a per-machine copy of ziglang's lib folder: the
same files as the installed one, kept with the mtimes of the first copy so that zig's cache
serves every new venv."""
from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

from zig_lib import stable_zig_lib


def _files(root: pathlib.Path) -> list:
    return sorted(p.relative_to(root) for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def test_the_suite_points_zig_at_an_identical_copy():
    spec = importlib.util.find_spec("ziglang")
    if spec is None:
        pytest.skip("needs the ziglang package (pip install 'kiln[cross]')")
    src = pathlib.Path(list(spec.submodule_search_locations)[0]) / "lib"
    copy = stable_zig_lib()
    assert os.environ.get("ZIG_LIB_DIR") == str(copy)
    assert copy != src and copy.is_dir()
    names = _files(src)
    assert names == _files(copy)
    # The copy may come from another venv of the same ziglang version (its mtimes are the
    # first venv's, which is the point): compare contents, on a sample of ~100 files.
    for rel in names[:: max(1, len(names) // 100)]:
        assert (src / rel).read_bytes() == (copy / rel).read_bytes(), rel
    assert stable_zig_lib() == copy
