"""conv2d computed channel-blocked (NCHW[x]c): the plan (``conv_blocked.py``), the te program
(``ops/conv_nchwc.py``), the epilogue regrouping (``block_iter.py``), the schedule
(``schedule_conv.py``) and the weight packing (``layout.py``), checked against numpy."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir.graph import Constant
from kiln.script import T
from kiln.transform import PassContext
from kiln.transform.block_iter import BlockIterError, fuse_block_iter, split_block_iter
from kiln.transform.conv_blocked import channel_blocks, conv_tile, pixel_tile, tile_plan
from kiln.transform.layout import pack_array

from transform_helpers import AVX2, AVX2_CTX, attr, check_same_results, graph_module, kernels, reference, run_vm, typed


def _conv_model(x_shape, w_shape, seed=0, **attrs):
    """relu(conv2d(x, w) + b) with a constant weight and per-channel bias."""
    rng = np.random.default_rng(seed)
    w = Constant(rng.standard_normal(w_shape).astype("float32"))
    b = Constant(rng.standard_normal((1, w_shape[0], 1, 1)).astype("float32"))
    return graph_module([typed("x", x_shape)], lambda emit, x: ops.call(
        "relu", emit("add", emit("conv2d", x, w, **attrs), b)))


def _compile_and_check(mod, x_shape, ctx=None, target=AVX2):
    """The "default" pipeline for ``target``, compiled and run against the numpy references
    at 1e-4."""
    out = kiln.get_pipeline("default", ctx, target=target)(mod)
    args = [np.random.default_rng(7).standard_normal(x_shape).astype("float32")]
    (name,) = kernels(out)
    np.testing.assert_allclose(run_vm(out, args, target=target), reference(mod, args),
                               rtol=1e-4, atol=1e-4)
    return out, name


# (x shape, weight shape, attrs, the schedule it gets)
CASES = [
    ((1, 16, 12, 12), (32, 16, 3, 3), {"padding": (1, 1)}, "conv nchwc: tile 6x16"),
    ((1, 16, 11, 11), (16, 16, 3, 3), {"padding": (1, 1), "strides": (2, 2)}, "conv nchwc: tile 6x16"),
    ((1, 3, 23, 23), (16, 3, 7, 7), {"padding": (3, 3), "strides": (2, 2)}, "conv nchwc: tile 6x16"),
    ((2, 5, 9, 10), (24, 5, 3, 3), {"padding": (0, 1, 2, 1)}, "conv nchwc: tile 10x8"),   # bn 8
    # short rows: tiles over the image's flat pixels (7 x 7 = 9 x 5 + 4, 13 x 13 = 28 x 6 + 1)
    ((1, 8, 7, 7), (40, 8, 3, 3), {"padding": (2, 2), "dilation": (2, 2)}, "conv nchwc: tile 10x8 flat"),
    ((1, 16, 13, 13), (16, 16, 3, 3), {"padding": (1, 1)}, "conv nchwc: tile 6x16 flat"),
    ((1, 96, 7, 7), (32, 96, 1, 1), {}, "conv nchwc: tile 5x16 flat"),
    ((2, 16, 14, 14), (24, 16, 3, 3), {"padding": (1, 1)}, "conv nchwc: tile 4x24 flat"),   # batch 2
    ((2, 24, 13, 13), (48, 24, 3, 3), {"padding": (1, 1), "strides": (2, 2)},
     "conv nchwc: tile 5x16 flat"),                                                          # 7 x 7
    ((1, 20, 9, 7), (16, 20, 1, 1), {}, "conv nchwc: tile 6x16 flat"),                      # 63 = 10 x 6 + 3
    # small 1x1: the input read through an NHWC copy (checked below)
    ((2, 20, 5, 7), (24, 20, 1, 1), {}, "conv nchwc: tile 4x24 flat"),
    ((1, 40, 7, 7), (48, 40, 1, 1), {}, "conv nchwc: tile 5x16 flat"),
    # depthwise: NCHW at any stride (stride-2 lanes are loads + shuffles, faster than repacking)
    ((1, 24, 9, 9), (24, 1, 3, 3), {"padding": (1, 1), "strides": (2, 2), "groups": 24}, "conv: "),
    ((1, 32, 9, 9), (32, 1, 3, 3), {"padding": (1, 1), "strides": (2, 2), "groups": 32}, "conv: "),
    ((1, 16, 14, 14), (16, 1, 5, 5), {"padding": (2, 2), "strides": (2, 2), "groups": 16}, "conv: "),
    ((1, 16, 28, 28), (32, 16, 3, 3), {"padding": (1, 1)}, "conv nchwc: tile 6x16"),   # 4x6+4
    # grouped, groups of 8 or more channels: a block of output channels per group or within one
    # (RegNet's groups of 8; 2 groups of 32 in blocks of 8; a small grouped 1x1 read NHWC)
    ((1, 64, 14, 14), (64, 8, 3, 3), {"padding": (1, 1), "groups": 8}, "conv nchwc: tile 11x8 flat"),
    ((1, 48, 15, 15), (48, 8, 3, 3), {"padding": (1, 1), "strides": (2, 2), "groups": 6},
     "conv nchwc: tile 8x8"),
    ((2, 32, 9, 9), (64, 16, 3, 3), {"padding": (1, 1), "groups": 2}, "conv nchwc: tile 9x8"),
    ((1, 64, 7, 7), (32, 32, 1, 1), {"groups": 2}, "conv nchwc: tile 5x16 flat"),
    # NCHW: output channels not a multiple of 8, grouped, unit-stride depthwise / short
    # reduction on a wide image
    ((1, 8, 10, 10), (3, 8, 3, 3), {"padding": (1, 1)}, "conv: "),   # (12 would be padded to 16)
    ((1, 16, 8, 8), (16, 4, 3, 3), {"padding": (1, 1), "groups": 4}, "conv: "),
    ((1, 16, 20, 20), (16, 1, 3, 3), {"padding": (1, 1), "groups": 16}, "conv: "),
    ((1, 16, 7, 7), (16, 1, 3, 3), {"padding": (1, 1), "groups": 16}, "conv: "),
    ((1, 16, 32, 32), (32, 16, 1, 1), {}, "conv: "),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs,want", CASES)
def test_conv_matches_numpy(x_shape, w_shape, attrs, want):
    mod = _conv_model(x_shape, w_shape, **attrs)
    out, name = _compile_and_check(mod, x_shape)
    desc = attr(out[name], "kiln.schedule")
    assert desc.startswith(want), desc
    if want.startswith("conv nchwc"):
        assert "epilogue inlined" in desc, desc


@pytest.mark.parametrize("x_shape,w_shape,attrs,want", CASES)
def test_conv_matches_numpy_with_the_host_tiles(x_shape, w_shape, attrs, want):
    """The same convs with the tiles of this machine's own target (AVX-512 ones on an
    AVX-512 host: wider channel blocks, more pixels per tile)."""
    mod = _conv_model(x_shape, w_shape, **attrs)
    out, name = _compile_and_check(mod, x_shape, PassContext(winograd=False), target="llvm")
    assert attr(out[name], "kiln.schedule").split(":")[0] == want.split(":")[0]


@pytest.mark.parametrize("target", [AVX2, "llvm"])
def test_grouped_conv_blocks_walk_their_groups(target):
    """A grouped conv's channel blocks each read their group's input only: channel blocks
    outer, in parallel (RegNetY-400MF's 14 x 14 stage: 26 groups of 8 channels)."""
    x_shape = (1, 208, 14, 14)
    mod = _conv_model(x_shape, (208, 8, 3, 3), padding=(1, 1), groups=26)
    out, name = _compile_and_check(mod, x_shape, PassContext(winograd=False), target=target)
    desc = attr(out[name], "kiln.schedule")
    assert desc.startswith("conv nchwc: tile") and "x8" in desc, desc
    assert "channel blocks outer" in desc and "parallel" in desc, desc


@pytest.mark.parametrize("x_shape,w_shape,attrs,nhwc", [
    ((2, 20, 5, 7), (24, 20, 1, 1), {}, True),
    ((1, 40, 7, 7), (48, 40, 1, 1), {}, True),
    ((1, 40, 14, 14), (48, 40, 1, 1), {}, False),                  # more pixels: NCHW reads
    ((1, 40, 13, 13), (48, 40, 1, 1), {"strides": (2, 2)}, False),
    ((1, 40, 7, 7), (48, 40, 3, 3), {"padding": (1, 1)}, False),
])
def test_small_1x1_convs_read_the_input_pixel_major(x_shape, w_shape, attrs, nhwc):
    mod = _conv_model(x_shape, w_shape, **attrs)
    out, name = _compile_and_check(mod, x_shape)
    assert ("input nhwc" in attr(out[name], "kiln.schedule")) == nhwc, attr(out[name], "kiln.schedule")


@pytest.mark.parametrize("epilogue", ["clip", "residual"])
def test_epilogues_fold_into_the_write_back(epilogue):
    x_shape = (1, 16, 8, 8)
    rng = np.random.default_rng(3)
    w = Constant(rng.standard_normal((16, 16, 3, 3)).astype("float32"))
    b = Constant(rng.standard_normal((1, 16, 1, 1)).astype("float32"))

    def body(emit, x):
        y = emit("add", emit("conv2d", x, w, padding=(1, 1)), b)
        return ops.call("clip", y, min=0.0, max=6.0) if epilogue == "clip" else ops.call("add", y, x)
    mod = graph_module([typed("x", x_shape)], body)
    out, name = _compile_and_check(mod, x_shape)
    desc = attr(out[name], "kiln.schedule")
    assert desc.startswith("conv nchwc: tile 4x16") and "epilogue inlined" in desc, desc


def test_weight_is_packed_ohwi_by_channel_blocks():
    mod = _conv_model((1, 16, 12, 12), (32, 16, 3, 3), padding=(1, 1))
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    shapes = [tuple(int(d.value) for d in p.shape) for p in out[name].params]
    assert (2, 3, 3, 16, 16) in shapes, shapes         # [O/16, KH, KW, I, 16]


def test_conv_blocking_can_be_turned_off():
    mod = _conv_model((1, 16, 12, 12), (32, 16, 3, 3), padding=(1, 1))
    out, name = _compile_and_check(mod, (1, 16, 12, 12), ctx=PassContext(target=AVX2, conv_blocking=False))
    assert attr(out[name], "kiln.schedule").startswith("conv: "), attr(out[name], "kiln.schedule")


def test_runtime_weight_keeps_nchw():
    """A weight passed at run time cannot be packed at compile time: NCHW schedule."""
    mod = graph_module([typed("x", (1, 8, 6, 6)), typed("w", (16, 8, 3, 3))],
                       lambda emit, x, w: ops.call("conv2d", x, w, padding=(1, 1)))
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith("conv: ")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((1, 8, 6, 6)).astype("float32"),
            rng.standard_normal((16, 8, 3, 3)).astype("float32")]
    np.testing.assert_allclose(run_vm(out, args), reference(mod, args), rtol=1e-4, atol=1e-4)


