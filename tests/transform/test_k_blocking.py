"""A matmul's reduction in chunks (``schedule_tile.k_block``): when the packed panel K x NR
would not fit in half of L2, per column block every row block runs over one chunk of K before
the next. The default chunk per target, the decision ``kc`` (the tuner's), and numerics of
blocked tiles with guarded rows and columns against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir.graph import Constant
from kiln.schedule.decisions import Decisions, parse_decisions
from kiln.transform import PassContext
from kiln.transform.default_schedule import schedule_kernel
from kiln.transform.schedule_tile import k_block, k_block_options, row_block, row_block_options

from transform_helpers import AVX2, attr, graph_module, kernels, reference, typed

AVX512 = "llvm -mcpu=skylake-avx512"     # not the host: the default 1 MiB L2


def test_default_chunk_follows_the_panel_and_l2():
    avx512 = PassContext(target=AVX512).resolved()
    avx2 = PassContext(target=AVX2).resolved()
    assert avx512.machine.l2_bytes == 1 << 20
    # 4608 x 64 floats = 1.2 MiB: chunks whose 64-wide panel part is <= 128 KiB
    assert k_block(4608, 64, avx512) == 512
    # 768 x 64 floats = 192 KiB fits: no chunks (577 x 768 x 3072, 1024^3)
    assert k_block(768, 64, avx512) == 0 and k_block(1024, 64, avx512) == 0
    # AVX2's 16-wide panels of 4608 are 288 KiB: they fit
    assert k_block(4608, 16, avx2) == 0
    assert k_block(None, 64, avx512) == 0
    assert k_block_options(256) == [64, 128] and k_block_options(100) == []


def test_chunks_when_two_panels_and_the_rows_of_a_overflow_l2():
    """The panel, the next one (prefetched) and the rows of A that stream past them must fit
    in 7/8 of L2, else K goes in chunks: ConvNeXt-T's 49 x 3072 x 768 (1 MiB L2 here: two
    768 KiB panels and 588 KiB of A) in chunks of 512; its 49 x 768 x 3072 (two 192 KiB panels,
    147 KiB of A) whole; more rows tip a panel that fits alone."""
    avx512 = PassContext(target=AVX512).resolved()
    assert k_block(3072, 64, avx512, rows=49) == 512
    assert k_block(768, 64, avx512, rows=49) == 0
    assert k_block(1024, 64, avx512, rows=64) == 0          # the decoder's down projection
    assert k_block(1024, 64, avx512, rows=256) == 512       # 256 KiB panels, 1 MiB of A
    mod, name = _matmul(49, 3072, 768, target=AVX512)
    func = schedule_kernel(mod[name], PassContext(target=AVX512))
    assert "k chunks of 512" in attr(func, "kiln.schedule")


def _matmul(m, k, n, seed=0, target=AVX2):
    w = Constant(np.random.default_rng(seed).standard_normal((k, n)).astype("float32"))
    mod = graph_module([typed("a", (m, k))], lambda emit, a: ops.call("matmul", a, w))
    ctx = PassContext(target=target, disabled_passes=("default_schedule",))
    mod = kiln.get_pipeline("default", ctx)(mod)
    (name,) = kernels(mod)
    return mod, name


# AVX2: 288 KiB panels and 0.9 MiB of A overflow its 1 MiB L2 too
@pytest.mark.parametrize("target,kc", [(AVX512, 512), (AVX2, 1536)])
def test_default_schedule_blocks_a_long_reduction_where_the_panel_overflows(target, kc):
    mod, name = _matmul(49, 4608, 1000, target=target)
    func = schedule_kernel(mod[name], PassContext(target=target))
    assert parse_decisions(attr(func, "kiln.decisions"))["kc"] == kc
    assert (f"k chunks of {kc}" in attr(func, "kiln.schedule")) == bool(kc)


@pytest.mark.parametrize("m,k,n,kc", [(13, 256, 40, 64), (13, 256, 40, 128), (7, 512, 32, 64),
                                      (25, 192, 48, 64)])
def test_blocked_tiles_compute_the_same(m, k, n, kc):
    """Guarded rows (13 = 2 x 6 + 1) and a partial last panel (40 = 2 x 16 + 8) included."""
    mod, name = _matmul(m, k, n, seed=m)
    func = schedule_kernel(mod[name], PassContext(target=AVX2), Decisions(fixed={"kc": kc}))
    assert f"k chunks of {kc}" in attr(func, "kiln.schedule")
    funcs = dict(mod.functions)
    funcs[name] = func
    ex = kiln.compile(kiln.IRModule(funcs, mod.attrs), target=AVX2)
    a = np.random.default_rng(1).standard_normal((m, k)).astype("float32")
    got = np.asarray(kiln.VirtualMachine(ex, kiln.cpu())["main"](kiln.nd.array(a)).numpy())
    np.testing.assert_allclose(got, reference(mod, [a]), rtol=1e-4, atol=1e-3)


def _matmul_b_input(m, k, n, target=AVX2):
    mod = graph_module([typed("a", (m, k)), typed("b", (k, n))],
                       lambda emit, a, b: ops.call("matmul", a, b))
    ctx = PassContext(target=target, disabled_passes=("default_schedule",))
    mod = kiln.get_pipeline("default", ctx)(mod)
    (name,) = kernels(mod)
    return mod, name


@pytest.mark.parametrize("n,kc,packs", [(60, 64, "pack per panel chunk"), (60, 0, "pack per panel"),
                                        (64, 128, "pack per panel chunk"), (70, 64, None)])
def test_b_given_at_run_time_packs_per_chunk_with_a_padded_last_panel(n, kc, packs):
    """B arrives at run time: its panels are packed inside the kernel, one chunk of K at a time
    when K is blocked. 60 columns are 3 panels of 16 and one of 12 padded with zeros (an
    eighth or less); 70 would pad 10 of 70, so B is read as it is. Lowered, only the last
    panel's pack has a guard: the others read B with plain loads."""
    from kiln.lower import lower_prim_func
    m, k = 19, 256
    mod, name = _matmul_b_input(m, k, n)
    func = schedule_kernel(mod[name], PassContext(target=AVX2), Decisions(fixed={"kc": kc}))
    desc = attr(func, "kiln.schedule")
    assert (packs in desc) if packs else ("pack" not in desc), desc
    if packs and n % 16:
        text = str(lower_prim_func(func))
        pack_lines = [ln for ln in text.splitlines() if "pack_weight[" in ln and "] = " in ln
                      and ln.split("] = ")[0].strip().startswith("pack_weight")]
        assert any("T.Select" not in ln and "T.min" not in ln for ln in pack_lines), text
    funcs = dict(mod.functions)
    funcs[name] = func
    ex = kiln.compile(kiln.IRModule(funcs, mod.attrs), target=AVX2)
    rng = np.random.default_rng(n + kc)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    got = kiln.VirtualMachine(ex, kiln.cpu())["main"](kiln.nd.array(a), kiln.nd.array(b)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


def test_row_blocks_when_a_does_not_fit_in_l2():
    """1024^3 on AVX2 (16-wide panels, a 1 MiB L2 assumed for a named CPU): A's 4 MiB would be
    streamed once per panel, 64 times; in 9 equal blocks of 114 rows (6-row tiles) each block
    stays in L2 while B streams past it 9 times. A that fits in L2 is not blocked."""
    avx2 = PassContext(target=AVX2).resolved()
    assert avx2.machine.l2_bytes == 1 << 20
    assert row_block(1024, 1024, 1024, 6, 16, avx2) == 114
    assert row_block(49, 4608, 1000, 5, 16, avx2) == 0          # 0.9 MiB: fits
    assert row_block(1024, 1024, 1024, 6, None, avx2) == 0
    assert row_block(1024, 1024, 16, 6, 16, avx2) == 0           # one panel: nothing to save
    assert row_block_options(100, 6) == [12, 24, 48, 96]
    mod, name = _matmul(1024, 1024, 1024, target=AVX2)
    func = schedule_kernel(mod[name], PassContext(target=AVX2))
    assert "row blocks of 114" in attr(func, "kiln.schedule")
    assert parse_decisions(attr(func, "kiln.decisions"))["mc"] == 114


@pytest.mark.parametrize("fixed", [{"mc": 24}, {"mc": 24, "kc": 128}, {"mc": 48, "kc": 64}])
def test_row_blocks_compute_the_same(fixed):
    """Blocks of rows (the last one short, its last tile guarded: 100 = 4 x 24 + 4) alone and
    with K in chunks, against numpy."""
    m, k, n = 100, 256, 64
    mod, name = _matmul(m, k, n, seed=3)
    fixed = dict(fixed, mr=6, split="cols")
    func = schedule_kernel(mod[name], PassContext(target=AVX2), Decisions(fixed=fixed))
    assert f"row blocks of {fixed['mc']}" in attr(func, "kiln.schedule")
    funcs = dict(mod.functions)
    funcs[name] = func
    ex = kiln.compile(kiln.IRModule(funcs, mod.attrs), target=AVX2)
    a = np.random.default_rng(4).standard_normal((m, k)).astype("float32")
    got = kiln.VirtualMachine(ex, kiln.cpu())["main"](kiln.nd.array(a)).numpy()
    np.testing.assert_allclose(got, reference(mod, [a]), rtol=1e-4, atol=1e-3)
