"""The libFuzzer targets of runtime_c/fuzz (issue 17 item 1) in `make test`: each built with
clang (-fsanitize=fuzzer,address,undefined), seeded with real artifacts (fuzz_seeds.py), run on
its regression inputs and then for KILN_FUZZ_SECONDS (10 by default, so the suite stays fast;
`make fuzz-smoke` runs 60 s a target, `make fuzz` a long campaign, docs/reliability.md). Any
crash, leak, hang, out-of-memory or sanitizer report fails the test and leaves the input in
the test's tmp dir."""
from __future__ import annotations

import os

import pytest

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
    # each test builds only its own target (into tmp: no shared build dir to lock), so xdist
    # workers running the three tests do not build the same thing
    exe = build_targets(work / "bin", [target])[target]
    r = run_target(exe, seeds[target], work / target, seeds["libs"], SECONDS)
    assert r["ok"], f"{target}: {r['crashes']}\n{r['log']}"
    assert r["runs"] >= 100, r["log"]  # it did fuzz, not only load the seeds
