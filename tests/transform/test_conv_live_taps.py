"""conv_live_taps: a conv computes only the taps that read its input. The bands of each axis
(runs of output positions with the same live taps) against a brute-force count; the rewrite
of DeepLabV3's ASPP convs (dilation 36 -> a 1 x 1 conv, dilation 12 -> 3 x 3 bands, printed
graph); ordinary convs left alone; and the compiled results of trimmed and split convs (strides,
asymmetric padding, depthwise, a 3 x 3 over a 1 x 1 map, a band that starts inside the input)
equal the graph interpreter's (numpy references) at 1 and 2 threads, with the epilogue after."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.transform.conv_live_taps import Band, axis_plan, conv_live_taps, live_bands

from transform_helpers import assert_default_pipeline_matches, graph_module, typed


def _conv_module(c, o, hw, k, padding, dilation=1, strides=1, groups=1, seed=0, epilogue=True):
    """relu(conv(x) + b) over an ``hw`` map (an int or (h, w))."""
    h, w = (hw, hw) if isinstance(hw, int) else hw
    kh, kw = (k, k) if isinstance(k, int) else k
    rng = np.random.default_rng(seed)
    wt = Constant((rng.standard_normal((o, c // groups, kh, kw)) / np.sqrt(c * kh * kw / groups))
                  .astype("float32"))
    b = Constant(rng.standard_normal((1, o, 1, 1)).astype("float32"))

    def body(emit, x):
        y = emit("conv2d", x, wt, padding=padding, dilation=dilation, strides=strides, groups=groups)
        return emit("relu", emit("add", y, b)) if epilogue else y
    return graph_module([typed("x", (1, c, h, w))], body)


def _convs(mod):
    """(input shape, weight shape, padding, dilation) of each conv2d, in order."""
    return [(tuple(b.value.args[0].ty.static_shape()), b.value.args[1].data.shape,
             tuple(dict(b.value.attrs)["padding"]), tuple(dict(b.value.attrs)["dilation"]))
            for b in mod["main"].bindings() if getattr(b.value, "op", None) == "conv2d"]


def _ops(mod):
    return [b.value.op for b in mod["main"].bindings() if hasattr(b.value, "op")]


@pytest.mark.parametrize("size,kernel,stride,dilation,before,after", [
    (14, 3, 1, 12, 12, 12), (14, 3, 1, 36, 36, 36), (14, 3, 1, 1, 1, 1), (1, 3, 1, 1, 1, 1),
    (9, 5, 2, 3, 4, 7), (20, 3, 2, 6, 6, 6), (7, 7, 1, 2, 6, 6), (5, 3, 3, 4, 9, 0)])
def test_bands_are_the_runs_of_positions_with_the_same_live_taps(size, kernel, stride, dilation,
                                                                 before, after):
    out = (size + before + after - dilation * (kernel - 1) - 1) // stride + 1
    bands = live_bands(size, out, kernel, stride, dilation, before)
    assert bands[0].start == 0 and bands[-1].stop == out
    assert all(a.stop == b.start for a, b in zip(bands, bands[1:]))
    for band in bands:
        for o in range(band.start, band.stop):
            live = {t for t in range(kernel) if 0 <= o * stride + t * dilation - before < size}
            assert live == set(range(band.first, band.last + 1))


def test_the_plan_trims_splits_or_leaves_an_axis():
    assert axis_plan(14, 14, 3, 1, 36, 36) == [Band(0, 14, 1, 1)]          # trimmed
    assert axis_plan(14, 14, 3, 1, 12, 12) == [Band(0, 2, 1, 2), Band(2, 12, 1, 1),
                                               Band(12, 14, 0, 1)]          # 18 of 42: split
    assert axis_plan(14, 14, 3, 1, 6, 6) is None                           # 30 of 42: left
    assert axis_plan(56, 56, 3, 1, 1, 1) is None                           # an ordinary conv
    assert axis_plan(1, 1, 3, 1, 1, 1) == [Band(0, 1, 1, 1)]               # 3 x 3 on 1 x 1


def test_aspp_convs_become_a_1x1_conv_and_nine_bands():
    far = conv_live_taps(PassContext())(_conv_module(64, 32, 14, 3, (36,) * 4, dilation=36))
    assert _convs(far) == [((1, 64, 14, 14), (32, 64, 1, 1), (0, 0, 0, 0), (1, 1))]
    assert _ops(far) == ["conv2d", "add", "relu"]

    near = conv_live_taps(PassContext())(_conv_module(64, 32, 14, 3, (12,) * 4, dilation=12))
    convs = _convs(near)
    assert len(convs) == 9 and all(pad == (0, 0, 0, 0) for _, _, pad, _ in convs)
    # Row band 0 (output rows 0-1) reads input rows 0-1 and 12-13 with taps 1-2; the centre
    # band (rows and columns 2-11) is a 1 x 1 conv over input 2..11.
    assert convs[0] == ((1, 64, 14, 14), (32, 64, 2, 2), (0, 0, 0, 0), (12, 12))
    assert convs[4] == ((1, 64, 10, 10), (32, 64, 1, 1), (0, 0, 0, 0), (1, 1))
    assert _ops(near).count("concat") == 4 and _ops(near)[-2:] == ["add", "relu"]


def test_convs_that_read_their_input_everywhere_are_left_alone():
    for mod in (_conv_module(16, 16, 14, 3, (1,) * 4), _conv_module(16, 16, 14, 3, (6,) * 4, dilation=6),
                _conv_module(16, 16, 28, 5, (4,) * 4, dilation=2, groups=16)):
        assert conv_live_taps(PassContext())(mod) is mod


CASES = [
    dict(c=16, o=16, hw=14, k=3, padding=(12,) * 4, dilation=12),
    dict(c=16, o=24, hw=14, k=3, padding=(24,) * 4, dilation=24),
    dict(c=8, o=16, hw=1, k=3, padding=(1,) * 4),                                   # 1 x 1 map
    dict(c=16, o=16, hw=(9, 20), k=(3, 5), padding=(4, 20, 7, 20), dilation=(3, 10), strides=(2, 1)),
    dict(c=16, o=16, hw=14, k=5, padding=(16,) * 4, dilation=8, groups=16),          # depthwise
    dict(c=8, o=8, hw=(5, 6), k=3, padding=(9, 9, 0, 0), dilation=4, strides=3),    # reads padding
    dict(c=8, o=16, hw=(13, 5), k=(3, 1), padding=(10, 0, 10, 0), dilation=(10, 1)),   # starts inside
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_trimmed_and_split_convs_compute_the_conv(case):
    mod = _conv_module(**case)
    assert conv_live_taps(PassContext())(mod) is not mod
    assert_default_pipeline_matches(mod)


def test_the_rewrite_alone_equals_the_conv_before_it():
    from transform_helpers import inputs_for, reference
    for case in CASES:
        mod = _conv_module(**case, epilogue=False)
        args = inputs_for(mod)
        np.testing.assert_allclose(reference(conv_live_taps(PassContext())(mod), args),
                                   reference(mod, args), rtol=1e-5, atol=1e-5)