# ---- tile choice ---------------------------------------------------------------------------
@pytest.mark.parametrize("channels,size,want", [
    (64, 56, (16, 6, False)), (64, 112, (16, 6, False)), (64, 60, (16, 6, False)),
    (64, 28, (16, 6, False)), (24, 56, (24, 4, False)),
    # short rows: the image's pixels as one run, 49 = 9 x 5 + 4, 196 = 32 x 6 + 4
    (512, 7, (16, 5, True)), (256, 14, (16, 6, True)), (40, 13, (8, 10, True)),
    (16, 3, (8, 9, True)),
    (12, 8, None),
])
def test_conv_tile(channels, size, want):
    assert conv_tile(channels, size, size, AVX2_CTX.resolved()) == want


def test_triple_block_only_where_16_does_not_divide():
    """24-channel blocks for 24, 72, 120 channels (three vectors on AVX2, 1.5 on AVX-512, where
    the alternative is half-filled 8-channel vectors); counts that 16 divides keep 16 / 32."""
    avx512 = PassContext(target="llvm -mcpu=skylake-avx512").resolved()
    assert channel_blocks(24, avx512) == (24, 8) and channel_blocks(72, avx512) == (24, 8)
    assert channel_blocks(48, avx512) == (16, 8) and channel_blocks(96, avx512) == (32, 16, 8)
    assert channel_blocks(24, AVX2_CTX.resolved()) == (24, 8)
    assert conv_tile(24, 56, 56, avx512)[0] == 24 and conv_tile(48, 56, 56, avx512)[0] == 16


