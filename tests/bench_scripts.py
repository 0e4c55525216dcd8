"""Loading a script of bench/ as a module for its tests: by path, under a name of its own
("kiln_bench_<name>": a bare "tune" or "onnx_models" could meet another module of that name),
with bench/ importable while it loads (the scripts import each other)."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


def load(name: str):
    """bench/<name>.py as a fresh module.

    >>> load("target_survey").DEFAULT_TARGETS           # doctest: +SKIP
    ('llvm', 'llvm -mcpu=haswell')
    """
    spec = importlib.util.spec_from_file_location(f"kiln_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module
