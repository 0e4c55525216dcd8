"""promote_accumulators: a matmul with K in chunks keeps each row tile's accumulators in a copy
of their region across the chunk's loop (printed IR: copied in, the loop on the copy, copied
out; the guarded last tile left as it was); a tile buffer that is already the region, and a
loop whose accesses move with it, are left; the compiled products equal numpy's, with one and
with two K steps a trip, for row counts with and without a partial last tile."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.lower import lower_prim_func
from kiln.lower.promote_accumulators import promote_accumulators
from kiln.schedule.decisions import Decisions
from kiln.transform import PassContext
from kiln.transform.default_schedule import schedule_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from matmul import matmul_module  # noqa: E402

AVX512 = "llvm -mcpu=skylake-avx512"


def _scheduled(m, k, n, fixed, target=AVX512):
    """The matmul kernel of an M x K x N product with a constant B, scheduled with ``fixed``
    decisions, and its module."""
    b = np.random.default_rng(2).standard_normal((k, n)).astype("float32")
    pre = kiln.get_pipeline("default", PassContext(target=target,
                                                   disabled_passes=("default_schedule",)))(
        matmul_module(m, k, n, b))
    func = schedule_kernel(pre["matmul"], PassContext(target=target), Decisions(fixed=fixed))
    return func, pre, b


def test_chunked_tiles_accumulate_in_a_copy_of_their_region():
    func, _, _ = _scheduled(197, 1536, 384, {"kc": 768, "ku": 2, "mr": 6, "mc": 0})
    text = lower_prim_func(func).script()
    assert text.count('matmul_local_acc = T.alloc_buffer((6, 64), "float32", scope="local")') == 1
    assert "matmul_local_acc[acc_in0, acc_in1] = matmul_local[i0_0 * 6 + acc_in0, acc_in1]" in text
    assert "matmul_local[i0_0 * 6 + acc_out0, acc_out1] = matmul_local_acc[acc_out0, acc_out1]" in text
    loop = text[text.index("for k_1_0 in range(384):"):text.index("for acc_out0")]
    assert "matmul_local[" not in loop and "matmul_local_acc[i0_1, i1_1] = matmul_local_acc[i0_1, i1_1] +" in loop
    # the guarded last tile (rows 192-196) keeps its guards and the big buffer
    tail = text[text.index("for i0_0_t in"):]
    assert "if i0_0_t * 6 + i0_1 < 197:" in tail and "matmul_local_acc" not in tail


def test_a_tile_that_is_its_whole_buffer_is_left():
    """Without K chunks the accumulators are a 6 x 64 buffer of their own: nothing to copy."""
    func, _, _ = _scheduled(192, 256, 128, {"kc": 0, "ku": 2, "mr": 6, "mc": 0})
    lowered = lower_prim_func(func)
    assert "_acc" not in lowered.script()
    assert promote_accumulators(lowered) is lowered


@pytest.mark.parametrize("m", [197, 192, 131])
@pytest.mark.parametrize("ku", [1, 2])
def test_chunked_products_equal_numpy(m, ku):
    target = "llvm"
    func, pre, b = _scheduled(m, 1536, 128, {"kc": 768, "ku": ku, "mr": 6, "mc": 0}, target)
    funcs = dict(pre.functions)
    funcs["matmul"] = func
    vm = kiln.VirtualMachine(kiln.compile(kiln.IRModule(funcs, pre.attrs), target=target), kiln.cpu())
    a = np.random.default_rng(3).standard_normal((m, 1536)).astype("float32")
    for threads in (1, 2):
        kiln.set_num_threads(threads)
        try:
            got = vm["main"](kiln.nd.array(a)).numpy()
        finally:
            kiln.set_num_threads(0)
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
