"""The ONNX backend node tests (onnx.backend.test.BackendTest) run through Kiln.

``kiln.frontend.onnx.backend.KilnBackend`` imports each model with ``from_onnx``, compiles it
with the ``default`` pipeline and runs the compiled code on the VM. Only the *node* tests are
collected (the model-zoo, "simple" and PyTorch categories are not).

``expected_failures.txt`` (next to this file) lists every node test that fails today, grouped
by op, each with a short reason; they are marked ``xfail(strict=True)``, so a newly passing
test fails the run until it is taken off the list: the passing set can only grow.
``test_pass_ratio`` prints the pass ratio and asserts the floor.
"""
from __future__ import annotations

import os

import pytest

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402

from kiln.frontend.onnx.backend import KilnBackend  # noqa: E402

HERE = os.path.dirname(__file__)
MIN_PASS_RATIO = 0.77


def load_expected_failures(path=os.path.join(HERE, "expected_failures.txt")):
    """``test_name: reason`` lines; ``#`` starts a comment (``## Op`` headers group them)."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(":")
            out[name.strip()] = reason.strip() or "expected failure"
    return out


EXPECTED_FAILURES = load_expected_failures()

backend_test = onnx.backend.test.BackendTest(KilnBackend, __name__)
_cases = backend_test.test_cases
OnnxBackendNodeModelTest = _cases["OnnxBackendNodeModelTest"]

NODE_TESTS = sorted(n[:-len("_cpu")] for n in dir(OnnxBackendNodeModelTest)
                    if n.startswith("test_") and n.endswith("_cpu"))

# BackendTest also generates a _cuda twin of every test, which a CPU backend can only skip; drop
# them so that the skips reported are real ones.
for _name in [n for n in dir(OnnxBackendNodeModelTest) if n.startswith("test_") and n.endswith("_cuda")]:
    delattr(OnnxBackendNodeModelTest, _name)

# Node tests that take far longer than the rest (10 s and more on two busy cores, against a
# fraction of a second): `make test-fast` (-m "not slow") leaves them out.
SLOW_NODE_TESTS = {
    "test_gridsample_bicubic", "test_gridsample_bicubic_align_corners_0_additional_1",
    "test_gridsample_bicubic_align_corners_1_additional_1",
    "test_gridsample_volumetric_bilinear_align_corners_0",
    "test_gridsample_volumetric_bilinear_align_corners_1",
}

for _name in NODE_TESTS:
    _attr = _name + "_cpu"
    if _name in EXPECTED_FAILURES:
        setattr(OnnxBackendNodeModelTest, _attr,
                pytest.mark.xfail(strict=True, reason=EXPECTED_FAILURES[_name])(
                    getattr(OnnxBackendNodeModelTest, _attr)))
    if _name in SLOW_NODE_TESTS:
        setattr(OnnxBackendNodeModelTest, _attr, pytest.mark.slow(getattr(OnnxBackendNodeModelTest, _attr)))


def test_expected_failures_name_real_tests():
    unknown = sorted(set(EXPECTED_FAILURES) - set(NODE_TESTS))
    assert not unknown, f"expected_failures.txt names tests that do not exist: {unknown[:10]}"
    unknown = sorted(SLOW_NODE_TESTS - set(NODE_TESTS))
    assert not unknown, f"SLOW_NODE_TESTS names tests that do not exist: {unknown}"


def test_pass_ratio():
    total = len(NODE_TESTS)
    passing = total - len(set(EXPECTED_FAILURES) & set(NODE_TESTS))
    ratio = passing / total
    print(f"\nONNX backend node tests: {passing}/{total} pass ({ratio:.1%}); "
          f"{total - passing} expected failures")
    assert ratio >= MIN_PASS_RATIO, f"{passing}/{total} = {ratio:.1%} < {MIN_PASS_RATIO:.0%}"
