"""NN operators (kiln/ops/nn.py) against numpy, through check_op: conv1d/conv2d (groups,
depthwise, dilation, strides, asymmetric padding), max/avg pooling (padding, ceil_mode,
count_include_pad), adaptive average pooling, resize2d."""
import numpy as np
import pytest

from kiln import ops
from kiln.ir import Block, collect



def _blocks(func):
    return [b.name_hint for b in collect(func.body, Block) if b.name_hint != "root"]


# ---- conv ----------------------------------------------------------------------------------

@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 3, 6, 6), (4, 3, 3, 3), {}),
    ((2, 2, 5, 6), (3, 2, 3, 2), {"padding": (1, 0, 2, 1)}),                 # asymmetric padding
    ((1, 2, 7, 7), (2, 2, 3, 3), {"strides": (2, 2), "padding": (1, 1, 1, 1)}),
    ((1, 2, 7, 8), (2, 2, 3, 3), {"dilation": (2, 1), "padding": (2, 2, 2, 2)}),
    ((1, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": 1}),
    ((1, 3, 5, 5), (3, 1, 3, 3), {"groups": 3, "padding": (1, 1)}),          # depthwise
    ((1, 2, 4, 4), (4, 1, 3, 3), {"groups": 2, "strides": 2, "padding": 1}),  # channel multiplier 2
    ((1, 3, 4, 4), (2, 3, 1, 1), {}),                                        # 1x1
])
def test_conv2d(check_op, xs, ws, attrs, rand):
    check_op("conv2d", [rand(xs, seed=1), rand(ws, seed=2)], attrs, rtol=1e-4, atol=1e-4)


def test_conv2d_structure(check_op, rand):
    """Padding is its own block; the conv block reduces over (rc, ry, rx)."""
    func = check_op("conv2d", [rand((1, 2, 4, 4)), rand((2, 2, 3, 3))], {"padding": (1, 1, 1, 1)},
                    rtol=1e-4, atol=1e-4)
    assert _blocks(func) == ["conv2d_pad", "conv2d"]
    conv = [b for b in collect(func.body, Block) if b.name_hint == "conv2d"][0]
    assert [iv.var.name for iv in conv.iter_vars if iv.kind == "reduce"] == ["vrc", "vry", "vrx"]
    func = check_op("conv2d", [rand((1, 2, 4, 4)), rand((2, 2, 3, 3))], {}, rtol=1e-4, atol=1e-4)
    assert _blocks(func) == ["conv2d"]


def test_float16_accumulates_in_float32(check_op, rand):
    func = check_op("conv2d", [rand((1, 4, 5, 5), "float16"), rand((2, 4, 3, 3), "float16")], {"padding": 1})
    assert _blocks(func) == ["conv2d_pad", "conv2d_acc", "conv2d"]
    check_op("avg_pool2d", [rand((1, 2, 6, 6), "float16")], {"pool_size": 3, "padding": 1, "strides": 2})
    check_op("adaptive_avg_pool2d", [rand((1, 2, 7, 7), "float16")], {"output_size": 3})


def test_conv2d_float64(check_op, rand):
    check_op("conv2d", [rand((1, 2, 4, 4), "float64"), rand((2, 2, 2, 2), "float64")], {"strides": (1, 2)})


@pytest.mark.parametrize("xs,ws,attrs", [
    ((2, 3, 8), (4, 3, 3), {}),
    ((1, 2, 9), (2, 2, 3), {"strides": 2, "padding": (1, 2), "dilation": 2}),
    ((1, 4, 6), (4, 1, 3), {"groups": 4, "padding": 1}),
])
def test_conv1d(check_op, xs, ws, attrs, rand):
    check_op("conv1d", [rand(xs, seed=1), rand(ws, seed=2)], attrs, rtol=1e-4, atol=1e-4)


def test_conv2d_symbolic_batch(check_op_symbolic):
    check_op_symbolic("conv2d", [("n", 2, 5, 5), (3, 2, 3, 3)], attrs={"padding": 1},
                      expect_shape=("n", 3, 5, 5), sizes=({"n": 1}, {"n": 3}), rtol=1e-4, atol=1e-4)