def test_quintuple_block_only_where_8_is_half_a_vector_and_16_24_do_not_divide():
    """40-channel blocks (2.5 AVX-512 vectors) for 40, 200 and 440 channels, which 16 and 24
    do not divide (else half-filled 8-channel blocks); 120 keeps 24, 80 keeps 16; AVX2 and NEON,
    where 8 channels fill whole vectors, never get them."""
    avx512 = PassContext(target="llvm -mcpu=skylake-avx512").resolved()
    assert [channel_blocks(c, avx512) for c in (40, 200, 440)] == [(40, 8)] * 3
    assert channel_blocks(120, avx512) == (24, 8) and channel_blocks(80, avx512) == (16, 8)
    assert channel_blocks(40, AVX2_CTX.resolved()) == (8,)
    neon = PassContext(target="llvm -mtriple=aarch64-linux-gnu").resolved()
    assert channel_blocks(40, neon) == (8, 4)
    assert conv_tile(40, 28, 28, avx512)[0] == 40 and conv_tile(440, 7, 7, avx512)[0] == 40


def _host_has_avx512() -> bool:
    from kiln.codegen.machine import machine_of
    return machine_of("llvm").vector_bits == 512


@pytest.mark.parametrize("batch,size", [(1, 28), (2, 13)])
def test_forty_channel_blocks_flow_through_a_chain(batch, size):
    """An inverted-residual chain whose narrow convs have 40 channels (MnasNet's and
    MobileNetV3's 28 x 28 stages): 40 -> 200 1x1, a 3x3 depthwise over 200, 200 -> 40 1x1 plus
    the residual, all in 40-channel blocks on AVX-512, and (on a host that runs AVX-512 code)
    against numpy at 1e-4 (odd size, batch 2, stride 2 in the depthwise conv for the second
    case)."""
    rng = np.random.default_rng(4)
    w1 = Constant((rng.standard_normal((200, 40, 1, 1)) * 0.2).astype("float32"))
    wd = Constant((rng.standard_normal((200, 1, 3, 3)) * 0.3).astype("float32"))
    w2 = Constant((rng.standard_normal((40, 200, 1, 1)) * 0.1).astype("float32"))
    stride = 1 if batch == 1 else 2
    x_shape = (batch, 40, size, size)

    def body(emit, x):
        h = emit("relu", emit("conv2d", x, w1))
        h = emit("relu", emit("conv2d", h, wd, padding=(1, 1), groups=200, strides=(stride, stride)))
        y = emit("conv2d", h, w2)
        return ops.call("add", y, x) if stride == 1 else y

    mod = graph_module([typed("x", x_shape)], body)
    target = "llvm -mcpu=skylake-avx512"
    out = kiln.get_pipeline("default", PassContext(winograd=False), target=target)(mod)
    schedules = [attr(out[k], "kiln.schedule") for k in kernels(out)]
    assert sum("x40" in s for s in schedules) >= 3, schedules
    if not _host_has_avx512():
        pytest.skip("runs AVX-512 code: this host has no AVX-512F (the schedules are checked)")
    args = [rng.standard_normal(x_shape).astype("float32")]
    np.testing.assert_allclose(run_vm(out, args, target=target), reference(mod, args),
                               rtol=1e-4, atol=1e-4)


