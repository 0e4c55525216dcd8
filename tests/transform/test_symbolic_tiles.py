"""A contraction over a symbolic number of rows (batch x sequence of a dynamic-shape model) gets
the full register tile: rows split by MR with a guarded last tile (which lowering partitions
off), not one row at a time. Checked against numpy for row counts with and without a tail."""
import numpy as np
import pytest

import kiln
from transform_helpers import AVX2, AVX2_CTX
from kiln import ops
from kiln.ir import Constant, FunctionBuilder, GraphVar, IRModule, TensorType, Var


@pytest.fixture(scope="module")
def dense_relu():
    n = Var("n", "int64")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 48)).astype("float32")
    b = rng.standard_normal(48).astype("float32")
    x = GraphVar("x", TensorType((n, 96), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit(ops.call("matmul", x, Constant(w)))
        gv = fb.emit_output(ops.call("relu", fb.emit(ops.call("add", y, Constant(b)))))
    mod = kiln.get_pipeline("default", AVX2_CTX)(IRModule({"main": fb.finish(gv)}))
    return mod, kiln.VirtualMachine(kiln.compile(mod, target=AVX2), kiln.cpu()), w, b


def test_symbolic_rows_get_the_register_tile(dense_relu):
    mod = dense_relu[0]
    (kernel,) = [f for name, f in mod.functions.items() if name.startswith("fused_matmul")]
    assert dict(kernel.attrs)["kiln.schedule"].startswith("matmul: tile 6x16")


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 64, 67])
def test_symbolic_rows_compute_the_same(dense_relu, rows):
    _, vm, w, b = dense_relu
    x = np.random.default_rng(rows).standard_normal((rows, 96)).astype("float32")
    got = vm["main"](kiln.nd.array(x)).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)
