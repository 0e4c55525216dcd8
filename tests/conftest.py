"""Fixtures shared by every test folder, so the suite can run in parallel (``pytest -n auto``,
pytest-xdist) and beside other sessions on the same tree.

Build outputs inside the repository (runtime_c/build, bindings/java/build) are shared by all
of them: every ``make`` that writes there runs under one exclusive file lock
(runtime_c/build/.make.lock, ``fcntl.flock``), and tests copy what they use out into their own
tmp dir while still holding it, so a rebuild by anyone else cannot change the files under a
running test. Everything else a test writes goes to ``tmp_path`` / ``tmp_path_factory`` (one
base dir per xdist worker); the kernel cache (``kiln.codegen.build_library``) is safe to share:
it links in a private temp dir and renames the library into place.
"""
from __future__ import annotations

import pytest

from build_lock import make_runtime, repo_build_lock
from zig_lib import use_stable_zig_lib

# zig's C library builds served from its cache in every fresh clone (tests/zig_lib.py).
use_stable_zig_lib()

# The longest test modules first, for the parallel suite (tests/suite_order.py).
pytest_plugins = ["suite_order"]


@pytest.fixture(scope="session")
def build_lock():
    """``with build_lock(): ...``: hold the lock over the tree's build dirs."""
    return repo_build_lock


@pytest.fixture(scope="session")
def runtime_make():
    """``runtime_make("single", copy={"single/libkiln_runtime.a": dest})`` runs
    ``make -C runtime_c single`` and copies build outputs (paths relative to runtime_c/build),
    all under the build lock; returns make's stdout."""
    return make_runtime
