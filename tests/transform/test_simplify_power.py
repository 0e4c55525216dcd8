"""simplify_power: power by a constant 2, 3, -1 or 0.5 becomes multiplies, divide or sqrt (printed
graph); other exponents, a run-time exponent, mixed exponents and an exponent that broadcasts
the base are left; the compiled results equal numpy's power at 1 and 2 threads; an RMSNorm
kernel (x.pow(2).mean()) calls no powf."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.transform.simplify_power import simplify_power

from transform_helpers import assert_default_pipeline_matches, graph_module, typed


def _power(exponent, shape=(4, 33), base_shape=None):
    e = exponent if not isinstance(exponent, (int, float, np.ndarray)) else \
        Constant(np.asarray(exponent, dtype="float32"))

    def body(emit, x):
        return kiln.ops.call("power", x, e)
    return graph_module([typed("x", base_shape or shape)], body)


def _ops(mod):
    return [(b.value.op, [type(a).__name__ for a in b.value.args])
            for b in mod["main"].bindings() if hasattr(b.value, "op")]


@pytest.mark.parametrize("exponent,want", [
    (2.0, [("multiply", ["GraphVar", "GraphVar"])]),
    (np.full((1, 33), 2.0), [("multiply", ["GraphVar", "GraphVar"])]),    # one value, broadcast
    (0.5, [("sqrt", ["GraphVar"])]),
    (3.0, [("multiply", ["GraphVar", "GraphVar"]), ("multiply", ["GraphVar", "GraphVar"])]),
    (-1.0, [("divide", ["Constant", "GraphVar"])]),
])
def test_constant_exponents_become_cheaper_operators(exponent, want):
    assert _ops(simplify_power(PassContext())(_power(exponent))) == want


@pytest.mark.parametrize("mod", [
    _power(4.0), _power(-0.5), _power(np.array([2.0, 3.0] * 16 + [2.0])),
    _power(np.full((5, 4, 33), 2.0)),                   # broadcasts the base to (5, 4, 33)
])
def test_other_exponents_are_left(mod):
    assert simplify_power(PassContext())(mod) is mod


def test_a_run_time_exponent_is_left():
    def body(emit, x, e):
        return kiln.ops.call("power", x, e)
    mod = graph_module([typed("x", (4, 8)), typed("e", ())], body)
    assert simplify_power(PassContext())(mod) is mod


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0])
def test_compiled_results_equal_numpy_power(exponent):
    mod = _power(exponent, shape=(8, 50))
    assert_default_pipeline_matches(mod, rtol=1e-6, atol=1e-6)


def test_rms_norm_calls_no_powf():
    """x * rsqrt(mean(x ** 2) + eps), a LLaMA-style RMSNorm: its kernels call no pow."""
    eps = Constant(np.asarray(1e-6, dtype="float32"))
    two = Constant(np.asarray(2.0, dtype="float32"))

    def body(emit, x):
        ms = emit("mean", emit("power", x, two), axis=(2,), keepdims=True)
        return kiln.ops.call("divide", x, emit("sqrt", emit("add", ms, eps)))
    mod = graph_module([typed("x", (1, 64, 256))], body)
    out = kiln.get_pipeline("default")(mod)
    assert "pow" not in "".join(f.script() for f in out.functions.values() if hasattr(f, "script"))
    assert_default_pipeline_matches(mod)
