"""The libFuzzer targets of runtime_c/fuzz (issue 17 item 1) in `make test`: each built with
clang (-fsanitize=fuzzer,address,undefined), seeded with real artifacts (fuzz_seeds.py), run on
its regression inputs and then for KILN_FUZZ_SECONDS (10 by default, so the suite stays fast;
`make fuzz-smoke` runs 60 s a target, `make fuzz` a long campaign, docs/reliability.md). Any
crash, leak, hang, out-of-memory or sanitizer report fails the test and leaves the input in
the test's tmp dir."""
from __future__ import annotations

import os
import shutil

import pytest

from build_lock import RUNTIME, repo_build_lock
from fuzz_run import TARGETS, build_models, build_targets, clang_problem, run_target, write_seeds

SECONDS = int(os.environ.get("KILN_FUZZ_SECONDS", "10"))


@pytest.fixture(scope="module")
def fuzz_setup(tmp_path_factory):
    problem = clang_problem()
    if problem:
        pytest.skip(f"libFuzzer targets need clang with its fuzzer runtime: {problem} "
                    "(`make fuzz-deps` installs it with apt-get)")
    work = tmp_path_factory.mktemp("fuzz")
    return work, write_seeds(work / "seeds", build_models(work / "models"))


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_finds_nothing(target, fuzz_setup):
    work, seeds = fuzz_setup
    # The targets' build dir (runtime_c/build/fuzz), under the build lock: `make test` builds
    # them there while pip installs (Makefile, prebuild-c), so this is up to date and instant;
    # run alone, each test builds only its own target. The copy is this test's to run.
    with repo_build_lock():
        built = build_targets(RUNTIME / "build" / "fuzz", [target])[target]
        exe = work / "bin" / target
        exe.parent.mkdir(exist_ok=True)
        shutil.copy2(built, exe)
    r = run_target(exe, seeds[target], work / target, seeds["libs"], SECONDS)
    assert r["ok"], f"{target}: {r['crashes']}\n{r['log']}"
    assert r["runs"] >= 100, r["log"]  # it did fuzz, not only load the seeds
