"""The channel-blocked operators (``ops/nchwc.py``): layout_transform, conv2d_nchwc,
depthwise_conv2d_nchwc, max/avg_pool2d_nchwc. Each te definition against its numpy reference
(``check_op``), and each reference against the NCHW operator it stands for."""
import numpy as np
import pytest

from kiln import ops
from kiln.ops.nchwc import (from_blocked, pack_conv_weight, pack_depthwise_weight, parse_layout,
                            to_blocked, unpack_conv_weight)
from kiln.ops.registry import OpError
from kiln.ir.graph import GraphVar, TensorType


def _ref(name, *args, **attrs):
    return ops.get(name).reference(*args, **attrs)


def test_layouts_round_trip(rand):
    x = rand((2, 24, 5, 3))
    for b in (1, 4, 8, 24):
        assert np.array_equal(from_blocked(to_blocked(x, b)), x)
    assert to_blocked(x, 8)[1, 2, 3, 1, 5] == x[1, 2 * 8 + 5, 3, 1]
    w = rand((32, 8, 3, 1))
    assert np.array_equal(unpack_conv_weight(pack_conv_weight(w, 16)), w)
    assert parse_layout("t", "NCHW") is None and parse_layout("t", "NCHW16c") == 16


@pytest.mark.parametrize("shape,src,dst", [
    ((2, 16, 3, 5), "NCHW", "NCHW8c"),
    ((1, 24, 7, 7, 8), "NCHW8c", "NCHW"),
    ((1, 2, 3, 3, 16), "NCHW16c", "NCHW8c"),
    ((1, 4, 1, 1, 8), "NCHW8c", "NCHW32c"),
    ((1, 12, 2, 2), "NCHW", "NCHW4c"),
])
def test_layout_transform(shape, src, dst, check_op, rand):
    x = rand(shape)
    check_op("layout_transform", [x], {"src": src, "dst": dst})
    got = _ref("layout_transform", x, src=src, dst=dst)
    nchw = from_blocked(x) if len(shape) == 5 else x
    assert np.array_equal(from_blocked(got) if dst != "NCHW" else got, nchw)


def test_layout_transform_checks_its_input():
    x = GraphVar("x", TensorType((1, 12, 4, 4), "float32"))
    with pytest.raises(OpError, match="12 channels do not split into blocks of 8"):
        ops.call("layout_transform", x, src="NCHW", dst="NCHW8c")
    with pytest.raises(OpError, match="is not 'NCHW' or 'NCHW<b>c'"):
        ops.call("layout_transform", x, src="NHWC", dst="NCHW4c")
    y = GraphVar("y", TensorType((1, 3, 4, 4, 4), "float32"))
    with pytest.raises(OpError, match="is not NCHW8c"):
        ops.call("layout_transform", y, src="NCHW8c", dst="NCHW")


