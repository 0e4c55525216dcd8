"""Regenerate expected_failures.txt: run every ONNX backend node test through KilnBackend in
worker processes and write the failing ones, grouped by op, with a short reason.

    python tests/onnx/regen_expected_failures.py            # all node tests (~1.5 min, 2 cores)
    python tests/onnx/regen_expected_failures.py --dry-run  # print the counts only
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import os
import re
import sys
import time

import numpy as np
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import _normalize_tensor

from kiln.frontend.onnx.backend import KilnBackend

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = []


def run_one(i):
    case = CASES[i]
    res = "pass"
    try:
        rep = KilnBackend.prepare(case.model)
        for ins, outs in case.data_sets:
            ins = [_normalize_tensor(x) for x in ins]
            outs = [_normalize_tensor(x) for x in outs]
            got = rep.run(ins)
            if len(got) != len(outs):
                raise AssertionError(f"{len(got)} outputs vs {len(outs)}")
            for g, o in zip(got, outs):
                if g.dtype != o.dtype:
                    raise AssertionError(f"dtype {g.dtype} vs {o.dtype}")
                np.testing.assert_allclose(g, o, rtol=case.rtol, atol=case.atol)
    except Exception as e:  # noqa: BLE001 - every failure is recorded with its reason
        res = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return case.name, res


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


def main():
    CASES[:] = load_model_tests(kind="node")
    t0 = time.time()
    with mp.Pool(int(os.environ.get("NPROC", os.cpu_count() or 2)), maxtasksperchild=50) as pool:
        results = dict(pool.imap_unordered(run_one, range(len(CASES)), chunksize=1))
    by_name = {c.name: c for c in CASES}
    groups = collections.defaultdict(list)
    for name, res in sorted(results.items()):
        if res != "pass":
            op, reason = reason_and_op(by_name[name], res)
            groups[op].append((name, reason))
    nfail = sum(len(v) for v in groups.values())
    print(f"{len(results) - nfail}/{len(results)} pass in {time.time() - t0:.0f}s")
    if "--dry-run" in sys.argv:
        return
    with open(os.path.join(HERE, "expected_failures.txt"), "w") as f:
        f.write("# ONNX backend node tests that fail through Kiln today, grouped by op: `test_name: reason`.\n"
                "# tests/onnx/test_onnx_backend.py marks each xfail(strict=True); take a test off this list\n"
                "# when it starts passing. Regenerate: python tests/onnx/regen_expected_failures.py\n")
        for op in sorted(groups):
            f.write(f"\n## {op}\n")
            for name, reason in groups[op]:
                f.write(f"{name}: {reason}\n")


if __name__ == "__main__":
    main()
