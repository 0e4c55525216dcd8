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
from kiln.transform.schedule_tile import k_block, k_block_options

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


def _matmul(m, k, n, seed=0, target=AVX2):
    w = Constant(np.random.default_rng(seed).standard_normal((k, n)).astype("float32"))
    mod = graph_module([typed("a", (m, k))], lambda emit, a: ops.call("matmul", a, w))
    ctx = PassContext(target=target, disabled_passes=("default_schedule",))
    mod = kiln.get_pipeline("default", ctx)(mod)
    (name,) = kernels(mod)
    return mod, name


@pytest.mark.parametrize("target,kc", [(AVX512, 512), (AVX2, 0)])
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
