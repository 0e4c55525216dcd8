"""flatten_matmul_rows: a channels-last pointwise layer (x[1, H, W, C] @ W) runs as one product
over the H x W rows, its elementwise epilogue and a last-axis layer norm before it on the rows
too (printed graph); products of many rows each, batched weights and other norms are left as
they are; a squeeze-and-excitation block's one-pixel 1x1 conv runs as a linear; the compiled
results equal the graph interpreter's (numpy references) at 1 and 2 threads."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.graph import Constant
from kiln.transform import PassContext
from kiln.transform.flatten_matmul_rows import flatten_matmul_rows

from transform_helpers import assert_default_pipeline_matches, attr, graph_module, kernels, typed


def _block(h, w, c, hidden, seed=0, norm_axes=(-1,)):
    """ConvNeXt's pointwise half: layer_norm(C) -> linear C->4C -> GELU -> linear 4C->C ->
    layer scale, plus the residual, over a channels-last map."""
    rng = np.random.default_rng(seed)

    def const(*shape, scale=1.0):
        return Constant((rng.standard_normal(shape) * scale).astype("float32"))
    g, beta = const(c), const(c)
    w1, b1 = const(c, hidden, scale=c ** -0.5), const(hidden)
    w2, b2 = const(hidden, c, scale=hidden ** -0.5), const(c)
    gamma = const(1, 1, 1, c)

    def body(emit, x):
        y = emit("layer_norm", x, g, beta, axes=norm_axes) if norm_axes == (-1,) else x
        y = emit("gelu", emit("add", emit("matmul", y, w1), b1))
        y = emit("multiply", emit("add", emit("matmul", y, w2), b2), gamma)
        return kiln.ops.call("add", y, x)
    return graph_module([typed("x", (1, h, w, c))], body)


def _bindings(mod):
    return [(b.value.op, tuple(b.value.ty.static_shape())) for blk in mod["main"].blocks
            for b in blk.bindings]


def test_the_block_runs_on_rows_with_one_reshape_each_way():
    out = flatten_matmul_rows(PassContext())(_block(7, 7, 32, 128))
    got = _bindings(out)
    assert got == [("reshape", (49, 32)), ("layer_norm", (49, 32)),
                   ("matmul", (49, 128)), ("add", (49, 128)), ("gelu", (49, 128)),
                   ("matmul", (49, 32)), ("add", (49, 32)), ("multiply", (49, 32)),
                   ("add", (49, 32)), ("reshape", (1, 7, 7, 32))]


def test_products_of_many_rows_and_batched_weights_are_left():
    rng = np.random.default_rng(1)
    w2 = Constant(rng.standard_normal((16, 8)).astype("float32"))
    w3 = Constant(rng.standard_normal((4, 16, 8)).astype("float32"))
    many = graph_module([typed("x", (2, 64, 16))], lambda emit, x: kiln.ops.call("matmul", x, w2))
    batched = graph_module([typed("x", (4, 7, 16))], lambda emit, x: kiln.ops.call("matmul", x, w3))
    single = graph_module([typed("x", (1, 7, 16))], lambda emit, x: kiln.ops.call("matmul", x, w2))
    for mod in (many, batched, single):
        assert _bindings(flatten_matmul_rows(PassContext())(mod)) == _bindings(mod)


def test_a_norm_over_other_axes_stays_and_an_epilogue_broadcast_stops_the_rows():
    """A norm over (H, W, C) is not a row norm: the product reads its output reshaped. An add
    of a [1, H, 1, C] tensor broadcasts along more than the last axis: it reads the product
    reshaped back."""
    rng = np.random.default_rng(2)
    w = Constant(rng.standard_normal((16, 8)).astype("float32"))
    g = Constant(np.ones((7, 7, 16), "float32"))
    row = Constant(rng.standard_normal((1, 7, 1, 8)).astype("float32"))

    def body(emit, x):
        y = emit("layer_norm", x, g, g, axes=(1, 2, 3))
        return kiln.ops.call("add", emit("matmul", y, w), row)
    got = _bindings(flatten_matmul_rows(PassContext())(graph_module([typed("x", (1, 7, 7, 16))], body)))
    assert got == [("layer_norm", (1, 7, 7, 16)), ("reshape", (49, 16)), ("matmul", (49, 8)),
                   ("reshape", (1, 7, 7, 8)), ("add", (1, 7, 7, 8))]


def test_the_pipeline_makes_one_kernel_per_product():
    out = kiln.get_pipeline("default")(_block(14, 14, 32, 128))
    products = [k for k in kernels(out) if "matmul" in k]
    assert len(products) == 2
    assert all(attr(out[k], "kiln.schedule").startswith("matmul") for k in products)
    assert all(tuple(int(d.value) for d in out[k].params[0].shape) in ((196, 32), (196, 128))
               for k in products)


@pytest.mark.parametrize("h,w,c,hidden", [(7, 7, 32, 128), (14, 14, 48, 96), (3, 5, 16, 40)])
def test_compiled_equals_the_reference(h, w, c, hidden):
    assert_default_pipeline_matches(_block(h, w, c, hidden, seed=h))


def _squeeze_excite(c, squeezed, batch=1, seed=1):
    """A squeeze-and-excitation block: global pool, 1x1 conv c -> squeezed + bias + relu, 1x1
    conv squeezed -> c + sigmoid, times the input."""
    rng = np.random.default_rng(seed)
    w1 = Constant((rng.standard_normal((squeezed, c, 1, 1)) / np.sqrt(c)).astype("float32"))
    b1 = Constant(rng.standard_normal((1, squeezed, 1, 1)).astype("float32"))
    w2 = Constant((rng.standard_normal((c, squeezed, 1, 1)) / np.sqrt(squeezed)).astype("float32"))

    def body(emit, x):
        p = emit("mean", x, axis=(2, 3), keepdims=True)
        s = emit("relu", emit("add", emit("conv2d", p, w1), b1))
        return kiln.ops.call("multiply", x, emit("sigmoid", emit("conv2d", s, w2)))
    return graph_module([typed("x", (batch, c, 7, 7))], body)


def test_a_one_pixel_conv_runs_as_a_linear_with_its_epilogue_on_rows():
    # RegNetY-400MF's squeeze: 440 -> 110 channels (no 8 divides 110); its expand, 110 -> 440,
    # stays a conv (a channel-blocked one takes it)
    got = _bindings(flatten_matmul_rows(PassContext())(_squeeze_excite(440, 110)))
    assert got == [("mean", (1, 440, 1, 1)), ("reshape", (1, 440)), ("linear", (1, 110)),
                   ("add", (1, 110)), ("relu", (1, 110)), ("reshape", (1, 110, 1, 1)),
                   ("conv2d", (1, 440, 1, 1)), ("sigmoid", (1, 440, 1, 1)),
                   ("multiply", (1, 440, 7, 7))]
    out = kiln.get_pipeline("default")(_squeeze_excite(440, 110))
    linear = [k for k in kernels(out) if "linear" in k]
    assert linear == ["fused_linear_add_relu"], kernels(out)
    assert attr(out[linear[0]], "kiln.schedule").startswith("matmul: tile")


@pytest.mark.parametrize("c,squeezed,batch", [(440, 110, 1), (96, 12, 2), (40, 10, 1)])
def test_one_pixel_convs_equal_the_reference(c, squeezed, batch):
    assert_default_pipeline_matches(_squeeze_excite(c, squeezed, batch))


def test_one_pixel_convs_that_blocks_take_or_with_more_pixels_are_left():
    # 48 output channels: a channel-blocked conv takes it; a 2 x 2 pool output is no pixel
    mod = _squeeze_excite(96, 48)
    assert _bindings(flatten_matmul_rows(PassContext())(mod)) == _bindings(mod)
    rng = np.random.default_rng(2)
    w = Constant(rng.standard_normal((10, 16, 1, 1)).astype("float32"))
    mod = graph_module([typed("x", (1, 16, 2, 2))], lambda emit, x: kiln.ops.call("conv2d", x, w))
    assert _bindings(flatten_matmul_rows(PassContext())(mod)) == _bindings(mod)
