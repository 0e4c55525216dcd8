"""Reductions over an empty axis give their start value (sum 0, max -inf, min +inf, prod 1,
mean nan), compiled and in the reference evaluator: the init runs before the reduction loops
(``kiln.ir.reduce_init``), not "at the first reduction iteration", which never comes."""
import warnings

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.ir import IfThenElse, Var, collect
from kiln.ir.reduce_init import hoist_reduction_inits
from kiln.lower import opaque_blocks

SENTINEL = 7.0  # outputs start filled with this: an init that never runs leaves it


def _reduce_program(combiner, schedule=None):
    """``out[i, j] = combiner(A[i, k, j] for k < n)`` over a symbolic n, with the loops of
    te's default order, or as ``schedule(sch, block)`` rearranges them."""
    n = Var("n")
    A = te.placeholder((2, n, 4), "float32", name="A")
    k = te.reduce_axis((0, n), name="k")
    reducer = {"sum": te.sum, "max": te.max, "min": te.min}[combiner]
    out = te.compute((2, 4), lambda i, j: reducer(A[i, k, j], axis=k), name="out")
    mod = kiln.IRModule({"main": te.create_prim_func([A, out])})
    if schedule is None:
        return mod
    sch = kiln.Schedule(mod)
    schedule(sch, sch.get_block("out"))
    return sch.mod


def _k_outside_j(combiner):
    def reorder(sch, blk):
        i, j, k = sch.get_loops(blk)
        sch.reorder(i, k, j)        # the init needs its own copy of the j loop
    return _reduce_program(combiner, reorder)


def _split_k(combiner):
    """The reduction loop split by 3 by hand (split needs a constant extent): a tail predicate
    ``k0 * 3 + k1 < n`` on the reduction, and the j loop innermost and vectorized."""
    from kiln.ir import Block, BlockRealize, For, PrimFunc, root_realize
    te_func = _reduce_program(combiner)["main"]
    A, out = te_func.params
    n = A.shape[1]
    (blk,) = [b for b in collect(te_func.body, Block) if b.init is not None]
    i, j, k0, k1 = Var("i"), Var("j"), Var("k0"), Var("k1")
    k = k0 * 3 + k1
    realize = BlockRealize((i, j, k), k < n, blk)
    body = For(k1, 0, 3, "serial", For(j, 0, 4, "vectorized", realize))
    body = For(i, 0, 2, "serial", For(k0, 0, (n + 2) // 3, "serial", body))
    return kiln.IRModule({"main": PrimFunc((A, out), root_realize(body))})


def _fused_j_k(combiner):
    def fuse(sch, blk):
        i, j, k = sch.get_loops(blk)
        sch.fuse(j, k)              # one loop drives a spatial and a reduction iterator
    return _reduce_program(combiner, fuse)


NUMPY = {"sum": np.sum, "max": np.max, "min": np.min}


def _expected(combiner, a):
    if a.shape[1] == 0:
        return np.full((2, 4), {"sum": 0.0, "max": -np.inf, "min": np.inf}[combiner], np.float32)
    return NUMPY[combiner](a, axis=1)


@pytest.mark.parametrize("combiner", ["sum", "max", "min"])
@pytest.mark.parametrize("program", [_reduce_program, _k_outside_j, _split_k])
def test_compiled_and_evaluated_empty_reduction(combiner, program):
    mod = program(combiner)
    rt = kiln.build(mod)
    for n in (0, 5):   # one library: the extent is only known at run time
        a = np.random.default_rng(n).standard_normal((2, n, 4)).astype(np.float32)
        want = _expected(combiner, a)
        got = np.full((2, 4), SENTINEL, np.float32)
        rt["main"](a, got)
        # (atol: a sum over a symbolic extent is added in vector lanes, then pairwise, in an
        # order other than numpy's: a sum of 5 near 0.04 differs in its last bits.)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        ref = np.full((2, 4), SENTINEL, np.float32)
        kiln.evaluate(mod, a, ref)
        np.testing.assert_allclose(ref, want, rtol=1e-6)


def test_static_zero_extent():
    A = te.placeholder((2, 0, 4), "float32", name="A")
    k = te.reduce_axis((0, 0), name="k")
    out = te.compute((2, 4), lambda i, j: te.max(A[i, k, j], axis=k), name="out")
    mod = kiln.IRModule({"main": te.create_prim_func([A, out])})
    got = np.full((2, 4), SENTINEL, np.float32)
    kiln.build(mod)["main"](np.zeros((2, 0, 4), np.float32), got)
    np.testing.assert_array_equal(got, np.full((2, 4), -np.inf, np.float32))


def test_hoisted_init_runs_before_the_reduction_loop():
    low = opaque_blocks(_k_outside_j("sum")["main"])
    assert not collect(low.body, IfThenElse)     # no "if k == 0" left
    text = low.script()
    assert "j_init" in text and text.index("j_init") < text.index("for k")


def test_init_that_cannot_be_separated_stays_conditional():
    # A fused spatial x reduction loop: the init keeps its first-iteration guard, and
    # non-empty reductions still compute right.
    func = _fused_j_k("sum")["main"]
    assert hoist_reduction_inits(func) is func
    low = opaque_blocks(func)
    assert len(collect(low.body, IfThenElse)) == 1
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    got = np.full((2, 4), SENTINEL, np.float32)
    kiln.build(kiln.IRModule({"main": func}))["main"](a, got)
    np.testing.assert_allclose(got, a.sum(1), rtol=1e-6)


# ---- graph operators ----------------------------------------------------------------------
def _compile_op(op, shape, **attrs):
    from kiln import ops
    from kiln.ir.graph import GraphVar, TensorType
    from kiln.ir.graph_builder import FunctionBuilder
    x = GraphVar("x", TensorType(shape, "float32"))
    fb = FunctionBuilder((x,))
    with fb.dataflow():
        y = fb.emit_output(ops.call(op, x, **attrs))
    mod = kiln.get_pipeline("default")(kiln.IRModule({"main": fb.finish(y)}))
    return kiln.VirtualMachine(kiln.compile(mod, target="llvm"), kiln.cpu())


NUMPY_EMPTY = {"sum": lambda x: np.sum(x, axis=1), "prod": lambda x: np.prod(x, axis=1),
               "mean": lambda x: np.mean(x, axis=1),
               "max": lambda x: np.max(x, axis=1, initial=-np.inf),
               "min": lambda x: np.min(x, axis=1, initial=np.inf)}


@pytest.mark.parametrize("op", sorted(NUMPY_EMPTY))
def test_graph_ops_over_an_empty_axis(op):
    from kiln import ops
    x = np.zeros((2, 0, 4), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy: "Mean of empty slice"
        want = NUMPY_EMPTY[op](x).astype(np.float32)
        ref = ops.get(op).reference(x, axis=1)
    got = _compile_op(op, (2, 0, 4), axis=1)["main"](x).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref, want)


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_graph_ops_over_a_symbolic_axis_that_is_empty_at_run_time(op):
    vm = _compile_op(op, (2, Var("n", "int64"), 4), axis=1)
    for n in (3, 0):
        x = np.random.default_rng(n).standard_normal((2, n, 4)).astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = NUMPY_EMPTY[op](x).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x).numpy(), want, rtol=1e-5)
