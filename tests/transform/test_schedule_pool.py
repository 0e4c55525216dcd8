"""The pool schedule (``schedule_pool.py``): window loops outside the vectorized output columns,
the padded columns split off by lowering (``partition_selects``), stride-2 taps read with
contiguous loads and shuffles (codegen); checked against the numpy references at 1e-5."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.lower import lower_prim_func

from transform_helpers import AVX2_CTX, attr, graph_module, kernels, reference, run_vm, typed

CASES = [
    ("max_pool2d", (1, 8, 112, 112), {"pool_size": 3, "strides": 2, "padding": 1}),   # ResNet-18
    ("max_pool2d", (2, 3, 17, 19), {"pool_size": 3, "strides": 1, "padding": 1}),
    ("max_pool2d", (1, 4, 23, 30), {"pool_size": (2, 3), "strides": (2, 3), "padding": (0, 1, 1, 2),
                                    "ceil_mode": True}),
    ("max_pool2d", (1, 2, 20, 21), {"pool_size": (3, 3), "strides": (1, 2), "dilation": (2, 2),
                                    "padding": (2, 2)}),
    ("max_pool2d", (1, 2, 16, 16), {"pool_size": 2}),
    ("avg_pool2d", (1, 4, 21, 21), {"pool_size": 3, "strides": 2, "padding": 1}),
    ("avg_pool2d", (1, 4, 21, 21), {"pool_size": 3, "strides": 2, "padding": 1, "count_include_pad": True}),
]


@pytest.mark.parametrize("op,shape,attrs", CASES)
def test_pool_schedule_matches_numpy(op, shape, attrs):
    mod = graph_module([typed("x", shape)], lambda emit, x: ops.call(op, x, **attrs))
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith("pool: "), attr(out[name], "kiln.schedule")
    args = [np.random.default_rng(1).standard_normal(shape).astype("float32")]
    np.testing.assert_allclose(run_vm(out, args), reference(mod, args), rtol=1e-5, atol=1e-5)


def test_padded_columns_are_split_off():
    """56 output columns, k3 s2 p1: only column 0 has a tap in the padding; columns 1..55 run
    without the column condition (the row condition, the same for all lanes, stays)."""
    mod = graph_module([typed("x", (1, 8, 112, 112))], lambda emit, x: ops.call(
        "max_pool2d", x, pool_size=3, strides=2, padding=1))
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    text = lower_prim_func(out[name]).script()
    assert "T.vectorized(1):" in text and "T.vectorized(1, 56):" in text, text
    middle = text.split("T.vectorized(1, 56):")[1]
    assert "xx * 2 + rx - 1 >= 0" not in middle, middle
