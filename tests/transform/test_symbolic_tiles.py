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
    """6 x 16 tiles; in parallel (a symbolic row count counts as many rows, not one), over the
    column blocks only (the row loop, fused in, would lose its peeled last tile)."""
    mod = dense_relu[0]
    (kernel,) = [f for name, f in mod.functions.items() if name.startswith("fused_matmul")]
    assert dict(kernel.attrs)["kiln.schedule"] == "matmul: tile 6x16, epilogue inlined, packed weight, parallel"
    assert "parallel=1" in dict(kernel.attrs)["kiln.decisions"]


def test_symbolic_rows_tail_tile_runs_unguarded(dense_relu):
    """The last tile (rows left R = n - 6 i_0_t, 1 to 5) accumulates all 6 rows without guards,
    the rows past R reading row R - 1, and only its write-back is guarded: its accumulators
    stay in registers (``lower/loop_partition.py``)."""
    from kiln.lower import lower_prim_func
    mod = dense_relu[0]
    (kernel,) = [f for name, f in mod.functions.items() if name.startswith("fused_matmul")]
    tail = lower_prim_func(kernel).script().split("_t in T.serial(")[1]
    update = next(line for line in tail.splitlines() if "_local[" in line and " + x[" in line)
    assert "T.min(" in update
    guarded = [line for line in tail.splitlines() if line.strip().startswith("if ")]
    assert len(guarded) == 2 and ">=" in guarded[0] and "< n" in guarded[1]


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 12, 64, 67])
def test_symbolic_rows_compute_the_same(dense_relu, rows):
    _, vm, w, b = dense_relu
    x = np.random.default_rng(rows).standard_normal((rows, 96)).astype("float32")
    got = vm["main"](kiln.nd.array(x)).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def keys_transposed():
    """A transpose whose innermost output axis is symbolic: (1, 4, n, 8) -> (1, 4, 8, n)."""
    n = Var("n", "int64")
    x = GraphVar("x", TensorType((1, 4, n, 8), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(ops.call("permute_dims", x, axes=(0, 1, 3, 2)))
    mod = kiln.get_pipeline("default", AVX2_CTX)(IRModule({"main": fb.finish(gv)}))
    return mod, kiln.VirtualMachine(kiln.compile(mod, target=AVX2), kiln.cpu())


def test_symbolic_innermost_axis_is_vectorized_where_it_is(keys_transposed):
    """Vectorized along n in vectors of 16 (the last one guarded), the outer axes fused: not
    all axes fused into chunks whose lanes divide by n to find their indices (116 us for n =
    128 at (1, 4, 64, n); 9 after)."""
    (kernel,) = [f for name, f in keys_transposed[0].functions.items() if name.startswith("permute")]
    assert dict(kernel.attrs)["kiln.schedule"] == "elementwise: vectorize 16 of n, parallel"


@pytest.mark.parametrize("n", [1, 3, 8, 17, 64])
def test_symbolic_innermost_axis_computes_the_same(keys_transposed, n):
    x = np.random.default_rng(n).standard_normal((1, 4, n, 8)).astype("float32")
    got = keys_transposed[1]["main"](kiln.nd.array(x)).numpy()
    np.testing.assert_array_equal(got, x.transpose(0, 1, 3, 2))


def test_symbolic_rows_run_on_one_thread_while_they_are_few():
    """A layer norm over (n, 256): its rows run in parallel only from
    ceil(parallel_min_elements / 256) of them on (``parallel_by_work``), and it computes the
    same on either side of that (at 2 threads)."""
    from kiln.lower import lower_prim_func
    n = Var("n", "int64")
    rng = np.random.default_rng(3)
    g, b = rng.standard_normal(256).astype("float32"), rng.standard_normal(256).astype("float32")
    x = GraphVar("x", TensorType((n, 256), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(ops.call("layer_norm", x, Constant(g), Constant(b), axes=(-1,)))
    mod = kiln.get_pipeline("default", AVX2_CTX)(IRModule({"main": fb.finish(gv)}))
    (kernel,) = [f for name, f in mod.functions.items() if name.startswith("layer_norm")]
    least = -(-AVX2_CTX.parallel_min_elements // 256)
    assert f'annotations={{"kiln.parallel_min_extent": {least}}}' in lower_prim_func(kernel).script()
    vm = kiln.VirtualMachine(kiln.compile(mod, target=AVX2), kiln.cpu())
    kiln.set_num_threads(2)
    try:
        for rows in (3, least - 1, least, 2 * least + 5):
            a = rng.standard_normal((rows, 256)).astype("float32")
            got = vm["main"](kiln.nd.array(a)).numpy()
            mean, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
            np.testing.assert_allclose(got, (a - mean) / np.sqrt(var + 1e-5) * g + b, rtol=1e-4, atol=1e-4)
    finally:
        kiln.set_num_threads(0)
