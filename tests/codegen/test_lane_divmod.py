"""``i // c`` and ``i % c`` over the lanes of a vectorized loop whose lanes stay between two
multiples of ``c`` (lower_expr's ``Affine.align``, ``_within_one_multiple``): the quotient is
one value and the remainder contiguous, so a permuted read (a channel-blocked tensor copied to
rows) is a vector load, not a gather (AVX-512) or a lane at a time (AVX2). Where the lanes may
cross a multiple (a loop starting off a multiple of the block) the access stays per lane. The
results equal numpy's on every target here."""
import numpy as np
import pytest

import kiln
from kiln.codegen.emit import lower_to_llvm
from kiln.script import T

AVX2 = "llvm -mcpu=haswell"


@kiln.script.ir_module
class BlocksToRows:
    """rows[p, c] = x[c // 16, p, c % 16]: a [C/16, P, 16] tensor (NCHW16c with one image row)
    copied to [P, C] rows, C = 96."""
    @T.prim_func
    def main(X: T.Buffer((6, 5, 16), "float32"), R: T.Buffer((5, 96), "float32")):
        for p in T.serial(5):
            for c in T.vectorized(96):
                with T.block("R"):
                    vp = T.axis.spatial(5, p)
                    vc = T.axis.spatial(96, c)
                    R[vp, vc] = X[vc // 16, vp, vc % 16]


@kiln.script.ir_module
class ShiftedBlocksToRows:
    """The same read from column 4 on: chunks start at 4 + a multiple of the width, so their
    lanes cross multiples of 16."""
    @T.prim_func
    def main(X: T.Buffer((6, 5, 16), "float32"), R: T.Buffer((5, 92), "float32")):
        for p in T.serial(5):
            for c in T.vectorized(92):
                with T.block("R"):
                    vp = T.axis.spatial(5, p)
                    vc = T.axis.spatial(92, c)
                    R[vp, vc] = X[(vc + 4) // 16, vp, (vc + 4) % 16]


def _run(mod, x_shape, out_shape, target):
    x = np.random.default_rng(0).standard_normal(x_shape).astype("float32")
    out = kiln.nd.array(np.zeros(out_shape, "float32"))
    kiln.build(mod, target=target)(kiln.nd.array(x), out)
    return x, out.numpy()


def _per_lane(ir_text):
    """Gathers and element inserts in the (unoptimized) IR: reads a lane at a time."""
    return ir_text.count("llvm.masked.gather") + ir_text.count("insertelement <")


@pytest.mark.parametrize("target", ["llvm", AVX2])
def test_a_block_index_over_aligned_lanes_is_a_vector_load(target):
    ir_text = str(lower_to_llvm(BlocksToRows, target)[0])
    assert _per_lane(ir_text) == 0, ir_text
    x, got = _run(BlocksToRows, (6, 5, 16), (5, 96), target)
    np.testing.assert_array_equal(got, x.transpose(1, 0, 2).reshape(5, 96))


@pytest.mark.parametrize("target", ["llvm", AVX2])
def test_lanes_that_cross_a_multiple_read_per_lane(target):
    ir_text = str(lower_to_llvm(ShiftedBlocksToRows, target)[0])
    assert _per_lane(ir_text) > 0
    x, got = _run(ShiftedBlocksToRows, (6, 5, 16), (5, 92), target)
    np.testing.assert_array_equal(got, x.transpose(1, 0, 2).reshape(5, 96)[:, 4:])
