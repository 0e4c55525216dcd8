"""ONNX's backend node test cases, built once per clone and shared by the pytest-xdist workers.

``onnx.backend.test`` builds its ~1,900 node test cases when it loads them, by running every
case's export function (the models and their reference outputs, computed with
``onnx.reference``): 5-8 s of CPU that each pytest worker would pay again while collecting. The
first process to get here builds the list and pickles it under ``build/onnx-node-cases/`` (ignored
by git, so a fresh clone starts cold); the others wait for that file and load it (~10 MB, 0.03 s).
The file is named after the onnx and numpy versions, so other versions build a new one.

``install()`` makes ``onnx.backend.test.BackendTest`` read the shared list::

    import node_cases
    node_cases.install()
    backend_test = onnx.backend.test.BackendTest(KilnBackend, __name__)
"""
from __future__ import annotations

import fcntl
import os
import pickle

import numpy
import onnx
import onnx.backend.test.loader as loader
import onnx.backend.test.runner as runner

CACHE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "build", "onnx-node-cases")


def _cache_path() -> str:
    # The pickle holds onnx protos and numpy arrays: another version of either builds a new one.
    return os.path.join(CACHE_DIR, f"onnx-{onnx.__version__}-numpy-{numpy.__version__}.pkl")


def load_node_cases() -> list:
    """The node test cases, as ``onnx.backend.test.loader.load_model_tests(kind="node")`` returns
    them: from the shared file when one process already built it, else built and written there.
    An exclusive lock on a file beside it makes concurrent workers build it once."""
    path = _cache_path()
    os.makedirs(CACHE_DIR, exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if os.path.exists(path):
            with open(path, "rb") as f:
                return pickle.load(f)
        cases = loader.load_model_tests(kind="node")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # never a half-written file under the final name
        return cases


def install() -> None:
    """Route the backend test runner's node-case loading through ``load_node_cases``; the other
    kinds (real, simple, pytorch-*) are read from onnx's data folder as before."""
    if getattr(runner.load_model_tests, "_kiln_shared", False):
        return
    original = runner.load_model_tests

    def load_model_tests(*args, **kwargs):
        kind = kwargs.get("kind", args[1] if len(args) > 1 else None)
        return load_node_cases() if kind == "node" else original(*args, **kwargs)

    load_model_tests._kiln_shared = True
    runner.load_model_tests = load_model_tests