def test_conv_errors(op_error, typed):
    with op_error("conv2d: input (1, 4, 5, 5) has 4 channels but weight (2, 3, 3, 3) with groups=1 expects 3"):
        ops.call("conv2d", typed((1, 4, 5, 5)), typed((2, 3, 3, 3), name="w"))
    with op_error("conv2d: 3 output channels (weight (3, 2, 3, 3)) do not divide into groups=2"):
        ops.call("conv2d", typed((1, 4, 5, 5)), typed((3, 2, 3, 3), name="w"), groups=2)
    with op_error("conv2d: kernel extent 5 (size 3, dilation 2) is larger than the padded input extent 4"):
        ops.call("conv2d", typed((1, 1, 4, 4)), typed((1, 1, 3, 3), name="w"), dilation=2)
    with op_error("conv2d: expects a 4-D input and weight (NCHW/OIHW), got (1, 4, 5) and (2, 4, 3, 3)"):
        ops.call("conv2d", typed((1, 4, 5)), typed((2, 4, 3, 3), name="w"))
    with op_error("conv1d: padding= needs 1, 1 or 2 values, got (1, 1, 1)"):
        ops.call("conv1d", typed((1, 4, 5)), typed((2, 4, 3), name="w"), padding=(1, 1, 1))
    with op_error("conv2d: input dtype float32 and weight dtype float16 differ"):
        ops.call("conv2d", typed((1, 1, 4, 4)), typed((1, 1, 3, 3), "float16", name="w"))


# ---- pooling -------------------------------------------------------------------------------

POOL_CASES = [
    ((1, 2, 6, 6), {"pool_size": (2, 2)}),
    ((1, 2, 7, 7), {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    ((2, 1, 7, 6), {"pool_size": (3, 2), "strides": (2, 2), "ceil_mode": True}),
    ((1, 1, 6, 6), {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True}),
    ((1, 2, 8, 7), {"pool_size": (2, 3), "strides": (1, 2), "dilation": (2, 1), "padding": (1, 0, 0, 1)}),
]


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
def test_max_pool2d(check_op, shape, attrs, rand):
    check_op("max_pool2d", [rand(shape)], attrs)


def test_max_pool2d_padding_never_selected(check_op, rand):
    x = -np.abs(rand((1, 1, 4, 4))) - 1.0                     # all negative: a 0 pad would win
    check_op("max_pool2d", [x], {"pool_size": 3, "strides": 1, "padding": 1})


def test_max_pool2d_int(check_op, rand):
    check_op("max_pool2d", [rand((1, 2, 5, 5), "int32", -50, 50)], {"pool_size": 2, "padding": 1, "ceil_mode": True})


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
@pytest.mark.parametrize("include", [False, True])
def test_avg_pool2d(check_op, shape, attrs, include, rand):
    check_op("avg_pool2d", [rand(shape)], dict(attrs, count_include_pad=include))


def test_avg_pool2d_matches_torch_counting():
    """count_include_pad=True divides by the window clipped to the padded input (PyTorch)."""
    x = np.ones((1, 1, 5, 5), "float32")
    ref = ops.get("avg_pool2d").reference
    out = ref(x, pool_size=3, strides=2, padding=1, ceil_mode=True, count_include_pad=True)
    # torch.nn.functional.avg_pool2d(ones(1,1,5,5), 3, 2, 1, ceil_mode=True, count_include_pad=True)
    np.testing.assert_allclose(out[0, 0], [[4 / 9, 6 / 9, 4 / 9], [6 / 9, 1, 6 / 9], [4 / 9, 6 / 9, 4 / 9]], rtol=1e-6)
    assert (ref(x, pool_size=3, strides=2, padding=1, ceil_mode=True) == 1).all()


def test_pool_symbolic_batch(check_op_symbolic):
    check_op_symbolic("max_pool2d", [("n", 2, 6, 6)], attrs={"pool_size": 3, "strides": 2, "padding": 1},
                      expect_shape=("n", 2, 3, 3), sizes=({"n": 1}, {"n": 2}))


def test_pool_errors(op_error, typed):
    with op_error("max_pool2d: expects a 4-D NCHW input, got (2, 6, 6)"):
        ops.call("max_pool2d", typed((2, 6, 6)), pool_size=2)
    with op_error("max_pool2d: attribute pool_size= is required"):
        ops.call("max_pool2d", typed((1, 2, 6, 6)))
    with op_error("avg_pool2d: pool window extent 5 (size 5, dilation 1) is larger than the padded input extent 4"):
        ops.call("avg_pool2d", typed((1, 1, 4, 4)), pool_size=5)
    with op_error("avg_pool2d: input dtype int32 is not supported"):
        ops.call("avg_pool2d", typed((1, 1, 4, 4), "int32"), pool_size=2)


@pytest.mark.parametrize("shape,size", [((1, 2, 6, 6), (3, 3)), ((2, 1, 7, 5), (3, 2)), ((1, 2, 5, 5), 1),
                                        ((1, 1, 4, 6), (4, None)), ((1, 1, 3, 3), (5, 4))])
def test_adaptive_avg_pool2d(check_op, shape, size, rand):
    check_op("adaptive_avg_pool2d", [rand(shape)], {"output_size": size})


def test_adaptive_bins_are_pytorchs():
    x = np.arange(7, dtype="float32").reshape(1, 1, 1, 7)
    out = ops.get("adaptive_avg_pool2d").reference(x, output_size=(1, 3))
    # bins [0, 3), [2, 5), [4, 7)
    np.testing.assert_allclose(out[0, 0, 0], [1, 3, 5])


# ---- resize2d ------------------------------------------------------------------------------

MODES = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rounding", ["round_prefer_floor", "floor", "round_prefer_ceil", "ceil"])
@pytest.mark.parametrize("size", [(8, 6), (3, 2), (1, 1)])
def test_resize2d_nearest(check_op, mode, rounding, size, rand):
    check_op("resize2d", [rand((1, 2, 4, 3))],
             {"size": size, "method": "nearest", "coordinate_transformation_mode": mode, "rounding_method": rounding})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [(8, 6), (3, 2), (1, 1), (4, 3)])
def test_resize2d_linear(check_op, mode, size, rand):
    check_op("resize2d", [rand((1, 2, 4, 3))],
             {"size": size, "method": "linear", "coordinate_transformation_mode": mode})


@pytest.mark.parametrize("method", ["nearest", "linear"])
@pytest.mark.parametrize("size", [(8, 6), (3, 5)])
def test_resize2d_of_a_channel_blocked_input(check_op, method, size, rand):
    """NCHW[b]c (5-D): each pixel's block of channels moves together; the reference blocks the
    NCHW result again."""
    check_op("resize2d", [rand((1, 2, 4, 3, 8))], {"size": size, "method": method})
    x = rand((1, 2, 4, 3, 8))
    blocked = ops.get("resize2d").reference(x, size=size, method=method)
    plain = ops.get("resize2d").reference(x.transpose(0, 1, 4, 2, 3).reshape(1, 16, 4, 3), size=size,
                                           method=method)
    np.testing.assert_array_equal(blocked.transpose(0, 1, 4, 2, 3).reshape(plain.shape), plain)


def test_resize2d_known_values():
    ref = ops.get("resize2d").reference
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], "float32")
    # ONNX Resize test "upsample_nearest" (scales 2, 3; asymmetric, floor in the spec example)
    np.testing.assert_array_equal(ref(x, size=(4, 6), coordinate_transformation_mode="asymmetric",
                                      rounding_method="floor")[0, 0],
                                  [[1, 1, 1, 2, 2, 2]] * 2 + [[3, 3, 3, 4, 4, 4]] * 2)
    # half_pixel bilinear 2x2 -> 4x4 (torch interpolate align_corners=False)
    out = ref(x, size=(4, 4), method="linear")
    np.testing.assert_allclose(out[0, 0, 0], [1.0, 1.25, 1.75, 2.0])
    np.testing.assert_allclose(out[0, 0, :, 0], [1.0, 1.5, 2.5, 3.0])


