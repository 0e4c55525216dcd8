"""A copy of zig's lib folder per machine, so that zig's cache serves every fresh clone.

zig's cache checks the C library sources it builds from (musl for the fully static ARMv7 app,
compiler-rt and the glibc stubs for every foreign target) by their paths, inodes and mtimes.
Each fresh clone's venv installs ``ziglang/lib`` anew, so a warm ``~/.cache/zig`` still
rebuilds part of them: 27-30 s for the musl build alone. The suite points zig at a copy made
once per machine and ziglang version (``ZIG_LIB_DIR``, which every zig the tests start
inherits: ``cross_cc``'s, runtime_c's Makefile's, the static test's). The copy lives in zig's
own cache folder, so removing that folder makes both cold together (and removes the copies
of older ziglang versions, about 230 MB each, which nothing else deletes). Tests only: Kiln
itself uses the venv's zig as installed.
"""
from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import os
import pathlib
import shutil
from typing import Optional


def stable_zig_lib() -> Optional[pathlib.Path]:
    """The per-machine copy of the installed ziglang's lib folder (made on first use, under a
    file lock so that parallel workers copy it once), or None without ziglang."""
    spec = importlib.util.find_spec("ziglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    src = pathlib.Path(list(spec.submodule_search_locations)[0]) / "lib"
    if not src.is_dir():
        return None
    cache = pathlib.Path(os.environ.get("ZIG_GLOBAL_CACHE_DIR")
                         or pathlib.Path.home() / ".cache" / "zig")
    dest = cache / f"kiln-tests-lib-{importlib.metadata.version('ziglang')}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "kiln-tests-lib.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        if not dest.is_dir():
            tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            # copy2 keeps the files' mtimes; a venv's byte-compiled Python files are not zig's
            shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("__pycache__"))
            os.replace(tmp, dest)        # never a half-copied folder under the final name
    return dest


def use_stable_zig_lib() -> None:
    """Point every zig this process starts at ``stable_zig_lib()`` (unless ZIG_LIB_DIR is
    set already)."""
    if "ZIG_LIB_DIR" in os.environ:
        return
    lib = stable_zig_lib()
    if lib is not None:
        os.environ["ZIG_LIB_DIR"] = str(lib)
