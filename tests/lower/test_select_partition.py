"""partition_selects: a vectorized loop whose Select conditions hold only in the middle of its
range (zero padding) splits into border loops and a middle loop without the condition and the
clamps (printed IR), computing the same (compiled, vs numpy)."""
import numpy as np
import pytest

import kiln
from kiln.lower import lower_prim_func
from kiln.lower.blocks import opaque_blocks
from kiln.lower.select_partition import partition_selects
from kiln.script import T


@kiln.script.ir_module
class PadRows:
    @T.prim_func
    def main(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 19), "float32")):
        for i in range(4):
            for j in T.vectorized(19):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = T.Select(vj - 2 >= 0 and vj - 2 < 16,
                                         A[vi, T.min(T.max(vj - 2, 0), 15)], T.float32(0))


@kiln.script.ir_module
class Strided:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((16,), "float32")):
        for j in T.vectorized(16):
            with T.block("B"):
                vj = T.axis.spatial(16, j)
                B[vj] = T.Select(vj % 2 == 0, A[vj // 2], T.float32(0))


@kiln.script.ir_module
class PadBlockedPixels:
    """A channel-blocked input padded by one pixel on each side: the condition is on the pixel
    loop, the vector runs over a pixel's 16 channels."""
    @T.prim_func
    def main(A: T.Buffer((3, 10, 16), "float32"), B: T.Buffer((3, 12, 16), "float32")):
        for i in range(3):
            for x in range(12):
                for c in T.vectorized(16):
                    with T.block("B"):
                        vi, vx, vc = T.axis.remap("SSS", [i, x, c])
                        B[vi, vx, vc] = T.Select(vx - 1 >= 0 and vx - 1 < 10,
                                                 A[vi, T.min(T.max(vx - 1, 0), 9), vc], T.float32(0))


def test_a_pixel_loop_around_a_vector_splits_too():
    text = lower_prim_func(PadBlockedPixels["main"]).script()
    assert "T.serial(1, 11)" in text
    middle = text.split("T.serial(1, 11):")[1].split("for x")[0]
    assert "Select" not in middle and "T.min" not in middle and "A[i, x - 1, c]" in middle, middle


def test_padding_loop_splits_into_borders_and_a_plain_copy():
    text = lower_prim_func(PadRows["main"]).script()
    assert "T.vectorized(2)" in text and "T.vectorized(2, 18)" in text and "T.vectorized(18, 19)" in text
    middle = text.split("T.vectorized(2, 18):")[1].split("for j")[0]
    assert "Select" not in middle and "T.min" not in middle and "A[i, j - 2]" in middle, middle


def test_condition_of_another_form_stays():
    func = opaque_blocks(Strided["main"])
    assert partition_selects(func).script() == func.script()


@pytest.mark.parametrize("mod,ref", [
    (PadRows, lambda a: np.pad(a, [(0, 0), (2, 1)])),
    (Strided, lambda a: np.stack([a, np.zeros_like(a)], 1).reshape(-1)),
    (PadBlockedPixels, lambda a: np.pad(a, [(0, 0), (1, 1), (0, 0)])),
])
def test_partitioned_selects_compute_the_same(mod, ref):
    rt = kiln.build(mod, target="llvm")
    a_shape, b_shape = [tuple(int(d.value) for d in p.shape) for p in mod["main"].params]
    a = np.random.default_rng(0).standard_normal(a_shape).astype("float32")
    b = kiln.nd.array(np.full(b_shape, np.nan, "float32"))
    rt(kiln.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), ref(a))
