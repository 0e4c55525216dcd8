"""Runs the libFuzzer targets of runtime_c/fuzz on seeds from real artifacts (fuzz_seeds.py) and
reports, per target, executions, crashes, leaks and peak memory; used by `make fuzz` (a long
campaign), `make fuzz-smoke` (60 s a target) and tests/reliability/test_fuzz.py (the short run
in `make test`).

    .venv/bin/python tests/reliability/fuzz_run.py --seconds 600 [--runs N] [--work DIR] [TARGET ...]

Exit status 0 when no target crashed, leaked, hung or ran out of memory. Inputs that did are
kept in DIR/crashes; a fixed one becomes a regression input in runtime_c/fuzz/regressions/<target>/,
which every run executes first.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FUZZ_DIR = ROOT / "runtime_c" / "fuzz"
REGRESSIONS = FUZZ_DIR / "regressions"
sys.path.insert(0, str(HERE))

from fuzz_seeds import TARGETS, build_models, write_seeds  # noqa: E402

# A blob may declare an arena of any size; the call's allocation must then fail like a real
# out-of-memory (allocator_may_return_null, capped at 512 MiB) instead of libFuzzer calling
# the attempt itself a bug. Leaks are checked (detect_leaks) at every input's end.
ASAN_OPTIONS = "detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=512"


def build_targets(out: pathlib.Path, targets=TARGETS) -> dict:
    """make -C runtime_c/fuzz with its output in ``out`` (each target compiles the runtime's
    sources itself: about 10 s a target); {target: executable}."""
    exes = {t: out / t for t in targets}
    subprocess.run(["make", "-s", "-C", str(FUZZ_DIR), f"OUT={out}", *map(str, exes.values())],
                   check=True, timeout=900)
    return exes


def clang_problem() -> str | None:
    """Why the targets cannot be built here (None when they can)."""
    run = subprocess.run(["make", "-s", "-C", str(FUZZ_DIR), "check-clang"], capture_output=True,
                         text=True)
    return None if run.returncode == 0 else (run.stdout + run.stderr).strip()


def run_target(exe: pathlib.Path, corpus: pathlib.Path, work: pathlib.Path, libs: str,
               seconds: int, runs: int = -1) -> dict:
    """Regression inputs first, then fuzzing from ``corpus`` for ``seconds`` (or ``runs``
    executions). Returns {target, runs, seconds, crashes, regressions, ok, log}."""
    name = exe.name
    env = dict(os.environ, KILN_FUZZ_LIBS=libs, ASAN_OPTIONS=ASAN_OPTIONS,
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    crashes = work / "crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    regression_inputs = sorted((REGRESSIONS / name).glob("*")) if (REGRESSIONS / name).is_dir() else []
    logs, ok = [], True
    if regression_inputs:
        reg = subprocess.run([str(exe), *map(str, regression_inputs)], capture_output=True,
                             text=True, env=env, timeout=300)
        ok &= reg.returncode == 0
        logs.append(reg.stderr[-4000:])
    live = work / "corpus" / name  # grows; the seeds stay as they are
    live.mkdir(parents=True, exist_ok=True)
    cmd = [str(exe), f"-max_total_time={seconds}", f"-runs={runs}", "-timeout=10",
           "-rss_limit_mb=2048", "-print_final_stats=1", f"-artifact_prefix={crashes}/{name}-",
           str(live), str(corpus)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 600)
    log = run.stderr
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    found = sorted(p.name for p in crashes.glob(f"{name}-*"))
    ok &= run.returncode == 0 and done is not None and not found
    logs.append(log[-6000:])
    return {"target": name, "runs": int(done.group(1)) if done else 0,
            "seconds": int(done.group(2)) if done else 0, "crashes": found,
            "regressions": len(regression_inputs), "ok": ok, "log": "\n".join(logs)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("targets", nargs="*", default=list(TARGETS))
    p.add_argument("--seconds", type=int, default=600)
    p.add_argument("--runs", type=int, default=-1, help="stop a target after this many executions")
    p.add_argument("--work", default=str(ROOT / "runtime_c" / "build" / "fuzz" / "campaign"))
    args = p.parse_args(argv)
    problem = clang_problem()
    if problem:
        print(f"cannot build the fuzz targets: {problem}", file=sys.stderr)
        return 2
    work = pathlib.Path(args.work)
    exes = build_targets(work / "bin", args.targets)
    seeds = write_seeds(work / "seeds", build_models(work / "models"))
    failed = False
    print("| target | executions | seconds | exec/s | crashes, leaks, hangs, OOMs | regression inputs |")
    print("|---|---|---|---|---|---|")
    for t in args.targets:
        r = run_target(exes[t], seeds[t], work / t, seeds["libs"], args.seconds, args.runs)
        rate = r["runs"] / max(r["seconds"], 1)
        print(f"| {t} | {r['runs']} | {r['seconds']} | {rate:.0f} | {len(r['crashes'])} | {r['regressions']} |",
              flush=True)
        if not r["ok"]:
            failed = True
            print(r["log"], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
