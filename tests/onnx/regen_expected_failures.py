"""Regenerate expected_failures.txt: run every ONNX backend node test through KilnBackend in
worker processes and write the failing ones, grouped by op, with a short reason.

    python tests/onnx/regen_expected_failures.py            # all node tests (~1.5 min, 2 cores)
    python tests/onnx/regen_expected_failures.py --dry-run  # print the counts only
    python tests/onnx/regen_expected_failures.py --runtime --dry-run
    python tests/onnx/regen_expected_failures.py --runtime  # rewrite runtime_passing.txt

``--runtime`` runs them the way ONNX's own runner gives a backend its inputs, every one at run
time (``KilnRuntimeBackend``: nothing frozen into the compiled code, nothing specialised), and
counts the tests that pass so, and, of those, the ones that fail only that way, grouped by op
with the reason. Without ``--dry-run`` it rewrites ``runtime_passing.txt``, the list
test_onnx_backend.py runs the run-time way. Either mode also counts the passing tests whose
executables have no kernel at all (every output computed at import).

Neither list changes silently for the worse: a test that newly fails (one not in
expected_failures.txt, or one in runtime_passing.txt that no longer passes the run-time way) is
printed as a regression and the file is left as it is, unless ``--accept-regressions``.
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import os
import re
import sys
import time

from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner, _normalize_tensor

from kiln.frontend.onnx.backend import KilnBackend, KilnRuntimeBackend

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED_FAILURES = os.path.join(HERE, "expected_failures.txt")
RUNTIME_PASSING = os.path.join(HERE, "runtime_passing.txt")
CASES = []
BACKEND = [KilnBackend]


def run_one(i):
    """``(test name, "pass" or the failure, kind)``: kind "no kernel" when no executable the test
    compiled has a kernel, "import" when moreover no run-time argument was passed (every
    output computed at import), else None."""
    case = CASES[i]
    res = "pass"
    kind = None
    try:
        rep = BACKEND[0].prepare(case.model)
        for ins, outs in case.data_sets:
            # compared as the ONNX runner (and so test_onnx_backend.py) compares them: sequence
            # outputs element by element, bfloat16 within two of its ulps
            Runner.assert_similar_outputs([_normalize_tensor(x) for x in outs],
                                          list(rep.run([_normalize_tensor(x) for x in ins])),
                                          rtol=case.rtol, atol=case.atol, model_dir=case.name)
        if not any(rep.kernel_counts):
            kind = "import" if rep.num_args == 0 else "no kernel"
    except Exception as e:  # noqa: BLE001 - every failure is recorded with its reason
        res = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return case.name, res, kind


def reason_and_op(case, res):
    m = re.search(r"\((\w+), opset \d+\): (.*)", res)
    if m:
        op, reason = m.group(1), m.group(2)
    else:
        nodes = case.model.graph.node
        op = nodes[0].op_type if len(nodes) == 1 else re.sub(r"^test_", "", case.name).split("_")[0]
        reason = res.replace("ONNXImportError: ", "")
        if reason.startswith("AssertionError"):
            reason = "numerical mismatch beyond the test's rtol/atol"
    reason = re.sub(r" \(Kiln has [^)]*\)", " (not a Kiln dtype)", reason.replace("\n", " "))
    reason = re.sub(r"\(an initializer, a Constant or a foldable shape computation\)", "at compile time", reason)
    return op, reason[:160]


def read_reasons(path):
    """``{test name: reason}`` of a list file (``name`` or ``name: reason`` lines, ``#``
    comments); the reason is "" where a line gives none."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {name.strip(): reason.strip() for name, _, reason in
                (ln.partition(":") for ln in f if ln.strip() and not ln.startswith("#"))}


def read_names(path):
    """The test names of a list file."""
    return set(read_reasons(path))


def group_failures(results, by_name):
    """``{op: [(name, reason)]}`` of the failing tests in ``results``."""
    groups = collections.defaultdict(list)
    for name, res in sorted(results.items()):
        if res != "pass":
            op, reason = reason_and_op(by_name[name], res)
            groups[op].append((name, reason))
    return groups


def refuse_regressions(new_failures, what):
    """Print the tests that newly fail; True when the file must be left as it is."""
    if not new_failures:
        return False
    print(f"{len(new_failures)} regression(s): tests that {what}:")
    for name, reason in new_failures:
        print(f"  {name}: {reason}")
    if "--accept-regressions" in sys.argv:
        return False
    print("not rewriting the list (--accept-regressions to record them)")
    return True