# (input shape NCHW, weight OIHW, attrs, input block or None, output block or None)
CONVS = [
    ((1, 8, 6, 5), (16, 8, 3, 3), {"padding": (1, 1)}, 8, 16),
    ((2, 16, 7, 7), (8, 16, 1, 1), {}, 4, 8),                           # batch 2, 7 x 7
    ((1, 3, 9, 9), (8, 3, 3, 3), {"padding": (1, 1), "strides": (2, 2)}, None, 8),
    ((1, 16, 5, 5), (16, 16, 3, 3), {"padding": (0, 1, 2, 1), "dilation": (2, 1)}, 16, None),
    ((1, 8, 1, 1), (16, 8, 1, 1), {}, 8, 16),                           # 1 x 1 spatial
    # grouped: 4 groups of 8, a group's lanes of one 16-channel input block
    ((1, 32, 6, 6), (32, 8, 3, 3), {"padding": (1, 1), "groups": 4}, 16, 8),
    # 2 groups of 16: a group's two 8-channel input blocks; output blocks of 8 within a group
    ((2, 32, 5, 5), (32, 16, 3, 3), {"padding": (1, 1), "strides": (2, 2), "groups": 2}, 8, 8),
    ((1, 32, 5, 5), (16, 16, 1, 1), {"groups": 2}, None, 8),            # an NCHW input
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,bi,bo", CONVS)
def test_conv2d_nchwc(x_shape, w_shape, attrs, bi, bo, check_op, rand):
    x, w = rand(x_shape, seed=1), rand(w_shape, seed=2)
    xb = to_blocked(x, bi) if bi else x
    wp = pack_conv_weight(w, bo or 8)
    layout = f"NCHW{bo}c" if bo else "NCHW"
    want = _ref("conv2d", x, w, **attrs)
    got = _ref("conv2d_nchwc", xb, wp, out_layout=layout, **attrs)
    np.testing.assert_allclose(from_blocked(got) if bo else got, want, rtol=1e-5, atol=1e-5)
    check_op("conv2d_nchwc", [xb, wp], dict(attrs, out_layout=layout), rtol=1e-4, atol=1e-4)


def test_conv2d_nchwc_checks_the_weight_block():
    x = GraphVar("x", TensorType((1, 8, 4, 4), "float32"))
    w = GraphVar("w", TensorType((1, 3, 3, 8, 16), "float32"))
    with pytest.raises(OpError, match="does not match the weight's block of 16"):
        ops.call("conv2d_nchwc", x, w, out_layout="NCHW8c")


def test_conv2d_nchwc_checks_the_groups_against_the_blocks():
    x = GraphVar("x", TensorType((1, 64, 4, 4), "float32"))
    w = GraphVar("w", TensorType((4, 3, 3, 8, 16), "float32"))      # 64 outputs in blocks of 16
    with pytest.raises(OpError, match="a block of 16 output channels must lie in one group of 8"):
        ops.call("conv2d_nchwc", x, w, groups=8)
    xb = GraphVar("x", TensorType((1, 12, 4, 4, 16), "float32"))    # 192 channels, blocks of 16
    w = GraphVar("w", TensorType((8, 3, 3, 24, 8), "float32"))      # groups of 24 inputs
    with pytest.raises(OpError, match="24 input channels and the input's blocks of 16 do not nest"):
        ops.call("conv2d_nchwc", xb, w, groups=8)


@pytest.mark.parametrize("x_shape,attrs,b", [
    ((1, 16, 7, 7), {"padding": (1, 1)}, 8),
    ((1, 16, 9, 8), {"padding": (1, 1), "strides": (2, 2)}, 16),
    ((2, 8, 5, 6), {"padding": (2, 2), "strides": (2, 1)}, 4),           # 5x5 kernel below
    ((1, 8, 1, 1), {"padding": (1, 1)}, 8),                              # 1 x 1 spatial
    ((1, 8, 6, 6), {}, 8),                                               # no padding
    ((1, 8, 9, 9), {"padding": (2, 2), "dilation": (2, 2)}, 8),          # dilated, 3x3
])
def test_depthwise_conv2d_nchwc(x_shape, attrs, b, check_op, rand):
    c = x_shape[1]
    k = 5 if attrs.get("padding") == (2, 2) and "dilation" not in attrs else 3
    x, w = rand(x_shape, seed=3), rand((c, 1, k, k), seed=4)
    want = _ref("conv2d", x, w, groups=c, **attrs)
    xb, wp = to_blocked(x, b), pack_depthwise_weight(w, b)
    np.testing.assert_allclose(from_blocked(_ref("depthwise_conv2d_nchwc", xb, wp, **attrs)), want,
                               rtol=1e-5, atol=1e-5)
    check_op("depthwise_conv2d_nchwc", [xb, wp], attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,attrs", [
    ("max_pool2d", {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)}),
    ("max_pool2d", {"pool_size": (2, 2), "ceil_mode": True}),
    ("avg_pool2d", {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)}),
    ("avg_pool2d", {"pool_size": (3, 3), "padding": (1, 1), "count_include_pad": True}),
    ("avg_pool2d", {"pool_size": (2, 2)}),
])
def test_pools_nchwc(op, attrs, check_op, rand):
    x = rand((1, 16, 7, 7), seed=5)
    want = _ref(op, x, **attrs)
    xb = to_blocked(x, 8)
    np.testing.assert_allclose(from_blocked(_ref(f"{op}_nchwc", xb, **attrs)), want, rtol=1e-6)
    check_op(f"{op}_nchwc", [xb], attrs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b", [8, 16])
def test_winograd_transforms_read_and_write_blocked(b, check_op, rand):
    """winograd_input of an NCHW[b]c input and winograd_output with layout='NCHW<b>c': the
    NCHW transforms' results, re-laid out."""
    x = rand((1, 16, 6, 7), seed=6)
    attrs = {"padding": (1, 1, 1, 1), "tile": 2}
    want = _ref("winograd_input", x, **attrs)
    np.testing.assert_array_equal(_ref("winograd_input", to_blocked(x, b), **attrs), want)
    check_op("winograd_input", [to_blocked(x, b)], attrs, rtol=1e-5, atol=1e-4)
    m = rand((4, 4, 12, 16), seed=7)
    attrs = {"out_size": (6, 7), "tile": 2}
    want = _ref("winograd_output", m, **attrs)
    got = _ref("winograd_output", m, layout=f"NCHW{b}c", **attrs)
    np.testing.assert_array_equal(from_blocked(got), want)
    check_op("winograd_output", [m], dict(attrs, layout=f"NCHW{b}c"), rtol=1e-5, atol=1e-4)
