"""A large ``matmul`` B given at run time, packed by a kernel of its own before the product
(``layout.packs_ahead``, ``schedule_pack``), and the panel width of a weight whose columns
the full panel does not divide (``layout.panel_options``). Checked: the decisions, the graph
and schedules that result, and the numbers against numpy at one and two threads."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.schedule.decisions import Decisions
from kiln.transform import PassContext
from kiln.transform.default_schedule import schedule_kernel
from kiln.ir.graph import TensorType
from kiln.transform.kernels import pack_kernel
from kiln.transform.layout import PACK_RULES, PackPlan, pack_array, packs_ahead, panel_options
from kiln.transform.schedule_pack import block_rows, row_options

from transform_helpers import AVX2, attr, graph_module, kernels, typed

AVX512 = "llvm -mcpu=skylake-avx512"     # not the host: the default 1 MiB L2


def test_panels_are_full_width_when_padding_adds_at_most_an_eighth():
    avx2 = PassContext(target=AVX2).resolved()
    avx512 = PassContext(target=AVX512).resolved()
    # 1,000 columns on AVX2: 63 panels of 16 (the last one half padding), not 125 of 8
    assert panel_options(1000, 49, avx2) == ([8, 16], 16)
    assert panel_options(200, 49, avx2) == ([8, 16], 16)
    # 24 columns: 16-wide panels would pad 8 of 24; 8-wide ones divide
    assert panel_options(24, 49, avx2) == ([8, 16], 8)
    assert panel_options(1024, 49, avx2) == ([16, 8], 16)
    assert panel_options(1000, 49, avx512) == ([64], 64)
    assert panel_options(96, 49, avx512) == ([32, 64], 32)


def _plan(m, k, n, ctx):
    return PackPlan(PACK_RULES["matmul"], (k, n), ctx.pack_lanes, m)


def test_packs_ahead_when_neither_a_nor_b_fits_in_l2():
    avx2 = PassContext(target=AVX2).resolved()          # a named CPU: 1 MiB of L2
    assert avx2.machine.l2_bytes == 1 << 20
    assert packs_ahead(_plan(1024, 1024, 1024, avx2), avx2)
    assert packs_ahead(_plan(300, 1024, 256, avx2), avx2)       # A 1.2 MiB, B 1 MiB
    assert not packs_ahead(_plan(49, 4608, 1000, avx2), avx2)   # A 0.9 MiB fits
    assert not packs_ahead(_plan(1024, 1024, 64, avx2), avx2)   # B 256 KiB fits
    assert not packs_ahead(_plan(None, 1024, 1024, avx2), avx2)  # rows unknown
    assert not packs_ahead(_plan(8, 1024, 1024, avx2), avx2)    # too few rows to pack at all
    linear = PackPlan(PACK_RULES["linear"], (1024, 1024), 16, 1024)
    assert not packs_ahead(linear, avx2)


def _b_input(m, k, n, target=AVX2):
    mod = graph_module([typed("a", (m, k)), typed("b", (k, n))],
                       lambda emit, a, b: ops.call("matmul", a, b))
    return kiln.get_pipeline("default", target=target)(mod)


def _run(mod, target, a, b, threads):
    vm = kiln.VirtualMachine(kiln.compile(mod, target=target), kiln.cpu())
    kiln.set_num_threads(threads)
    try:
        return vm["main"](kiln.nd.array(a), kiln.nd.array(b)).numpy()
    finally:
        kiln.set_num_threads(0)


@pytest.mark.parametrize("m,k,n", [(300, 1024, 256), (270, 1000, 1000)])
def test_a_large_b_is_packed_before_the_product(m, k, n):
    """1,000 rows of B: blocks of 8 (16 does not divide); 1,000 columns: the last panel is
    half padding."""
    mod = _b_input(m, k, n)
    assert kernels(mod) == ["pack_kn16", "matmul"]
    pack, product = mod["pack_kn16"], mod["matmul"]
    rows = 16 if k % 16 == 0 else 8
    assert attr(pack, "kiln.schedule") == f"pack: rows in blocks of {rows}, parallel, vectorize 16"
    desc = attr(product, "kiln.schedule")
    assert "packed weight" in desc and "row blocks of" in desc and "pack per" not in desc, desc
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    for threads in (1, 2):
        np.testing.assert_allclose(_run(mod, AVX2, a, b, threads), a @ b, rtol=1e-4, atol=1e-3)


def test_a_product_whose_a_fits_packs_its_panels_inside():
    mod = _b_input(49, 1024, 1024)
    assert kernels(mod) == ["matmul"]
    assert "pack per panel" in attr(mod["matmul"], "kiln.schedule")


def test_row_block_options_and_default():
    assert row_options(1024) == [4, 8, 16, 32, 64]
    assert row_options(1000) == [4, 8]
    assert row_options(30) == []
    assert block_rows(1024) == 16 and block_rows(1000) == 8 and block_rows(30) == 0


@pytest.mark.parametrize("k,n,rows", [(1000, 1000, None), (1024, 200, 64), (1024, 200, 0),
                                      (30, 72, None), (64, 48, 4)])
def test_pack_kernel_schedule_writes_the_panels(k, n, rows):
    """The scheduled pack kernel against numpy's ``pack_array``, zero padding included, with
    the default rows per block and the tuner's other choices (0: no blocks)."""
    ctx = PassContext(target=AVX2)
    plan = PackPlan(PACK_RULES["matmul"], (k, n), 16, 512)
    fixed = {} if rows is None else {"rows": rows}
    func = schedule_kernel(pack_kernel(TensorType((k, n), "float32"), plan), ctx,
                           Decisions(fixed=fixed))
    desc = attr(func, "kiln.schedule")
    assert desc.startswith("pack: "), desc
    want_rows = block_rows(k) if rows is None else rows
    assert (f"rows in blocks of {want_rows}" in desc) == bool(want_rows), desc
    rt = kiln.build(kiln.IRModule({"main": func}), target=AVX2)
    b = np.random.default_rng(k + n).standard_normal((k, n)).astype("float32")
    out = kiln.nd.empty(plan.packed_shape, "float32")
    rt["main"](kiln.nd.array(b), out)
    np.testing.assert_array_equal(out.numpy(), pack_array(b, 1, 16))