def write_runtime(results, groups, passing):
    """Print why tests fail the run-time way; rewrite runtime_passing.txt unless --dry-run."""
    frozen_only = read_names(EXPECTED_FAILURES)
    only_runtime = {op: [(n, r) for n, r in v if n not in frozen_only] for op, v in groups.items()}
    only_runtime = {op: v for op, v in only_runtime.items() if v}
    n = sum(len(v) for v in only_runtime.values())
    print(f"{n} tests pass the frozen way (KilnBackend) but not the run-time way; by op:")
    for op in sorted(only_runtime, key=lambda o: (-len(only_runtime[o]), o)):
        reasons = collections.Counter(r for _, r in only_runtime[op])
        print(f"  {op} ({len(only_runtime[op])}): " + "; ".join(
            f"{r} [x{c}]" if c > 1 else r for r, c in reasons.most_common(3)))
    if "--dry-run" in sys.argv:
        return
    lost = sorted(read_names(RUNTIME_PASSING) - passing)
    if refuse_regressions([(name, results.get(name, "not a node test")) for name in lost],
                          "runtime_passing.txt lists but that fail the run-time way"):
        sys.exit(1)
    with open(RUNTIME_PASSING, "w") as f:
        f.write("# ONNX backend node tests that pass with every graph input given at run time\n"
                "# (KilnRuntimeBackend: nothing frozen into the compiled code, nothing specialised).\n"
                "# test_onnx_backend.py runs these the run-time way. Regenerate:\n"
                "# python tests/onnx/regen_expected_failures.py --runtime\n")
        for name in sorted(passing):
            f.write(name + "\n")


def main():
    CASES[:] = load_model_tests(kind="node")
    runtime = "--runtime" in sys.argv
    BACKEND[0] = KilnRuntimeBackend if runtime else KilnBackend
    t0 = time.time()
    with mp.Pool(int(os.environ.get("NPROC", os.cpu_count() or 2)), maxtasksperchild=50) as pool:
        rows = list(pool.imap_unordered(run_one, range(len(CASES)), chunksize=1))
    results = {name: res for name, res, _ in rows}
    no_kernel = sorted(name for name, res, kind in rows if res == "pass" and kind)
    at_import = sorted(name for name, res, kind in rows if res == "pass" and kind == "import")
    by_name = {c.name: c for c in CASES}
    groups = group_failures(results, by_name)
    nfail = sum(len(v) for v in groups.values())
    way = "the run-time way (every input given at run time)" if runtime else "(shape-like inputs frozen)"
    print(f"{len(results) - nfail}/{len(results)} pass {way} in {time.time() - t0:.0f}s; "
          f"{len(no_kernel)} of them compile to no kernel, {len(at_import)} of those take no run-time "
          f"input either (every output computed at import)")
    if "--verbose" in sys.argv:
        print("  computed at import: " + ", ".join(at_import))
        print("  no kernel, inputs passed through: " + ", ".join(sorted(set(no_kernel) - set(at_import))))
    if runtime:
        write_runtime(results, groups, {n for n, r in results.items() if r == "pass"})
        return
    if "--dry-run" in sys.argv:
        return
    # A test still failing keeps the reason written for it (often a hand-written explanation of
    # why, which says more than the exception's first line).
    known = read_reasons(EXPECTED_FAILURES)
    groups = {op: [(n, known.get(n) or r) for n, r in v] for op, v in groups.items()}
    if refuse_regressions([(n, r) for v in groups.values() for n, r in v if n not in known],
                          "fail but are not in expected_failures.txt"):
        sys.exit(1)
    with open(EXPECTED_FAILURES, "w") as f:
        f.write("# ONNX backend node tests that fail through Kiln today, grouped by op: `test_name: reason`.\n"
                "# tests/onnx/test_onnx_backend.py marks each xfail(strict=True); take a test off this list\n"
                "# when it starts passing. Regenerate: python tests/onnx/regen_expected_failures.py\n")
        for op in sorted(groups):
            f.write(f"\n## {op}\n")
            for name, reason in groups[op]:
                f.write(f"{name}: {reason}\n")


if __name__ == "__main__":
    main()
