"""The runtime's thread-safety and leak contracts from Python (issue 17 items 4 and 5), on the
real models of reliability_models.py:

- 8 Python threads x 1,000 calls sharing one library module, one VirtualMachine and one
  function object, every output compared with a single-threaded call (cffi releases the GIL
  around kiln_function_call, so the calls do overlap in the runtime);
- 1,000 load / init / run / free cycles from Python with the process's RSS flat after a warm-up.
"""
from __future__ import annotations

import gc
import os
import pathlib
import threading

import numpy as np
import pytest

import kiln

from reliability_models import MODELS


def _read(manifest: pathlib.Path):
    """(function name, numpy inputs, expected float32 outputs) from a model's manifest."""
    dtypes = {(2, 32): np.float32, (0, 32): np.int32, (0, 64): np.int64, (6, 8): np.bool_}
    fn, inputs, outputs = None, [], []
    for line in manifest.read_text().splitlines():
        word, *rest = line.split()
        if word == "function":
            fn = rest[0]
        elif word == "input":
            code, bits, ndim = map(int, rest[:3])
            shape = tuple(map(int, rest[3:3 + ndim]))
            data = np.fromfile(manifest.parent / rest[-1], dtype=dtypes[code, bits])
            inputs.append(data.reshape(shape))
        else:
            outputs.append(np.fromfile(manifest.parent / rest[-1], dtype=np.float32))
    return fn, inputs, outputs


def _flat(result):
    if isinstance(result, (list, tuple)):
        return [a for r in result for a in _flat(r)]
    return [result.numpy().ravel()]


def _check(result, expected):
    got = _flat(result)
    assert len(got) == len(expected), (len(got), len(expected))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", MODELS)
def test_python_threads_share_vm_and_function(model, model_manifest):
    manifest = model_manifest(model)
    fn_name, inputs, expected = _read(manifest)
    library = kiln.load_module(str(manifest.parent / "model.so"))
    vm = kiln.VirtualMachine(library)
    shared_fn = vm[fn_name]
    args = [kiln.nd.array(a) for a in inputs]  # shared by every thread, only read
    errors, counts = [], [0] * 8
    start = threading.Barrier(8)

    def work(t):
        try:
            start.wait()
            for c in range(1000):
                # the shared function, a lookup on the shared VM, or a VM of its own from the
                # shared library module
                if c % 100 == 99:
                    result = kiln.VirtualMachine(library)[fn_name](*args)
                elif (c + t) % 4 == 0:
                    result = vm[fn_name](*args)
                else:
                    result = shared_fn(*args)
                _check(result, expected)
                counts[t] += 1
        except BaseException as e:  # reported by the main thread
            errors.append(f"thread {t} call {counts[t]}: {e!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert errors == [], errors[:3]
    assert counts == [1000] * 8


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_python_load_run_free_cycles_keep_rss_flat(model, model_manifest):
    """RSS after 800 more cycles stays within 1 MiB of where it was after a 200-cycle warm-up
    (measured: 0.0 MiB). Keeping every VM alive (its module, arena and Python objects, ~4.7 KiB
    a cycle) grows it by 3.8 MiB; byte-sized leaks are LeakSanitizer's job (test_reliability_c)."""
    manifest = model_manifest(model)
    fn_name, inputs, expected = _read(manifest)
    path = str(manifest.parent / "model.so")

    def cycle():
        vm = kiln.VirtualMachine(kiln.load_module(path))
        result = vm[fn_name](*inputs)
        _check(result, expected)
        del vm, result

    for _ in range(200):  # warm-up: caches, arenas of the allocator, lazily imported modules
        cycle()
    gc.collect()
    before = _rss()
    for _ in range(800):
        cycle()
    gc.collect()
    grown = _rss() - before
    assert grown < 1 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over 800 load/run/free cycles"
