"""conv1d_as_2d: 1-D convolutions with constant weights become 2-D ones of height 1, the
elementwise operators between them lifted to 4-D (printed graph), so the default pipeline
blocks their channels from conv to conv; the compiled results equal the graph interpreter's
(numpy references) at 1 and 2 threads for strides, paddings, dilations, groups, odd lengths
and channel counts the blocked conv does not take."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.transform.conv1d_as_2d import conv1d_as_2d

from transform_helpers import (attr, graph_module, inputs_for, kernels, outputs_at_threads,
                               reference, typed)


def _chain(n, c, length, o, k, strides=(1,), padding=(0, 0), dilation=(1,), groups=1, k2=3,
           seed=0):
    """relu(conv1d(x) + b) -> gelu -> conv1d (stride 2) + b2: the shape of an audio front end."""
    rng = np.random.default_rng(seed)
    w1 = Constant((rng.standard_normal((o, c // groups, k)) / np.sqrt(c * k)).astype("float32"))
    b1 = Constant(rng.standard_normal((1, o, 1)).astype("float32"))
    w2 = Constant((rng.standard_normal((o, o, k2)) / np.sqrt(o * k2)).astype("float32"))
    b2 = Constant(rng.standard_normal((o, 1)).astype("float32"))

    def body(emit, x):
        y = emit("conv1d", x, w1, strides=strides, padding=padding, dilation=dilation, groups=groups)
        y = emit("gelu", emit("relu", emit("add", y, b1)))
        y = emit("conv1d", y, w2, strides=(2,), padding=(1, 1))
        return kiln.ops.call("add", y, b2)
    return graph_module([typed("x", (n, c, length))], body)


def _ops(mod):
    return [b.value.op for blk in mod["main"].blocks for b in blk.bindings]


def test_the_chain_becomes_2d_with_one_squeeze_at_its_end():
    mod = conv1d_as_2d(PassContext())(_chain(1, 8, 100, 16, 5, strides=(2,)))
    ops = _ops(mod)
    assert "conv1d" not in ops and ops.count("conv2d") == 2
    assert ops.count("expand_dims") == 1 and ops.count("squeeze") == 1 and ops[-1] == "squeeze"
    rank = {b.var: len(b.value.ty.shape) for blk in mod["main"].blocks for b in blk.bindings}
    assert all(r == 4 for v, r in rank.items() if v is not mod["main"].blocks[0].bindings[-1].var)


def test_a_residual_input_is_expanded_once():
    """x feeds the conv and the residual add after it: one expand_dims serves both."""
    w = Constant(np.random.default_rng(1).standard_normal((8, 8, 3)).astype("float32"))

    def body(emit, x):
        y = emit("conv1d", x, w, padding=(1, 1))
        return kiln.ops.call("add", y, x)
    mod = graph_module([typed("x", (1, 8, 40))], body)
    out = conv1d_as_2d(PassContext())(mod)
    assert _ops(out).count("expand_dims") == 1 and _ops(out)[-1] == "squeeze"
    args = inputs_for(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), target="llvm"), kiln.cpu())
    np.testing.assert_allclose(vm["main"](*[kiln.nd.array(a) for a in args]).numpy(),
                               reference(mod, args), rtol=1e-4, atol=1e-4)


def test_the_default_pipeline_blocks_the_chain():
    """Both convs channel-blocked (NCHWc from one to the other), the epilogues in them."""
    out = kiln.get_pipeline("default")(_chain(1, 16, 1000, 64, 10, strides=(5,)))
    convs = [k for k in kernels(out) if "conv" in k]
    assert len(convs) == 2 and all(attr(out[k], "kiln.schedule").startswith("conv nchwc") for k in convs)


@pytest.mark.parametrize("n,c,length,o,k,strides,padding,dilation,groups", [
    (1, 1, 3000, 64, 10, (5,), (0, 0), (1,), 1),      # a wav2vec-style first conv
    (1, 16, 199, 32, 3, (1,), (1, 1), (1,), 1),       # a prime length
    (2, 8, 64, 16, 3, (2,), (2, 1), (2,), 1),         # batch 2, uneven padding, dilation
    (1, 12, 50, 12, 3, (1,), (1, 1), (1,), 1),        # 12 channels: not blocked, still right
    (1, 16, 77, 16, 5, (1,), (2, 2), (1,), 16),       # depthwise
])
def test_compiled_equals_the_reference(n, c, length, o, k, strides, padding, dilation, groups):
    mod = _chain(n, c, length, o, k, strides, padding, dilation, groups)
    args = inputs_for(mod)
    want = reference(mod, args)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), target="llvm"), kiln.cpu())
    for got in outputs_at_threads(vm, args):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_without_conv_blocking_the_convs_stay_1d():
    mod = _chain(1, 8, 100, 16, 5)
    assert _ops(conv1d_as_2d(PassContext(conv_blocking=False))(mod)).count("conv1d") == 2
