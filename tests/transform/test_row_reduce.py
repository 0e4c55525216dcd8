"""Vectorized row reductions (``schedule_row_reduce.py``: split + ``rfactor`` into vector
partials) and the matmul register tile's rows (``layout.matmul_tile_rows``): which kernels
get them, and that the compiled kernels still match numpy."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.transform import PassContext, default_schedule, legalize
from kiln.transform.layout import matmul_tile_rows
from kiln.transform.schedule_row_reduce import row_reduce_lanes

from transform_helpers import AVX2, AVX2_CTX, attr, graph_module, kernels, typed


def _compiled(op, shape, ctx=None, **attrs):
    """The one kernel of ``op`` over an input of ``shape``, scheduled by default_schedule:
    (its description, a function numpy -> numpy running it compiled)."""
    ctx = ctx or AVX2_CTX
    x = typed("x", shape)
    mod = graph_module([x], lambda emit, x: ops.call(op, x, **attrs))
    scheduled = default_schedule(ctx)(legalize(ctx)(mod))
    (name,) = kernels(scheduled)
    func = scheduled[name]
    rt = kiln.build(kiln.IRModule({"main": func}))
    out_shape = tuple(int(s.value) for s in func.params[-1].shape)

    def run(a):
        out = kiln.nd.empty(out_shape, "float32")
        rt(kiln.nd.array(a), out)
        return out.numpy()
    return attr(func, "kiln.schedule"), run


def _softmax(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("shape", [(1, 4, 64, 64), (3, 48), (2, 5, 256)])
def test_softmax_reductions_are_vectorized(shape):
    desc, run = _compiled("softmax", shape, axis=-1)
    assert "rfactor 2 reduction(s)" in desc, desc
    a = np.random.default_rng(0).standard_normal(shape).astype("float32") * 4
    np.testing.assert_allclose(run(a), _softmax(a), rtol=1e-5, atol=1e-6)


def test_layer_norm_reductions_are_vectorized():
    x, g, b = typed("x", (2, 16, 256)), typed("g", (256,)), typed("b", (256,))
    mod = graph_module([x, g, b], lambda emit, x, g, b: ops.call("layer_norm", x, g, b))
    scheduled = default_schedule(AVX2_CTX)(legalize(AVX2_CTX)(mod))
    (name,) = kernels(scheduled)
    assert "rfactor 2 reduction(s)" in attr(scheduled[name], "kiln.schedule")
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype("float32") + 3 for s in ((2, 16, 256), (256,), (256,))]
    out = kiln.nd.empty((2, 16, 256), "float32")
    kiln.build(kiln.IRModule({"main": scheduled[name]}))(*[kiln.nd.array(a) for a in args], out)
    a = args[0]
    want = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), want * args[1] + args[2], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,axis,vectorized", [
    ((8, 64), 1, True),      # contiguous row: 16-lane partials
    ((8, 40), 1, True),      # 40 = 5 x 8: 8-lane partials
    ((8, 60), 1, False),     # no 8/16 divides 60: stays scalar (no guarded partials)
    ((64, 8), 0, False),     # a strided column: vector lanes would be gathers
])
def test_which_sums_are_vectorized(shape, axis, vectorized):
    desc, run = _compiled("sum", shape, axis=axis)
    assert ("rfactor" in desc) == vectorized, desc
    a = np.random.default_rng(2).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(run(a), a.sum(axis=axis), rtol=1e-5, atol=1e-5)


def test_option_keeps_reductions_scalar():
    desc, run = _compiled("softmax", (4, 64), PassContext(target=AVX2, vectorize_reductions=False), axis=-1)
    assert "rfactor" not in desc, desc
    a = np.random.default_rng(3).standard_normal((4, 64)).astype("float32")
    np.testing.assert_allclose(run(a), _softmax(a), rtol=1e-5, atol=1e-6)


def test_row_reduce_lanes():
    ctx = AVX2_CTX.resolved()
    assert [row_reduce_lanes(n, ctx) for n in (64, 256, 24, 40, 16, 8, 60, None)] == \
        [16, 16, 8, 8, 8, None, None, None]


@pytest.mark.parametrize("rows,nr,want", [
    (64, 16, 6),     # GPT-2's 64 tokens: 10 tiles of 6 rows + a guarded one, 12 accumulators
    (1024, 16, 6),
    (None, 16, 6),   # symbolic rows: the most accumulators
    (32, 16, 4),     # 6 would leave a 2-row tile; 8 tiles of 4 cost less
    (16, 16, 4),
    (8, 16, 4),
    (2, 16, 2),
    (64, 8, 8),      # one vector per row: 8 rows fill the FMA pipes
    (30, 12, 6),
])
def test_matmul_tile_rows(rows, nr, want):
    assert matmul_tile_rows(rows, nr, (AVX2_CTX).resolved()) == want


def test_matmul_tile_rows_within_the_accumulator_budget():
    assert matmul_tile_rows(64, 16, (PassContext(target=AVX2, tile_accumulators=8)).resolved()) == 4
    assert matmul_tile_rows(64, 16, (PassContext(target=AVX2, tile_accumulators=2)).resolved()) == 1