def test_flat_tiles_only_where_rows_are_short():
    # a 1-row image (a 1-D conv) is one run, taken as flat so the cores can share it; a wide
    # image keeps its rows
    assert tile_plan(16, 1, 7, AVX2_CTX.resolved())[:2] == (4, True)
    assert tile_plan(16, 7, 112, AVX2_CTX.resolved())[:2] == (6, False)
    assert tile_plan(16, 14, 14, AVX2_CTX.resolved())[:2] == (6, True)


def test_pixel_tile_fits_the_budget():
    assert pixel_tile(56, 16, AVX2_CTX.resolved()) == 6 and pixel_tile(56, 8, AVX2_CTX.resolved()) == 12 and pixel_tile(7, 16, AVX2_CTX.resolved()) == 4
    assert pixel_tile(None, 16, AVX2_CTX.resolved()) == 1 and pixel_tile(30, 16, AVX2_CTX.resolved(), budget=8) == 4
    assert pixel_tile(2, 16, AVX2_CTX.resolved()) == 2                  # never wider than the row


def test_guarded_last_tile_is_peeled_off():
    """56 = 9 x 6 + 2: nine tiles without guards, then one guarded tile (partition_loops); the
    padding read in place splits the first tile off the nine (select_partition)."""
    from kiln.lower import lower_prim_func
    from kiln.ir import IfThenElse, collect
    mod = _conv_model((1, 16, 56, 56), (16, 16, 3, 3), padding=(1, 1))
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith("conv nchwc: tile 6x16")
    text = lower_prim_func(out[name]).script()
    assert "in range(1):" in text and "T.serial(1, 9)" in text and "T.serial(9, 10)" in text, text
    # the guarded tile writes back only its row's pixels (not the next row's first ones,
    # which another thread may be computing)
    assert "< 56" in text and "< 3136" not in text, text


