"""The target decides the schedule: the machine facts a target gives the rules
(``codegen/machine.py``), the tiles the default pipeline derives from them for an AVX2, an
AVX-512 and an AArch64 target, the vector width of the code emitted for each, and
``kiln.compile`` refusing kernels scheduled for a target of another kind."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln.driver import lower
from kiln import codegen, ops
from kiln.codegen.machine import Machine, machine_of
from kiln.executable.executable import TargetMismatchError, schedule_for_target
from kiln.ir.graph import Constant
from kiln.transform import PassContext, legalize
from kiln.transform.conv_blocked import conv_tile
from kiln.transform.layout import matmul_tile_rows

from transform_helpers import attr, graph_module, kernels, reference, typed

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"
AARCH64 = "llvm -mtriple=aarch64-linux-gnu"
ARMV7 = "llvm -mtriple=armv7-linux-gnueabihf -mattr=+neon"


def _host_has_avx512() -> bool:
    return machine_of("llvm").vector_bits == 512


# ---- the machine facts ------------------------------------------------------------------------
@pytest.mark.parametrize("target,bits,regs,lanes,nr,acc", [
    (AVX2, 256, 16, 8, 16, 12),
    (AVX512, 512, 32, 16, 64, 24),
    (AARCH64, 128, 32, 4, 16, 24),
    (ARMV7, 128, 16, 4, 8, 12),
])
def test_machine_of_target(target, bits, regs, lanes, nr, acc):
    m = machine_of(target)
    assert (m.vector_bits, m.vector_registers, m.lanes(32)) == (bits, regs, lanes)
    ctx = PassContext(target=target).resolved()
    assert (ctx.pack_lanes, ctx.tile_accumulators, ctx.simd_lanes) == (nr, acc, lanes)
    assert ctx.min_accumulators == 8 or target == ARMV7


def test_explicit_options_win_over_the_target():
    ctx = PassContext(target=AVX512, pack_lanes=16, tile_accumulators=12).resolved()
    assert (ctx.pack_lanes, ctx.tile_accumulators, ctx.simd_lanes) == (16, 12, 16)


def test_machine_key_names_what_schedules_depend_on():
    assert machine_of(AVX2).key() == "x86_64 v256x16 fma2x4"
    assert machine_of(AVX512).key() == "x86_64 v512x32 fma2x4"
    assert machine_of(AARCH64).key() == "aarch64 v128x32 fma2x4"
    assert machine_of("llvm -mcpu=znver3").key() == machine_of(AVX2).key()
    host = machine_of("llvm")
    assert host.cores >= 1 and host.l1_bytes >= 16 * 1024 and host.l2_bytes >= host.l1_bytes


@pytest.mark.parametrize("target,rate", [
    ("llvm -mcpu=znver4", 30.0),          # AMD Zen: one core streams about 30 bytes/ns
    ("llvm -mcpu=znver3", 30.0),
    ("llvm -mcpu=rocketlake", 10.0),      # Intel's server cores about 10
    ("llvm -mcpu=sapphirerapids", 10.0),
    ("llvm -mtriple=aarch64-linux-gnu", 10.0),   # unknown: the cautious figure
])
def test_memory_stream_rate_follows_the_cpu_family(target, rate):
    assert machine_of(target).stream_bytes_per_ns == rate


def test_accumulators_leave_room_for_operands():
    for regs in (16, 32):
        m = Machine("x86_64", 256, regs)
        assert m.accumulators + m.tile_vectors < regs


# ---- tiles per target -------------------------------------------------------------------------
@pytest.mark.parametrize("target,rows,nr,want", [
    (AVX2, 64, 16, 6), (AVX2, 1024, 16, 6), (AVX512, 1024, 64, 6), (AVX512, 64, 32, 11),
    (AARCH64, 1024, 16, 6), (AVX512, 5, 64, 5),
])
def test_matmul_rows_fill_the_register_file(target, rows, nr, want):
    assert matmul_tile_rows(rows, nr, PassContext(target=target).resolved()) == want


@pytest.mark.parametrize("target,want", [
    (AVX2, (16, 6, False)), (AVX512, (32, 8, False)), (AARCH64, (8, 8, False)),
])
def test_conv_block_and_pixels_per_target(target, want):
    assert conv_tile(64, 56, 56, PassContext(target=target).resolved()) == want


def _matmul_model(m=64, k=128, n=256):
    rng = np.random.default_rng(0)
    w = Constant(rng.standard_normal((n, k)).astype("float32"))
    return graph_module([typed("x", (m, k))], lambda emit, x: ops.call("linear", x, w))


@pytest.mark.parametrize("target,tile", [
    (AVX2, "tile 6x16"), (AVX512, "tile 6x64"), (AARCH64, "tile 6x16"),
])
def test_default_pipeline_tiles_follow_the_target(target, tile):
    out = kiln.get_pipeline("default", target=target)(_matmul_model())
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith(f"matmul: {tile}")
    assert attr(out[name], "kiln.scheduled_for") == machine_of(target).key()


@pytest.mark.parametrize("target,k,ku", [
    (AVX2, 128, 4), (AVX512, 128, 2), (AARCH64, 128, 2),   # 12-FMA steps: 4 a trip; 24: 2
    (AVX2, 102, 2), (AVX2, 37, 1),                          # K steps must divide K
])
def test_k_steps_per_trip_follow_the_tile(target, k, ku):
    """A trip of the tile's K loop runs steps of the tile up to 48 vector multiply-adds
    (``schedule_tile.k_unroll``), and K steps that divide K."""
    out = kiln.get_pipeline("default", target=target)(_matmul_model(64, k, 256))
    (name,) = kernels(out)
    assert f"ku={ku}" in attr(out[name], "kiln.decisions").split()
    text = str(out[name])
    assert (f"in T.unroll({ku}):" in text) == (ku > 1)
    if target != AARCH64:
        ex = kiln.compile(out, target=target)
        x = np.random.default_rng(4).standard_normal((64, k)).astype("float32")
        got = kiln.VirtualMachine(ex, kiln.cpu())["main"](x)
        np.testing.assert_allclose(np.asarray(got), reference(_matmul_model(64, k, 256), [x]),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target,ku", [(AVX512, 2), (AVX2, 4)])
def test_k_chunks_run_the_tiles_k_steps(target, ku):
    """With K in chunks the tile runs its K steps a trip too (its accumulators held in
    registers over each chunk's loop by ``lower.promote_accumulators``: without that, two steps
    of the AVX-512 tile left LLVM storing them every step, ViT's 197-row MLP product 3x
    slower), and the product is right with a partial last row tile."""
    mod = _matmul_model(197, 1536, 384)
    out = kiln.get_pipeline("default", target=target)(mod)
    (name,) = kernels(out)
    decisions = attr(out[name], "kiln.decisions").split()
    if not any(d.startswith("kc=") and d != "kc=0" for d in decisions):
        # this target's rules chose no chunks for the shape: force them
        from kiln.schedule.decisions import Decisions
        from kiln.transform.default_schedule import schedule_kernel
        pre = kiln.get_pipeline("default", PassContext(target=target,
                                                       disabled_passes=("default_schedule",)))(mod)
        (pname,) = kernels(pre)
        func = schedule_kernel(pre[pname], PassContext(target=target), Decisions(fixed={"kc": 768}))
        decisions = attr(func, "kiln.decisions").split()
    assert any(d.startswith("kc=") and d != "kc=0" for d in decisions), decisions
    assert f"ku={ku}" in decisions, decisions
    if target == AVX2 or _host_has_avx512():
        x = np.random.default_rng(5).standard_normal((197, 1536)).astype("float32")
        got = kiln.VirtualMachine(kiln.compile(out, target=target), kiln.cpu())["main"](x)
        np.testing.assert_allclose(np.asarray(got), reference(mod, [x]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,tile", [(1000, "tile 5x64"), (200, "tile 5x50")])
def test_run_time_weight_without_a_vector_multiple_divisor(n, tile):
    """B given at run time, its column count divisible by no multiple of 16: 1,000 columns
    take 64-wide panels and a guarded last one (24 columns of padding), not 50-wide tiles
    that end every row in a partial vector; 200 columns keep 50 (64 would compute 256)."""
    x, b = typed("x", (49, 64)), typed("b", (64, n))
    mod = graph_module([x, b], lambda emit, x, b: ops.call("matmul", x, b))
    out = kiln.get_pipeline("default", target=AVX512)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith(f"matmul: {tile}")
    if _host_has_avx512():
        args = [np.random.default_rng(1).standard_normal(s).astype("float32")
                for s in ((49, 64), (64, n))]
        vm = kiln.VirtualMachine(kiln.compile(out, target=AVX512), kiln.cpu())
        got = vm["main"](*[kiln.nd.array(a) for a in args]).numpy()
        np.testing.assert_allclose(got, args[0] @ args[1], rtol=1e-4, atol=1e-4)


def _kernel_asm(mod, target):
    asm = codegen.compile_module(lower(mod), target).assembly()
    return asm[:asm.find("kiln_library_info")]


@pytest.mark.parametrize("target,vector,not_vector", [
    (AVX2, r"vfmadd\w+\s+.*%ymm", "zmm"),
    (AVX512, r"vfmadd\w+\s+.*%zmm", None),
    (AARCH64, r"fmla\s+v\d+\.4s", None),
])
def test_emitted_vector_width_per_target(target, vector, not_vector):
    """The matmul micro-kernel's FMAs use the target's full vector registers."""
    out = kiln.get_pipeline("default", target=target)(_matmul_model())
    prims = {n: f for n, f in out.functions.items() if n in kernels(out)}
    asm = _kernel_asm(kiln.IRModule(prims), target)
    assert re.search(vector, asm), asm[:2000]
    if not_vector:
        assert not_vector not in asm


# ---- compile checks the target ----------------------------------------------------------------
def test_compile_refuses_kernels_scheduled_for_another_target():
    out = kiln.get_pipeline("default", target=AARCH64)(_matmul_model())
    with pytest.raises(TargetMismatchError, match=r"scheduled for 'aarch64 v128x32 fma2x4'"):
        kiln.compile(out, target=AVX2)


def test_compile_schedules_what_is_unscheduled_for_its_target():
    mod = legalize(PassContext(target=AVX2, prepack_weights=False))(_matmul_model(16, 32, 64))
    (name,) = kernels(mod)
    assert attr(mod[name], "kiln.schedule") is None
    scheduled = schedule_for_target(mod, AVX2)
    assert attr(scheduled[name], "kiln.schedule").startswith("matmul: tile")
    assert attr(scheduled[name], "kiln.scheduled_for") == machine_of(AVX2).key()
    ex = kiln.compile(mod, target=AVX2)
    x = np.random.default_rng(1).standard_normal((16, 32)).astype("float32")
    got = kiln.VirtualMachine(ex, kiln.cpu())["main"](x)
    np.testing.assert_allclose(np.asarray(got), reference(mod, [x]), rtol=1e-4, atol=1e-4)


def test_compile_with_a_pipeline_name_schedules_for_its_target():
    ex = kiln.compile(_matmul_model(8, 32, 64), target=AVX2, pipeline="default")
    x = np.random.default_rng(2).standard_normal((8, 32)).astype("float32")
    got = kiln.VirtualMachine(ex, kiln.cpu())["main"](x)
    np.testing.assert_allclose(np.asarray(got), reference(_matmul_model(8, 32, 64), [x]),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not _host_has_avx512(), reason="runs AVX-512 code: this host has no AVX-512F")
@pytest.mark.parametrize("shape", [(64, 128, 256), (7, 100, 200), (1, 64, 1000), (33, 48, 72)])
def test_avx512_tiles_match_numpy(shape):
    """Odd shapes on the wide tiles: rows not a multiple of 6, columns not of 64 (padded
    panels, guarded tails), one row."""
    m, k, n = shape
    mod = _matmul_model(m, k, n)
    out = kiln.get_pipeline("default", target=AVX512)(mod)
    ex = kiln.compile(out, target=AVX512)
    x = np.random.default_rng(3).standard_normal((m, k)).astype("float32")
    got = kiln.VirtualMachine(ex, kiln.cpu())["main"](x)
    np.testing.assert_allclose(np.asarray(got), reference(mod, [x]), rtol=1e-4, atol=1e-4)


def test_a_one_row_matvec_is_split_across_the_cores():
    """The row loop of a one-row matvec has one iteration: the parallel loop must include the
    column blocks, or a second core gets nothing (the issue's 1 x 4096 . 4096 x 4096 case)."""
    rng = np.random.default_rng(5)
    w = Constant(rng.standard_normal((1024, 256)).astype("float32"))
    mod = graph_module([typed("x", (1, 256))], lambda emit, x: ops.call("linear", x, w))
    out = kiln.get_pipeline("default", PassContext(target=AVX512, cores=2))(mod)
    (name,) = kernels(out)
    from kiln.ir import For, collect
    par = [f for f in collect(out[name].body, For) if f.kind == "parallel"]
    assert len(par) == 1 and par[0].extent.value >= 2, attr(out[name], "kiln.schedule")


# ---- how a matmul's work is split among the cores ------------------------------------------------
@pytest.mark.parametrize("m,k,n,cores,rows", [
    (64, 512, 128, 2, True),      # A is large next to B, B (256 KiB) fits in a quarter of L2
    (64, 256, 256, 2, True),      # its attention output projection
    (64, 256, 1024, 2, False),    # the MLP up projection: B is 4x A's size and more
    (64, 256, 768, 2, False),     # QKV
    (1, 4096, 4096, 2, False),    # one row
    (8, 64, 64, 2, False),        # too few row blocks for the cores
    (64, 1024, 256, 2, False),    # B (1 MiB) overflows a quarter of this target's L2 (1 MiB)
    (64, 512, 128, 1, False),     # one core: nothing to split
    (1024, 1024, 1024, 2, False), # B (4 MiB) overflows half of L2: row blocks would re-read it
])
def test_matmul_splits_rows_when_a_is_large_next_to_b(m, k, n, cores, rows):
    from kiln.transform.schedule_tile import split_rows
    ctx = PassContext(target=AVX512, cores=cores).resolved()
    assert split_rows(m, k, n, 6, ctx) is rows


@pytest.mark.parametrize("shape", [(64, 512, 128), (50, 300, 130), (1, 37, 96, 128)])
@pytest.mark.parametrize("target", [AVX2, "llvm"])
def test_row_split_matmul_matches_numpy(shape, target):
    """Split by row blocks (rows not a multiple of the tile's, a batch dim of one, a bias in the
    write-back), at 1 and 2 threads."""
    *b, m, k, n = shape
    rng = np.random.default_rng(8)
    w = Constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32"))
    bias = Constant(rng.standard_normal((n,)).astype("float32"))
    mod = graph_module([typed("x", tuple(b) + (m, k))],
                       lambda emit, x: ops.call("add", emit("matmul", x, w), bias))
    ctx = PassContext(target=target, cores=2, parallel_min_elements=256)
    out = kiln.get_pipeline("default", ctx)(mod)
    (name,) = kernels(out)
    assert "parallel by rows" in attr(out[name], "kiln.schedule"), attr(out[name], "kiln.schedule")
    assert "split=rows" in attr(out[name], "kiln.decisions")
    vm = kiln.VirtualMachine(kiln.compile(out, target=target), kiln.cpu())
    x = rng.standard_normal(tuple(b) + (m, k)).astype("float32")
    try:
        for threads in (1, 2):
            kiln.set_num_threads(threads)
            got = vm["main"](kiln.nd.array(x)).numpy()
            np.testing.assert_allclose(got, reference(mod, [x]), rtol=1e-4, atol=1e-4)
    finally:
        kiln.set_num_threads(0)


def test_batched_matmul_keeps_the_column_split():
    """A batch of products (a Winograd GEMM's 36, or here 3) runs its batch in parallel: the
    row split, which would order each product's row blocks outside its column blocks, is not
    taken."""
    rng = np.random.default_rng(9)
    w = Constant((rng.standard_normal((512, 128)) / 20).astype("float32"))
    mod = graph_module([typed("x", (3, 64, 512))], lambda emit, x: ops.call("matmul", x, w))
    out = kiln.get_pipeline("default", PassContext(target=AVX2, cores=2, parallel_min_elements=256))(mod)
    (name,) = kernels(out)
    assert "parallel by rows" not in attr(out[name], "kiln.schedule")
    assert "split=cols" in attr(out[name], "kiln.decisions")