def test_resize2d_int_nearest(check_op, rand):
    check_op("resize2d", [rand((1, 1, 3, 3), "uint8", 0, 200)], {"size": (5, 7)})


def test_resize2d_errors(op_error, typed):
    with op_error("resize2d: method='cubic' is not supported; expected one of nearest, linear"):
        ops.call("resize2d", typed((1, 1, 4, 4)), size=(2, 2), method="cubic")
    with op_error("resize2d: input dtype int32 is not supported"):
        ops.call("resize2d", typed((1, 1, 4, 4), "int32"), size=(2, 2), method="linear")


def test_resize2d_symbolic_batch(check_op_symbolic):
    check_op_symbolic("resize2d", [("n", 1, 3, 4)], attrs={"size": (6, 5), "method": "linear"},
                      expect_shape=("n", 1, 6, 5))


# ---- the references agree with PyTorch / the ONNX reference implementation ------------------

def test_references_match_torch(rand):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    t = torch.from_numpy
    x, w = rand((2, 4, 7, 6), seed=5), rand((6, 2, 3, 2), seed=6)
    conv = ops.get("conv2d").reference(x, w, strides=(2, 1), padding=(1, 2, 1, 2), dilation=(1, 2), groups=2)
    np.testing.assert_allclose(conv, F.conv2d(t(x), t(w), None, (2, 1), (1, 2), (1, 2), 2).numpy(), rtol=1e-5, atol=1e-5)
    x1, w1 = rand((1, 4, 9)), rand((4, 1, 3))
    np.testing.assert_allclose(ops.get("conv1d").reference(x1, w1, strides=2, padding=(2, 2), dilation=2, groups=4),
                               F.conv1d(t(x1), t(w1), None, 2, 2, 2, 4).numpy(), rtol=1e-5, atol=1e-5)
    for k, s, p, d, cm in [(3, 2, 1, 1, True), (2, 2, 0, 1, True), (3, 1, 1, 2, False), (2, 3, 1, 1, True)]:
        got = ops.get("max_pool2d").reference(x, pool_size=k, strides=s, padding=p, dilation=d, ceil_mode=cm)
        np.testing.assert_array_equal(got, F.max_pool2d(t(x), k, s, p, d, ceil_mode=cm).numpy())
        if d == 1:
            for inc in (False, True):
                got = ops.get("avg_pool2d").reference(x, pool_size=k, strides=s, padding=p, ceil_mode=cm,
                                                      count_include_pad=inc)
                want = F.avg_pool2d(t(x), k, s, p, ceil_mode=cm, count_include_pad=inc).numpy()
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for size in [(3, 4), (5, 2), (1, 1), (7, 6)]:
        np.testing.assert_allclose(ops.get("adaptive_avg_pool2d").reference(x, output_size=size),
                                   F.adaptive_avg_pool2d(t(x), size).numpy(), rtol=1e-6, atol=1e-6)
    resize = ops.get("resize2d").reference
    for size in [(14, 9), (3, 4), (1, 1), (5, 13)]:
        np.testing.assert_array_equal(resize(x, size=size, coordinate_transformation_mode="asymmetric",
                                             rounding_method="floor"),
                                      F.interpolate(t(x), size=size, mode="nearest").numpy())
        for ac in (False, True):
            # torch's align_corners=False is ONNX half_pixel (ONNX's pytorch_half_pixel differs
            # from torch itself at output size 1, where ONNX picks coordinate 0).
            mode = "align_corners" if ac else "half_pixel"
            np.testing.assert_allclose(resize(x, size=size, method="linear", coordinate_transformation_mode=mode),
                                       F.interpolate(t(x), size=size, mode="bilinear", align_corners=ac).numpy(),
                                       rtol=1e-5, atol=1e-5)


