"""A one-row product ``x @ B`` with B given at run time walks B's rows in wide strips
(``schedule_tile.walk_strip``): which shapes and targets take it, and its results against
numpy at 1 and 2 threads (a bias in the write-back, K not a multiple of the rows added at a
time, a batch dim of one)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.schedule.decisions import Decisions
from kiln.transform import PassContext
from kiln.transform.schedule_tile import strip_widths, walk_strip

from transform_helpers import attr, graph_module, kernels, outputs_at_threads, typed

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"


@pytest.mark.parametrize("target,k,n,cores,strip", [
    (AVX512, 4096, 4096, 2, 2048),   # one strip per core
    (AVX512, 4096, 4096, 1, 4096),   # one core: the whole row
    (AVX512, 512, 16384, 2, 4096),   # at most STRIP_MOST columns
    (AVX512, 256, 256, 2, 0),        # B (256 KiB) fits in half of L2: the register tile
    (AVX512, 4096, 1000, 2, 0),      # no multiple of the panel divides 1,000 columns
    (AVX2, 1024, 1024, 2, 512),      # 16-column panels: any multiple of 16 from 256
    ("llvm -mtriple=aarch64-linux-gnu", 1024, 1024, 1, 1024),   # NEON, one core
])
def test_walk_strip(target, k, n, cores, strip):
    ctx = PassContext(target=target, cores=cores).resolved()
    assert walk_strip(k, n, ctx) == strip
    assert strip == 0 or strip in strip_widths(n, ctx)


def test_strip_widths_are_multiples_of_the_panel_from_256_columns():
    ctx = PassContext(target=AVX512).resolved()
    assert strip_widths(1024, ctx) == [256, 512, 1024]
    assert strip_widths(200, ctx) == [] and strip_widths(None, ctx) == []


def _module(k, n, batch=(), bias=False):
    rng = np.random.default_rng(3)
    b_bias = kiln.ir.graph.Constant(rng.standard_normal((n,)).astype("float32")) if bias else None

    def body(emit, x, w):
        if bias:
            return kiln.ops.call("add", emit("matmul", x, w), b_bias)
        return kiln.ops.call("matmul", x, w)
    return graph_module([typed("x", tuple(batch) + (1, k)), typed("w", (k, n))], body)


def _schedule(out):
    (name,) = kernels(out)
    return attr(out[name], "kiln.schedule"), attr(out[name], "kiln.decisions")


@pytest.mark.parametrize("k,n,batch,bias,rows", [
    (1024, 1024, (), False, 8),
    (1026, 2048, (), True, 2),      # K = 2 x 513: two rows at a time
    (1023, 1024, (1,), True, 1),    # K odd; a batch dim of one
])
def test_strip_walk_matches_numpy(k, n, batch, bias, rows):
    mod = _module(k, n, batch, bias)
    out = kiln.get_pipeline("default", PassContext(target=AVX2, cores=2))(mod)
    sched, decisions = _schedule(out)
    assert f"B's rows in strips of {n // 2}, {rows} rows at a time" in sched, sched
    assert f"strip={n // 2}" in decisions and f"strip_rows={rows}" in decisions
    vm = kiln.VirtualMachine(kiln.compile(out, target=AVX2), kiln.cpu())
    rng = np.random.default_rng(4)
    x = rng.standard_normal(tuple(batch) + (1, k)).astype("float32")
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32")
    want = x.astype("float64") @ w.astype("float64")
    if bias:
        want = want + mod["main"].blocks[0].bindings[-1].value.args[1].data
    for got in outputs_at_threads(vm, [x, w]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_strip_zero_is_the_register_tile():
    """The tuner's choice ``strip=0`` gives back the register tile of one row; its record of
    the default names the strip."""
    from kiln.transform.default_schedule import schedule_kernel
    from kiln.tune.tasks import extract_tasks
    (task,), _ = extract_tasks(_module(1024, 1024), AVX2, threads=2,
                               ctx=PassContext(target=AVX2, cores=2))
    tile = attr(schedule_kernel(task.func, task.ctx, Decisions(fixed={"strip": 0})), "kiln.schedule")
    assert "strips" not in tile and tile.startswith("matmul: tile 1x"), tile
    default = schedule_kernel(task.func, task.ctx, Decisions())
    assert "strip=512" in attr(default, "kiln.decisions")


@pytest.mark.parametrize("n, cols", [(768, 2), (1024, 4), (256, 2)])
def test_one_row_product_with_a_constant_weight_splits_among_the_cores(n, cols):
    """A decode step's projections (1 x 256 x n, the weight constant and packed): parallel
    although their products are few (``STREAMED_B_COST``: each weight element is streamed
    for one row), in column blocks the two cores share equally (768 columns: 6 blocks of 2
    panels, not 3 of 4). Results at 1 and 2 threads against numpy."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((256, n)).astype("float32")
    mod = graph_module([typed("x", (1, 1, 256))],
                       lambda emit, x: kiln.ops.call("matmul", x, kiln.ir.graph.Constant(w)))
    out = kiln.get_pipeline("default", PassContext(target=AVX512, cores=2))(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").endswith(", parallel")
    assert f"cols={cols}" in attr(out[name], "kiln.decisions")
    x = rng.standard_normal((1, 1, 256)).astype("float32")
    host = kiln.get_pipeline("default", PassContext(cores=2))(mod)   # (runs on any CPU here)
    vm = kiln.VirtualMachine(kiln.compile(host, target="llvm"), kiln.cpu())
    for got in outputs_at_threads(vm, [x]):
        np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
