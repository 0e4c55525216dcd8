"""The ``.lowered`` records of the kernel cache (kiln.codegen.worker): a PrimFunc compiled before
with the same Kiln sources, target and options skips lowering, and anything that could change
the lowered code (the program, Kiln's sources, a missing object, a damaged record) lowers it
again. Lowering is made to fail to show which builds do it."""
from __future__ import annotations

import glob
import os
import shutil

import pytest

from kiln import codegen
from kiln.codegen import BuildOptions, abi, worker
from kiln.ir import IRModule

from cg_irbuild import buf, elementwise


def two_kernels(n=8):
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    return IRModule({"add_one": elementwise(n, [A], B, lambda a: a + 1.0, "vectorized"),
                     "twice": elementwise(n, [B], C, lambda b: b * 2.0, "serial")})


def refuse_lowering(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("lowered a kernel")
    monkeypatch.setattr(abi, "lower_kernel", refuse)


def build(cache, mod):
    return codegen.build_library(mod, "llvm", BuildOptions(cache_dir=cache, jobs=1))


def records(cache):
    return sorted(glob.glob(os.path.join(cache, "objects", "*.lowered")))


def objects(cache):
    return sorted(glob.glob(os.path.join(cache, "objects", "*.o")))


def test_an_equal_program_is_not_lowered_again(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    lib = build(cache, two_kernels())
    assert len(records(cache)) == 2
    os.remove(lib)                                    # linked again, from the same objects
    refuse_lowering(monkeypatch)
    assert build(cache, two_kernels()) == lib        # a new but equal module
    assert os.path.exists(lib)


def test_another_program_or_other_sources_are_lowered(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    build(cache, two_kernels())
    refuse_lowering(monkeypatch)
    with pytest.raises(AssertionError, match="lowered a kernel"):
        build(cache, two_kernels(16))
    monkeypatch.setattr(worker, "_CODE_DIGEST", "another version of Kiln")
    with pytest.raises(AssertionError, match="lowered a kernel"):
        build(cache, two_kernels())


def test_a_missing_object_or_a_damaged_record_lowers_again(tmp_path):
    cache = str(tmp_path / "cache")
    lib = build(cache, two_kernels())
    made = objects(cache)
    for path in made:
        os.remove(path)
    for path in records(cache):
        with open(path, "r+b") as f:
            f.truncate(7)
    os.remove(lib)
    assert build(cache, two_kernels()) == lib        # the same objects, made again
    assert objects(cache) == made and len(records(cache)) == 2
    assert all(worker._read_lowered(p, os.path.join(cache, "objects")) for p in records(cache))


def test_no_records_without_a_code_digest(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "_CODE_DIGEST", "")
    cache = str(tmp_path / "cache")
    build(cache, two_kernels())
    assert records(cache) == [] and len(objects(cache)) == 4    # two kernels, table, CPU check


def test_the_digest_follows_every_source_file(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(worker.__file__)))
    copy = tmp_path / "kiln"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    assert worker.sources_digest(str(copy)) == worker.code_digest() != ""
    with open(copy / "ir" / "expr.py", "a") as f:
        f.write("\n# an edit\n")
    assert worker.sources_digest(str(copy)) != worker.code_digest()
