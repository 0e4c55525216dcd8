"""pad_conv_channels: a conv whose output channels no vector width divides (1000 on AVX-512, 255
anywhere) computes them padded with zero channels to whole vectors, runs its bias and
activation on them too, and slices the padding off after those (printed graph), also before a
grouped conv; counts the width divides, paddings of more than an eighth and convs that feed a
channel-blocked chain are left; the compiled results equal the graph interpreter's (numpy
references) at 1 and 2 threads."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.transform.pad_conv_channels import pad_conv_channels

from transform_helpers import AVX2, assert_default_pipeline_matches, attr, graph_module, kernels, typed

AVX512 = "llvm -mcpu=skylake-avx512"


def _head(c, o, hw=13, k=1, then_conv=False, seed=0):
    """relu(conv(x) + b), the classifier of a SqueezeNet, optionally followed by another conv."""
    rng = np.random.default_rng(seed)
    w = Constant((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype("float32"))
    b = Constant(rng.standard_normal((1, o, 1, 1)).astype("float32"))
    w2 = Constant((rng.standard_normal((16, o, 1, 1)) / np.sqrt(o)).astype("float32"))

    def body(emit, x):
        y = emit("relu", emit("add", emit("conv2d", x, w, padding=(k // 2,) * 4), b))
        return kiln.ops.call("conv2d", y, w2) if then_conv else kiln.ops.call("mean", y, axis=(2, 3))
    return graph_module([typed("x", (1, c, hw, hw))], body)


def _bindings(mod):
    return [(b.value.op, tuple(b.value.ty.static_shape())) for blk in mod["main"].blocks
            for b in blk.bindings]


def test_1000_channels_are_computed_as_1008_on_avx512_and_sliced():
    out = pad_conv_channels(PassContext(target=AVX512))(_head(64, 1000))
    # The bias and the relu run on the padded channels (one kernel with the conv); the slice
    # comes after them.
    assert _bindings(out)[:4] == [("conv2d", (1, 1008, 13, 13)), ("add", (1, 1008, 13, 13)),
                                  ("relu", (1, 1008, 13, 13)), ("strided_slice", (1, 1000, 13, 13))]
    bindings = out["main"].blocks[0].bindings
    w, b = bindings[0].value.args[1].data, bindings[1].value.args[1].data
    assert w.shape == (1008, 64, 1, 1) and not w[1000:].any()
    assert b.shape == (1, 1008, 1, 1) and not b[:, 1000:].any()


def test_the_chain_stops_at_a_second_reader_or_a_tensor_operand():
    rng = np.random.default_rng(5)
    w = Constant(rng.standard_normal((116, 32, 1, 1)).astype("float32"))
    g = Constant(rng.standard_normal((116, 1, 3, 3)).astype("float32"))
    scale = Constant(rng.standard_normal((116, 1, 1)).astype("float32"))   # a 3-D per-channel one

    def body(emit, x, r):
        y = emit("multiply", emit("conv2d", x, w), scale)
        z = emit("relu", emit("add", y, r))          # r: a tensor, not a constant
        dw = emit("conv2d", z, g, padding=(1, 1, 1, 1), groups=116)
        return kiln.ops.call("add", dw, y)           # y read twice: the chain ends before
    mod = graph_module([typed("x", (1, 32, 14, 14)), typed("r", (1, 116, 14, 14))], body)
    got = _bindings(pad_conv_channels(PassContext(target=AVX512))(mod))
    assert got[:3] == [("conv2d", (1, 128, 14, 14)), ("multiply", (1, 128, 14, 14)),
                       ("strided_slice", (1, 116, 14, 14))], got
    assert_default_pipeline_matches(mod)


def test_what_is_left_alone():
    for mod, target in [(_head(64, 1000), AVX2),          # 8 lanes divide 1000
                        (_head(64, 40), AVX512),          # 48 would be a fifth more
                        (_head(64, 3), AVX512),           # 16 would be five times as many
                        (_head(64, 1000, then_conv=True), AVX512)]:   # a blocked chain
        assert _bindings(pad_conv_channels(PassContext(target=target))(mod)) == _bindings(mod)


@pytest.mark.parametrize("o,target,padded", [(9, AVX512, 16), (9, AVX2, 16), (20, AVX512, 32),
                                              (12, AVX2, 16)])
def test_a_count_8_does_not_divide_is_padded_up_to_double(o, target, padded):
    """ESPCN's 32 -> 9 channel conv before its pixel shuffle: unblocked, or in blocks of 4,
    without the padding."""
    out = pad_conv_channels(PassContext(target=target))(_head(32, o, hw=20, k=3))
    assert _bindings(out)[0] == ("conv2d", (1, padded, 20, 20))


def test_a_conv_feeding_a_grouped_conv_is_padded():
    """A grouped conv (RegNet's, groups of 8 channels) reads NCHW anyway: the conv before it
    pads. So does one before a depthwise conv over a count 8 does not divide (ShuffleNet's 116)."""
    rng = np.random.default_rng(4)
    for o, groups, width in [(104, 13, 8), (116, 116, 1)]:
        w = Constant(rng.standard_normal((o, 32, 1, 1)).astype("float32"))
        g = Constant(rng.standard_normal((o, width, 3, 3)).astype("float32"))

        def body(emit, x, w=w, g=g, groups=groups):
            y = emit("relu", emit("conv2d", x, w))
            return kiln.ops.call("conv2d", y, g, padding=(1, 1, 1, 1), groups=groups)
        mod = graph_module([typed("x", (1, 32, 14, 14))], body)
        got = _bindings(pad_conv_channels(PassContext(target=AVX512))(mod))
        padded = 112 if o == 104 else 128
        assert got[:3] == [("conv2d", (1, padded, 14, 14)), ("relu", (1, padded, 14, 14)),
                           ("strided_slice", (1, o, 14, 14))], got
        assert_default_pipeline_matches(mod)
        # Compiled, the slice of the padded channels is a view (executable/views.py): the
        # kernels are the conv with its relu and the grouped conv.
        ex = kiln.compile(kiln.get_pipeline("default", PassContext(target=AVX512))(mod), AVX512)
        assert len(ex.spec.kernels) == 2, ex.spec.kernels


def test_the_padded_conv_is_blocked_in_whole_vectors():
    out = kiln.get_pipeline("default", PassContext(target=AVX512))(_head(64, 1000))
    (conv,) = [k for k in kernels(out) if "conv" in k]
    assert attr(out[conv], "kiln.schedule").startswith("conv nchwc: tile")
    assert tuple(int(d.value) for d in out[conv].params[1].shape)[-1] == 16


@pytest.mark.parametrize("c,o,hw,k", [(64, 255, 13, 1), (32, 255, 9, 3), (48, 1000, 7, 1),
                                      (32, 9, 12, 3)])
def test_compiled_equals_the_reference(c, o, hw, k):
    assert_default_pipeline_matches(_head(c, o, hw, k, seed=o + k))


def _conv_into_concat(o, seed=6):
    """relu(conv(x)) concatenated with another input of ``o`` channels, then a conv."""
    rng = np.random.default_rng(seed)
    w = Constant((rng.standard_normal((o, 32, 1, 1)) / np.sqrt(32)).astype("float32"))
    w2 = Constant((rng.standard_normal((16, 2 * o, 1, 1)) / np.sqrt(2 * o)).astype("float32"))

    def body(emit, x, other):
        y = emit("relu", emit("conv2d", x, w))
        return kiln.ops.call("conv2d", emit("concat", other, y, axis=1), w2)
    return graph_module([typed("x", (1, 32, 14, 14)), typed("other", (1, o, 14, 14))], body)


def test_a_conv_feeding_a_concat_left_nchw_is_padded():
    """ShuffleNetV2's branches end in a 116-channel conv concatenated with 116 channels: the
    layout pass leaves that concat NCHW (8 does not divide 116), so the conv pads to 128. A
    concat of 72-channel parts is blocked (in 8-channel blocks): the conv before it is not."""
    got = _bindings(pad_conv_channels(PassContext(target=AVX512))(_conv_into_concat(116)))
    assert got[:3] == [("conv2d", (1, 128, 14, 14)), ("relu", (1, 128, 14, 14)),
                       ("strided_slice", (1, 116, 14, 14))], got
    assert_default_pipeline_matches(_conv_into_concat(116))
    mod = _conv_into_concat(72)
    assert _bindings(pad_conv_channels(PassContext(target=AVX512))(mod)) == _bindings(mod)
