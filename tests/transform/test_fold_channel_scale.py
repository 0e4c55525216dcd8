"""fold_channel_scale: a squeeze-and-excitation gate scales the 1x1 conv's packed weight per
input channel instead of the activation (printed graph: the conv reads the unscaled activation
and a scaled weight), where the weight is the smaller; left alone where it is not, at batch 2,
and where the scaled activation has a second reader. Compiled results equal the graph
interpreter's (numpy references) at 1e-4, at 1 and 2 threads."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.graph import Constant
from kiln.transform import PassContext

from transform_helpers import assert_default_pipeline_matches, graph_module, typed


def _se_block(n=1, hw=12, out=16, second_reader=False, seed=0):
    """conv -> relu -> x * sigmoid(conv(relu(conv(mean(x))))) -> 1x1 conv to ``out`` channels."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return Constant((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype("float32"))
    w1, w2, w3, w4 = w(32, 16, 3, 3), w(8, 32, 1, 1), w(32, 8, 1, 1), w(out, 32, 1, 1)

    def body(emit, x):
        a = emit("relu", emit("conv2d", x, w1, padding=(1, 1, 1, 1)))
        g = emit("mean", a, axis=(2, 3), keepdims=True)
        g = emit("sigmoid", emit("conv2d", emit("relu", emit("conv2d", g, w2)), w3))
        y = emit("multiply", a, g)
        z = emit("conv2d", y, w4)
        return kiln.ops.call("add", z, emit("mean", y, axis=(1,), keepdims=True)) if second_reader \
            else kiln.ops.call("relu", z)
    return graph_module([typed("x", (n, 16, hw, hw))], body)


def _ops(mod):
    """(operator, input shapes) of each operator call, after the layout pass and this one."""
    pipe = kiln.get_pipeline("default", PassContext(target="llvm -mcpu=skylake-avx512"))
    names = pipe.names()
    upto = kiln.transform.Sequential([p for p in pipe if names.index(p.name) <=
                                      names.index("fold_channel_scale")], ctx=pipe.ctx)
    out = upto(mod)
    return [(b.value.op, [tuple(a.ty.static_shape()) for a in b.value.args])
            for blk in out["main"].blocks for b in blk.bindings]


def test_the_gate_scales_the_weight():
    got = _ops(_se_block())
    conv = [args for op, args in got if op == "conv2d_nchwc" and args[1][1:3] == (1, 1)][-1]
    assert ("multiply", [conv[1], (1, 1, 1, 32, 1)]) in got     # W [O/b, 1, 1, 32, b] * gate
    # no multiply of the 12 x 12 activation is left
    assert not any(op == "multiply" and args[0][2:4] == (12, 12) for op, args in got)
    assert_default_pipeline_matches(_se_block())


@pytest.mark.parametrize("case", ["weight_bigger", "batch2", "second_reader"])
def test_left_alone(case):
    mod = {"weight_bigger": _se_block(hw=3, out=16),          # 16 output channels, 9 pixels
           "batch2": _se_block(n=2),
           "second_reader": _se_block(second_reader=True)}[case]
    got = _ops(mod)
    assert any(op == "multiply" and len(args[0]) == 5 and args[0][2] > 1 for op, args in got), got
    assert_default_pipeline_matches(mod)
