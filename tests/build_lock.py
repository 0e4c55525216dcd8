"""One exclusive lock over the build dirs inside the tree (runtime_c/build, bindings/java/build):
every test that runs ``make`` there, or rebuilds kiln._ffi, takes it, so parallel test workers
(pytest-xdist) and other test sessions on the same tree never build the same files at once.
Fixtures over it are in tests/conftest.py."""
from __future__ import annotations

import contextlib
import fcntl
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "runtime_c"


@contextlib.contextmanager
def repo_build_lock():
    """Hold the lock (``fcntl.flock`` on runtime_c/build/.make.lock) for the ``with`` block."""
    (RUNTIME / "build").mkdir(exist_ok=True)
    with open(RUNTIME / "build" / ".make.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def make_runtime(*targets: str, copy=None) -> str:
    """``make -s -C runtime_c *targets`` under the lock; then copies build outputs
    ({path relative to runtime_c/build: destination}) before releasing it, so a later rebuild
    by someone else cannot change them under a running test. Returns make's stdout."""
    with repo_build_lock():
        out = subprocess.run(["make", "-s", "-j2", "-C", str(RUNTIME), *targets], check=True,
                             stdout=subprocess.PIPE, text=True, timeout=600).stdout
        for rel, dest in (copy or {}).items():
            pathlib.Path(dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(RUNTIME / "build" / rel, dest)
    return out
