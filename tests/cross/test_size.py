"""Issue 15, size: the shared runtime is at most 64 KB stripped on x86-64 (`make -C runtime_c
size`), and the embedded configuration's code and data are smaller still."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess

import pytest

LIMIT = 64 * 1024


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the 64 KB budget is for x86-64")
def test_shared_runtime_fits_64k_and_embedded_is_smaller(runtime_make, tmp_path):
    if shutil.which("strip") is None or shutil.which("size") is None:
        pytest.skip("needs binutils (strip, size)")
    shared = int(runtime_make("size").split()[-1])
    assert shared <= LIMIT, (
        f"libkiln_runtime.so is {shared} bytes stripped, over the {LIMIT} of issue 15; build "
        "fewer files for speed (HOT_SRCS in runtime_c/Makefile) or trim the runtime")
    runtime_make("embedded", copy={"embedded/libkiln_runtime.a": tmp_path / "e.a"})
    out = subprocess.run(["size", "-t", str(tmp_path / "e.a")], capture_output=True, text=True,
                         check=True).stdout
    total = int(re.search(r"^\s*\d+\s+\d+\s+\d+\s+(\d+)\s+\S+\s+\(TOTALS\)", out, re.M).group(1))
    assert total < shared, (total, shared)
