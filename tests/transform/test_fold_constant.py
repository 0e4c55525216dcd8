"""fold_constant: calls whose inputs are all constants become constants."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import assert_structural_equal
from kiln.ir.graph import Constant
from kiln.script import R, T
from kiln.transform import PassContext, fold_constant, legalize

from transform_helpers import AVX2, AVX2_CTX, graph_module, kernels, typed


@kiln.script.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            lv0 = R.add(R.const([1.0, 2.0], "float32"), R.const([10.0, 20.0], "float32"))
            lv1 = R.multiply(lv0, R.const([2.0, 2.0], "float32"))
            gv = R.add(x, lv1)
            R.output(gv)
        return gv


@kiln.script.ir_module
class Expected:
    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            gv = R.add(x, R.const([22.0, 44.0], "float32"))
            R.output(gv)
        return gv


def test_operator_chain_folds():
    assert_structural_equal(fold_constant(AVX2_CTX)(Before), Expected)


@kiln.script.ir_module
class BeforeTir:
    @T.prim_func
    def double(A: T.Buffer((2,), "float32"), B: T.Buffer((2,), "float32")):
        for i in range(2):
            with T.block("B"):
                vi = T.axis.spatial(2, i)
                B[vi] = A[vi] * 2.0

    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(BeforeTir.double, (R.const([1.0, 3.0], "float32"),),
                             R.Tensor((2,), "float32"))
            gv = R.call_tir(BeforeTir.double, (x,), R.Tensor((2,), "float32"))
            lv1 = R.call_tir(BeforeTir.double, (lv0,), R.Tensor((2,), "float32"))
            R.output(gv, lv1)
        return (gv, lv1)


@kiln.script.ir_module
class ExpectedTir:
    @T.prim_func
    def double(A: T.Buffer((2,), "float32"), B: T.Buffer((2,), "float32")):
        for i in range(2):
            with T.block("B"):
                vi = T.axis.spatial(2, i)
                B[vi] = A[vi] * 2.0

    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            gv = R.call_tir(ExpectedTir.double, (x,), R.Tensor((2,), "float32"))
            R.output(gv)
        return (gv, R.const([4.0, 12.0], "float32"))


@pytest.mark.parametrize("backend", ["evaluator", "build"])
def test_call_tir_on_constants_folds(backend):
    after = fold_constant(PassContext(target=AVX2, fold_backend=backend))(BeforeTir)
    assert_structural_equal(after, ExpectedTir)


def test_unused_prim_funcs_are_removed():
    x = typed("x", (2,))
    mod = graph_module([x], lambda emit, x: ops.call(
        "add", x, emit("exp", Constant(np.zeros(2, "float32")))))
    legal = legalize(AVX2_CTX)(mod)
    assert kernels(legal) == ["exp", "add"]
    folded = fold_constant(AVX2_CTX)(legal)
    assert sorted(k for k in folded.functions if k != "main") == ["add"]


def test_nothing_to_fold_returns_the_same_module():
    x = typed("x", (2,))
    mod = graph_module([x], lambda emit, x: ops.call("relu", x))
    assert fold_constant(AVX2_CTX)(mod) is mod


def test_size_limit():
    big = Constant(np.ones((64,), "float32"))
    mod = graph_module([typed("x", (64,))], lambda emit, x: ops.call("add", x, emit("exp", big)))
    kept = fold_constant(PassContext(target=AVX2, fold_max_elements=32))(mod)
    assert [b.value.op for b in kept["main"].bindings()] == ["exp", "add"]
    folded = fold_constant(PassContext(target=AVX2, fold_max_elements=64))(mod)
    assert [b.value.op for b in folded["main"].bindings()] == ["add"]


def test_tuple_results_and_items_fold():
    c = Constant(np.arange(6, dtype="float32"))
    x = typed("x", (3,))
    from kiln.ir import FunctionBuilder, IRModule
    from kiln.ir.graph import TupleGetItem
    fb = FunctionBuilder([x])
    with fb.dataflow():
        parts = fb.emit(ops.call("split", c, indices_or_sections=2))
        first = fb.emit(TupleGetItem(parts, 0))
        gv = fb.emit_output(ops.call("add", x, first))
    mod = IRModule({"main": fb.finish(gv)})
    after = fold_constant(AVX2_CTX)(mod)
    (b,) = list(after["main"].bindings())
    np.testing.assert_array_equal(b.value.args[1].data, [0, 1, 2])


def test_call_dps_packed_is_never_folded():
    from kiln.ir import FunctionBuilder, IRModule, TensorType
    from kiln.ir.graph import call_dps_packed
    fb = FunctionBuilder([])
    with fb.dataflow():
        gv = fb.emit_output(call_dps_packed("env.relu", (Constant(np.ones(2, "float32")),),
                                            TensorType((2,), "float32")))
    mod = IRModule({"main": fb.finish(gv)})
    assert fold_constant(AVX2_CTX)(mod) is mod


@pytest.mark.parametrize("op,shape", [("linear", (40, 8)), ("linear", (32, 8)),
                                      ("matmul", (8, 24)), ("conv2d", (16, 3, 3, 3))])
def test_pack_kernels_fold_with_numpy_exactly_as_the_evaluator(op, shape):
    from kiln.ir.evaluator import evaluate
    from kiln.transform.layout import fold_pack
    w = np.random.default_rng(0).standard_normal(shape).astype("float32")
    x_shape = {"linear": (16, 8), "matmul": (16, 8), "conv2d": (1, 3, 8, 8)}[op]
    mod = graph_module([typed("x", x_shape)], lambda emit, x: ops.call(op, x, Constant(w)))
    legal = legalize(AVX2_CTX)(mod)
    (pack_name,) = [k for k in kernels(legal) if k.startswith("pack_")]
    pack = legal[pack_name]
    out_shape = tuple(int(s.value) for s in pack.params[1].shape)
    want = np.zeros(out_shape, "float32")
    evaluate(pack, w.copy(), want)
    np.testing.assert_array_equal(fold_pack(pack, [w]), want)
