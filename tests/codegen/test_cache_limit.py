"""The build cache's size limit (kiln.codegen.cache_limit): least recently used files go first,
nothing used in the last minute goes, hits count as use, a build whose objects were evicted
meanwhile compiles them again, and an Executable puts back its library when it was evicted."""
from __future__ import annotations

import glob
import os
import time

import numpy as np
import pytest

import kiln
from kiln import codegen, nn
from kiln.codegen import BuildOptions, cache_limit

from cg_irbuild import buf, elementwise


def put(path, size, age_s, now):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\0" * size)
    os.utime(path, (now - age_s, now - age_s))
    return path


@pytest.mark.parametrize("text,size", [("4096", 4096), ("512M", 512 << 20), ("2G", 2 << 30),
                                       ("1.5G", 3 << 29), ("300MB", 300 << 20), ("64KiB", 64 << 10),
                                       ("0", 0)])
def test_sizes_read_in_binary_units(text, size):
    assert cache_limit.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1G", "2X"])
def test_a_bad_size_names_itself(text):
    with pytest.raises(ValueError, match="not a size"):
        cache_limit.parse_size(text)


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("KILN_CACHE_LIMIT", "300M")
    assert BuildOptions().cache_limit == 300 << 20
    monkeypatch.setenv("KILN_CACHE_LIMIT", "huge")
    with pytest.raises(ValueError, match="KILN_CACHE_LIMIT: not a size: 'huge'"):
        BuildOptions()
    monkeypatch.delenv("KILN_CACHE_LIMIT")
    assert BuildOptions().cache_limit == cache_limit.DEFAULT_LIMIT


def test_least_recently_used_go_first_down_to_80_percent(tmp_path):
    now = time.time()
    cache = str(tmp_path)
    oldest = put(os.path.join(cache, "kiln_a.so"), 400, 5000, now)
    old = put(os.path.join(cache, "objects", "b.o"), 300, 4000, now)
    newer = put(os.path.join(cache, "schedules", "c.sched"), 200, 3000, now)
    newest = put(os.path.join(cache, "objects", "d.lowered"), 100, 2000, now)
    mine = put(os.path.join(cache, "notes.txt"), 5000, 9000, now)     # not a build's file
    report = cache_limit.trim(cache, 900, now=now)
    assert (report.size_before, report.size_after) == (1000, 600)     # 1000 > 900: down to 720
    assert report.removed == [oldest]
    report = cache_limit.trim(cache, 500, now=now)
    assert (report.size_before, report.size_after) == (600, 300)      # 600 > 500: down to 400
    assert report.removed == [old]
    assert all(os.path.exists(p) for p in (newer, newest, mine))


def test_nothing_under_the_limit_or_used_in_the_last_minute_goes(tmp_path):
    now = time.time()
    cache = str(tmp_path)
    a = put(os.path.join(cache, "kiln_a.so"), 400, 30, now)
    b = put(os.path.join(cache, "objects", "b.o"), 400, 10, now)
    assert cache_limit.trim(cache, 1000, now=now).removed == []        # 800 <= 1000
    report = cache_limit.trim(cache, 500, now=now)
    assert report.removed == [] and report.size_after == 800           # both in use
    assert cache_limit.trim(cache, 500, now=now + 120).removed == [a]   # 400 <= 0.8 * 500
    assert cache_limit.trim(cache, 300, now=now + 120).removed == [b]
    assert cache_limit.trim(cache, 0, now=now + 120).removed == []     # 0: no limit


def test_scans_are_spaced_unless_a_big_library_arrives(tmp_path):
    cache = str(tmp_path)
    now = time.time()
    put(os.path.join(cache, "kiln_old.so"), 1000, 600, now)
    assert cache_limit.after_build(cache, 800, 10).removed == [os.path.join(cache, "kiln_old.so")]
    put(os.path.join(cache, "kiln_old2.so"), 1000, 600, now)
    assert cache_limit.after_build(cache, 800, 10) is None             # scanned just now
    assert cache_limit.after_build(cache, 800, 100).size_after == 0    # >= 1/16 of the limit


def tiny_module(n=8, k=1.0):
    A, B = buf("A", (n,)), buf("B", (n,))
    return kiln.IRModule({"add": elementwise(n, [A], B, lambda a: a + k, "serial")})


def test_hits_count_as_use(tmp_path):
    cache = str(tmp_path / "cache")
    options = BuildOptions(cache_dir=cache, jobs=1, cache_limit=0)
    lib = codegen.build_library(tiny_module(), "llvm", options)
    files = [lib, *glob.glob(os.path.join(cache, "objects", "*"))]
    for p in files:
        os.utime(p, (1, 1))
    assert codegen.build_library(tiny_module(), "llvm", options) == lib
    assert all(os.path.getmtime(p) > 1 for p in files)


def test_a_build_whose_objects_were_evicted_compiles_them_again(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    options = BuildOptions(cache_dir=cache, jobs=1, cache_limit=0)
    lib = codegen.build_library(tiny_module(), "llvm", options)
    os.remove(lib)
    objects = glob.glob(os.path.join(cache, "objects", "*.o"))
    real_touch = cache_limit.touch
    evicted = []

    def evicting_touch(path):     # another process trims while this build checks its objects
        if path.endswith(".o") and not evicted:
            for o in objects:
                os.remove(o)
            evicted.append(path)
        return real_touch(path)
    monkeypatch.setattr(cache_limit, "touch", evicting_touch)
    assert codegen.build_library(tiny_module(), "llvm", options) == lib
    assert evicted and all(os.path.exists(o) for o in objects)


def test_an_executable_puts_back_its_evicted_library(tmp_path):
    cache = str(tmp_path / "cache")
    mod, params = nn.Linear(4, 3).export(spec={"forward": {"x": nn.spec.Tensor((2, 4), "float32")}})
    ex = kiln.compile(kiln.get_pipeline("zero")(mod), "llvm",
                      options=BuildOptions(cache_dir=cache, cache_limit=0))
    path = ex._library_path
    size = os.path.getsize(path)
    os.remove(path)                                   # evicted by another process's trim
    assert ex.library_path == path and os.path.getsize(path) == size
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((2, 4), (3, 4), (3,)))
    assert [p.shape for _, p in params] == [(3, 4), (3,)]
    out = kiln.VirtualMachine(ex, kiln.cpu())["forward"](x, w, b).numpy()
    np.testing.assert_allclose(out, x @ w.T + b, rtol=1e-5, atol=1e-6)
