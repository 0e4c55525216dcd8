"""The ONNX backend node tests (onnx.backend.test.BackendTest) run through Kiln.

``kiln.frontend.onnx.backend.KilnBackend`` imports each model with ``from_onnx``, compiles it
with the ``default`` pipeline and runs the compiled code on the VM. Only the *node* tests are
collected (the model-zoo, "simple" and PyTorch categories are not).

``expected_failures.txt`` (next to this file) lists every node test that fails today, grouped
by op, each with a short reason; they are marked ``xfail(strict=True)``, so a newly passing
test fails the run until it is taken off the list: the passing set can only grow.
``test_pass_ratio`` prints the pass ratio and asserts the floor.

``runtime_passing.txt`` lists the node tests that also pass with every input given at run
time, as ONNX's own runner gives them (``prepare(model, runtime_inputs=True)``: no input frozen
into the compiled code as a constant, no sequence structure specialised); those tests run that
way here, so one that stops passing the run-time way fails the run, and
``test_runtime_pass_count`` asserts the list's floor. ``regen_expected_failures.py --runtime``
counts them over every node test and rewrites the list.
"""
from __future__ import annotations

import functools
import os

import pytest

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402

import node_cases  # noqa: E402
from kiln.frontend.onnx.backend import KilnBackend  # noqa: E402

HERE = os.path.dirname(__file__)
MIN_PASS_RATIO = 0.97
# runtime_passing.txt may grow, never shrink below this (the count when it was last raised)
MIN_RUNTIME_PASSING = 1545


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
RUNTIME_PASSING = set(load_expected_failures(os.path.join(HERE, "runtime_passing.txt")))


def the_runtime_way(test):
    """The backend test ``test`` run with every input given at run time: the runner hands its
    keyword arguments to ``KilnBackend.prepare``."""
    @functools.wraps(test)
    def run(self, *args, **kwargs):
        return test(self, *args, runtime_inputs=True, **kwargs)
    return run


node_cases.install()  # the node cases are built once, not once per pytest worker
backend_test = onnx.backend.test.BackendTest(KilnBackend, __name__)
_cases = backend_test.test_cases
OnnxBackendNodeModelTest = _cases["OnnxBackendNodeModelTest"]

NODE_TESTS = sorted(n[:-len("_cpu")] for n in dir(OnnxBackendNodeModelTest)
                    if n.startswith("test_") and n.endswith("_cpu"))

# BackendTest also generates a _cuda twin of every test, which a CPU backend can only skip; drop
# them so that the skips reported are real ones.
for _name in [n for n in dir(OnnxBackendNodeModelTest) if n.startswith("test_") and n.endswith("_cuda")]:
    delattr(OnnxBackendNodeModelTest, _name)

for _name in NODE_TESTS:
    _attr = _name + "_cpu"
    if _name in RUNTIME_PASSING:
        setattr(OnnxBackendNodeModelTest, _attr, the_runtime_way(getattr(OnnxBackendNodeModelTest, _attr)))
    if _name in EXPECTED_FAILURES:
        setattr(OnnxBackendNodeModelTest, _attr,
                pytest.mark.xfail(strict=True, reason=EXPECTED_FAILURES[_name])(
                    getattr(OnnxBackendNodeModelTest, _attr)))


def test_expected_failures_name_real_tests():
    unknown = sorted(set(EXPECTED_FAILURES) - set(NODE_TESTS))
    assert not unknown, f"expected_failures.txt names tests that do not exist: {unknown[:10]}"
    unknown = sorted(RUNTIME_PASSING - set(NODE_TESTS))
    assert not unknown, f"runtime_passing.txt names tests that do not exist: {unknown[:10]}"
    both = sorted(RUNTIME_PASSING & set(EXPECTED_FAILURES))
    assert not both, f"tests both in runtime_passing.txt and expected_failures.txt: {both[:10]}"


def test_pass_ratio():
    total = len(NODE_TESTS)
    passing = total - len(set(EXPECTED_FAILURES) & set(NODE_TESTS))
    ratio = passing / total
    print(f"\nONNX backend node tests: {passing}/{total} pass ({ratio:.1%}); "
          f"{total - passing} expected failures")
    assert ratio >= MIN_PASS_RATIO, f"{passing}/{total} = {ratio:.1%} < {MIN_PASS_RATIO:.0%}"


def test_runtime_pass_count():
    total = len(NODE_TESTS)
    passing = len(RUNTIME_PASSING & set(NODE_TESTS))
    print(f"\nONNX backend node tests passing with every input given at run time: {passing}/{total} "
          f"({passing / total:.1%})")
    assert passing >= MIN_RUNTIME_PASSING, (
        f"runtime_passing.txt lists {passing} tests, fewer than the floor {MIN_RUNTIME_PASSING}")