def test_resize_reference_matches_onnx(rand):
    pytest.importorskip("onnx")
    from onnx import helper, TensorProto
    from onnx.reference import ReferenceEvaluator
    x = rand((1, 2, 5, 4), seed=9)
    for size in [(9, 7), (3, 2), (10, 8)]:
        for mode in MODES:
            for method, rounding in [("nearest", "round_prefer_floor"), ("nearest", "round_prefer_ceil"),
                                     ("nearest", "floor"), ("nearest", "ceil"), ("linear", "floor")]:
                node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=method,
                                        coordinate_transformation_mode=mode, nearest_mode=rounding)
                graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                                        helper.make_tensor_value_info("sizes", TensorProto.INT64, (4,))],
                                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
                want = ReferenceEvaluator(helper.make_model(graph)).run(
                    None, {"x": x, "sizes": np.array((1, 2) + size, "int64")})[0]
                got = ops.get("resize2d").reference(x, size=size, method=method,
                                                    coordinate_transformation_mode=mode, rounding_method=rounding)
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{size} {mode} {method} {rounding}")


@pytest.mark.parametrize("name,types,attrs", [
    ("conv2d", [(1, 4, 5, 5), (4, 1, 3, 3)], {"padding": 1, "groups": 4}),
    ("conv1d", [(1, 2, 5), (3, 2, 3)], {"padding": 1}),
    ("max_pool2d", [(1, 2, 6, 6)], {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True}),
    ("avg_pool2d", [(1, 2, 6, 6)], {"pool_size": 3, "strides": 2, "padding": 1}),
    ("adaptive_avg_pool2d", [(1, 2, 7, 7)], {"output_size": 3}),
    ("resize2d", [(1, 2, 3, 3)], {"size": (5, 5), "method": "linear"}),
])
def test_prim_funcs_are_well_formed_and_round_trip(name, types, attrs):
    import kiln
    from kiln.ir import IRModule, structural_equal, verify
    from kiln.ir.graph import TensorType
    types = [TensorType(t) for t in types]
    func = _prim_func(name, types, attrs)
    verify(func)
    mod = IRModule({"main": func})
    assert structural_equal(kiln.script.parse(mod.script()), mod)


def _prim_func(name, types, attrs):
    """The PrimFunc of one call (placeholders -> compute or tir), outputs last."""
    from kiln import te
    from kiln.ir.graph import GraphVar
    from kiln.ops.common import placeholders
    op = ops.get(name)
    call = ops.call(name, *[GraphVar(f"x{i}", t) for i, t in enumerate(types)], **attrs)
    if op.tir is not None:
        return op.tir(list(types), dict(call.attrs), call.ty)
    phs = placeholders(types)
    outs = op.compute(phs, dict(call.attrs))
    return te.create_prim_func(phs + (list(outs) if isinstance(outs, (list, tuple)) else [outs]))