def test_flat_last_tile_is_peeled_off():
    """14 x 14 = 32 x 6 + 4: one run of pixels, 32 tiles without guards and one guarded."""
    from kiln.lower import lower_prim_func
    mod = _conv_model((1, 16, 14, 14), (64, 16, 3, 3), padding=(1, 1))
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith("conv nchwc: tile 6x16 flat")
    text = lower_prim_func(out[name]).script()
    assert "in range(32):" in text and "T.serial(32, 33)" in text, text
    # the tile stays in a register-sized buffer
    assert 'T.alloc_buffer((1, 1, 6, 16), "float32", scope="local")' in text, text


# ---- weight packing --------------------------------------------------------------------------
def test_pack_array_with_dim_order():
    w = np.arange(20 * 3 * 2 * 2, dtype="float32").reshape(20, 3, 2, 2)
    wp = pack_array(w, 0, 8, order=(2, 3, 1))            # [O/8, KH, KW, I, 8], zero padded
    assert wp.shape == (3, 2, 2, 3, 8)
    for o in range(24):
        for i in range(3):
            for ky in range(2):
                for kx in range(2):
                    want = w[o, i, ky, kx] if o < 20 else 0.0
                    assert wp[o // 8, ky, kx, i, o % 8] == want
    np.testing.assert_array_equal(pack_array(w, 0, 4), pack_array(w, 0, 4, order=(1, 2, 3)))


# ---- split_block_iter --------------------------------------------------------------------------
@T.prim_func
def _blocked_view(C: T.Buffer((1, 2, 3, 4, 8), "float32"), E: T.Buffer((1, 16, 3, 4), "float32")):
    for n, o, y, x in T.grid(1, 16, 3, 4):
        with T.block("E"):
            vn, vo, vy, vx = T.axis.remap("SSSS", [n, o, y, x])
            E[vn, vo, vy, vx] = C[vn, vo // 8, vy, vx, vo % 8] + 1.0


def test_split_block_iter_reads_the_blocked_buffer_one_to_one():
    out = split_block_iter(_blocked_view, "E", 1, 8)
    text = out.script()
    assert "C[vn, vo_0, vy, vx, vo_1]" in text, text
    assert "E[vn, vo_0 * 8 + vo_1, vy, vx]" in text, text
    check_same_results(_blocked_view, out)


def test_split_block_iter_refuses_what_it_cannot_split():
    with pytest.raises(BlockIterError):
        split_block_iter(_blocked_view, "E", 1, 5)        # 16 is not a multiple of 5
    with pytest.raises(BlockIterError):
        split_block_iter(_blocked_view, "E", 7, 8)        # no such iterator


# ---- fuse_block_iter ---------------------------------------------------------------------------
@T.prim_func
def _flat_view(C: T.Buffer((1, 2, 12, 8), "float32"), E: T.Buffer((1, 16, 3, 4), "float32")):
    for n, o, y, x in T.grid(1, 16, 3, 4):
        with T.block("E"):
            vn, vo, vy, vx = T.axis.remap("SSSS", [n, o, y, x])
            E[vn, vo, vy, vx] = C[vn, vo // 8, vy * 4 + vx, vo % 8] + 1.0


def test_fuse_block_iter_reads_the_flat_buffer_one_to_one():
    out = fuse_block_iter(split_block_iter(_flat_view, "E", 1, 8), "E", 2, 2)
    text = out.script()
    assert "C[vn, vo_0, vy_vx, vo_1]" in text, text
    assert "E[vn, vo_0 * 8 + vo_1, vy_vx // 4, vy_vx % 4]" in text, text
    check_same_results(_flat_view, out)


def test_fuse_block_iter_refuses_what_it_cannot_fuse():
    with pytest.raises(BlockIterError):
        fuse_block_iter(_flat_view, "E", 3, 2)            # only one iterator from 3
    with pytest.raises(BlockIterError):
        fuse_block_iter(_flat_view, "E", 1, 1)            # nothing to fuse


@pytest.mark.parametrize("cores,order", [(1, "channel blocks outer"), (2, "rows outer")])
def test_pointwise_conv_goes_by_rows_on_more_than_one_core(cores, order):
    """A 1 x 1 conv with weights small next to its input (MobileNetV2's 14 x 14 projection):
    one core by channel blocks (less traffic), more than one by rows, so each core reads only
    the rows of the input it wrote (``schedule_conv._rows_outer``); the same numbers."""
    mod = _conv_model((1, 384, 14, 14), (64, 384, 1, 1))
    ctx = PassContext(target=AVX2, cores=cores, parallel_min_elements=1024)
    out, name = _compile_and_check(mod, (1, 384, 14, 14), ctx)
    assert order in attr(out[name], "kiln.schedule"), attr(out[name], "kiln.schedule")


@pytest.mark.parametrize("pad_rows", [False, True])
@pytest.mark.parametrize("x_shape,strides", [((1, 16, 23, 21), (2, 2)), ((2, 16, 9, 12), (1, 1))])
def test_padding_per_output_row(pad_rows, x_shape, strides):
    """``pad_rows`` (rows outer): each output row pads the input rows it reads (3 x W x 16
    compacted per row) instead of a padded copy of the whole input; both ways compute the
    conv, batch 2 and odd sizes included."""
    from kiln.schedule.decisions import Decisions
    from kiln.transform.default_schedule import schedule_kernel
    mod = _conv_model(x_shape, (32, 16, 3, 3), padding=(1, 1), strides=strides)
    legal = kiln.get_pipeline("default", PassContext(disabled_passes=("default_schedule",),
                                                     winograd=False))(mod)
    (name,) = kernels(legal)
    func = legal[name]
    record = Decisions(fixed={"rows_outer": True, "pad_rows": pad_rows, "pad_inline": False})
    scheduled = schedule_kernel(func, PassContext(), record)
    assert record.made.get("pad_rows") == pad_rows and not record.stale
    assert ("pad per row" in attr(scheduled, "kiln.schedule")) == pad_rows
    check_same_results(func, scheduled)


@pytest.mark.parametrize("x_shape,w_shape,attrs,default", [
    ((1, 3, 64, 120), (32, 3, 3, 3), {"padding": (1, 1), "strides": (2, 2)}, True),  # a stem
    ((2, 3, 60, 60), (16, 3, 7, 7), {"padding": (3, 3), "strides": (2, 2)}, True),   # 7 x 7, batch 2
    ((1, 16, 20, 60), (32, 16, 3, 3), {"padding": (0, 1, 2, 1)}, True),             # uneven
    # one tile a row: the padded copy by default
    ((1, 16, 12, 6), (32, 16, 3, 3), {"padding": (1, 1)}, False),
])
def test_padding_read_in_place(x_shape, w_shape, attrs, default):
    """``pad_inline``: no padded copy; the tile loop splits into border tiles, which test
    every tap, and interior ones, whose taps read the input with no test and no clamp (a tap
    row's test is a branch around it); against the padded copy and numpy. The default where at
    least half of a row's tiles read no padding."""
    from kiln.ir import For, Select, Var, collect
    from kiln.lower import lower_prim_func
    from kiln.schedule.decisions import Decisions
    from kiln.transform.default_schedule import schedule_kernel
    mod = _conv_model(x_shape, w_shape, **attrs)
    legal = kiln.get_pipeline("default", PassContext(disabled_passes=("default_schedule",),
                                                     winograd=False), target=AVX2)(mod)
    (name,) = kernels(legal)
    func = legal[name]
    chosen = schedule_kernel(func, AVX2_CTX, Decisions())
    assert " flat" not in attr(chosen, "kiln.schedule")
    assert ("padding in place" in attr(chosen, "kiln.schedule")) == default, \
        attr(chosen, "kiln.schedule")
    inline = schedule_kernel(func, AVX2_CTX, Decisions(fixed={"pad_inline": True}))
    assert "padding in place" in attr(inline, "kiln.schedule"), attr(inline, "kiln.schedule")
    copy = schedule_kernel(func, AVX2_CTX, Decisions(fixed={"pad_inline": False}))
    assert "padding in place" not in attr(copy, "kiln.schedule")
    lowered = lower_prim_func(inline)
    assert "conv2d_pad" not in lowered.script() and "conv2d_pad" in lower_prim_func(copy).script()
    if default:
        # the row's loop of tiles, split: border tiles whose selects test the column, and an
        # interior with no select left at all (its tap rows' test a branch, not a select)
        (par,) = [f for f in collect(lowered.body, For) if f.kind == "parallel"]
        tiles = [f for f in collect(par.body, For) if f.kind == "serial"
                 and any(g.kind == "unrolled" for g in collect(f.body, For))
                 and not any(f in collect(g.body, For) for g in collect(par.body, For)
                             if g is not f and g.kind == "serial")]
        tile_var = tiles[0].loop_var.name
        assert all(t.loop_var.name == tile_var for t in tiles) and len(tiles) >= 2
        assert any(not collect(t.body, Select) for t in tiles), lowered.script()
        assert any(collect(t.body, Select) for t in tiles), lowered.script()
        # no select tests the output row (the parallel loop's variable)
        assert not any(any(v is par.loop_var for v in collect(sel.condition, Var))
                       for sel in collect(lowered.body, Select)), lowered.script()
    check_same_results(func, inline)
    check_same_results(func, copy)
    _compile_and_check(mod, x_shape)


def test_padding_per_row_by_default_where_the_copy_would_not_fit_half_of_l2():
    """YOLO's 16 -> 32 stride-2 conv at 160 x 160: a padded copy of 1.7 MB (100 of the
    kernel's 450 us as a pass of its own)."""
    from kiln.transform.schedule_conv import _pad_rows_default, _padding_block
    mod = _conv_model((1, 16, 160, 160), (32, 16, 3, 3), padding=(1, 1), strides=(2, 2))
    legal = kiln.get_pipeline("default", PassContext(disabled_passes=("default_schedule",)))(mod)
    (name,) = kernels(legal)
    ctx = PassContext().resolved()
    big = 162 * 162 * 16 * 4 > ctx.machine.l2_bytes // 2
    pad = _padding_block(legal[name])
    assert pad is not None and _pad_rows_default(pad, 80, ctx) == big
    assert not _pad_rows_default(pad, 2 * ctx.cores, ctx)             # too few rows to share


def test_no_pad_rows_decision_without_padding():
    """An unpadded conv by rows has no padding block to move: the rule offers no
    ``pad_rows``, so a tuner cannot sample one (a 1 x 1 conv at 40 x 40)."""
    from kiln.schedule.decisions import Decisions
    from kiln.transform.default_schedule import schedule_kernel
    mod = _conv_model((1, 32, 40, 40), (32, 32, 1, 1))
    legal = kiln.get_pipeline("default", PassContext(disabled_passes=("default_schedule",)))(mod)
    (name,) = kernels(legal)
    record = Decisions(fixed={"rows_outer": True, "pad_rows": True})
    scheduled = schedule_kernel(legal[name], PassContext(), record)
    assert "pad_rows" not in record.made and "pad per row" not in attr(scheduled, "kiln.schedule")
    check_same_results(legal[name], scheduled)
