"""legalize: operator calls -> call_tir of PrimFuncs made from the operators' te computes."""
import numpy as np

import kiln
from kiln import ops
from kiln.ir import assert_structural_equal
from kiln.ir.graph import Constant
from kiln.script import R, T
from kiln.transform import PassContext, fold_constant, legalize

from transform_helpers import (AVX2, AVX2_CTX, attr, graph_module, inputs_for, kernels, reference, run_vm,
                               typed)


@kiln.script.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            lv0 = R.add(x, y)
            gv = R.relu(lv0)
            R.output(gv)
        return gv


@kiln.script.ir_module
class Expected:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(Expected.add, (x, y), R.Tensor((2, 3), "float32"))
            gv = R.call_tir(Expected.relu, (lv0,), R.Tensor((2, 3), "float32"))
            R.output(gv)
        return gv

    @T.prim_func
    def add(x: T.Buffer((2, 3), "float32"), y: T.Buffer((2, 3), "float32"),
            add: T.Buffer((2, 3), "float32")):
        T.func_attr({"kiln.anchor": "add", "kiln.ops": "add"})
        for i0, i1 in T.grid(2, 3):
            with T.block("add"):
                vi0, vi1 = T.axis.remap("SS", [i0, i1])
                T.reads(x[vi0, vi1], y[vi0, vi1])
                T.writes(add[vi0, vi1])
                add[vi0, vi1] = x[vi0, vi1] + y[vi0, vi1]

    @T.prim_func
    def relu(x: T.Buffer((2, 3), "float32"), relu: T.Buffer((2, 3), "float32")):
        T.func_attr({"kiln.anchor": "relu", "kiln.ops": "relu"})
        for i0, i1 in T.grid(2, 3):
            with T.block("relu"):
                vi0, vi1 = T.axis.remap("SS", [i0, i1])
                T.reads(x[vi0, vi1])
                T.writes(relu[vi0, vi1])
                relu[vi0, vi1] = T.max(x[vi0, vi1], T.float32(0))


def test_before_expected():
    after = legalize(AVX2_CTX)(Before)
    assert_structural_equal(after, Expected)
    kiln.script.assert_roundtrip(after)


def test_identical_calls_share_one_prim_func_and_names_stay_unique():
    x, y, z = typed("x", (2, 3)), typed("y", (2, 3)), typed("z", (4,))
    mod = graph_module([x, y, z], lambda emit, x, y, z: ops.call(
        "add", emit("sum", emit("add", emit("add", x, y), y)), emit("add", z, z)))
    after = legalize(AVX2_CTX)(mod)
    calls = [b.value.args[0].name for b in after["main"].bindings()]
    # add(x, y) and add(lv, y) share "add"; add(z, z) has other types: "add1"
    assert calls == ["add", "add", "sum", "add1", "add2"]
    assert sorted(kernels(after)) == ["add", "add1", "add2", "sum"]


def test_numerics_through_the_vm():
    x, w, b = typed("x", (3, 8)), typed("w", (5, 8)), typed("b", (5,))
    mod = graph_module([x, w, b], lambda emit, x, w, b: ops.call(
        "softmax", emit("add", emit("linear", x, w), b), axis=-1))
    args = inputs_for(mod)
    np.testing.assert_allclose(run_vm(legalize(AVX2_CTX)(mod), args), reference(mod, args),
                               rtol=1e-5, atol=1e-6)


def test_operator_with_a_tir_builder():
    x = typed("x", (2, 6))
    mod = graph_module([x], lambda emit, x: ops.call("topk", x, k=2))
    after = legalize(AVX2_CTX)(mod)
    (name,) = kernels(after)
    assert attr(after[name], "kiln.ops") == "topk"
    args = inputs_for(mod)
    got, want = run_vm(after, args), reference(mod, args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)


def test_constant_weight_gets_a_pack_kernel_that_folds():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 8)).astype("float32")
    x = typed("x", (4, 8))
    mod = graph_module([x], lambda emit, x: ops.call("linear", x, Constant(w)))
    after = legalize(AVX2_CTX)(mod)
    assert kernels(after) == ["pack_nk16", "linear"]
    folded = fold_constant(AVX2_CTX)(after)
    assert kernels(folded) == ["linear"]
    (call,) = [b.value for b in folded["main"].bindings()]
    packed = call.args[1].fields[1].data
    np.testing.assert_array_equal(packed, w.reshape(2, 16, 8).transpose(0, 2, 1))
    xs = rng.standard_normal((4, 8)).astype("float32")
    np.testing.assert_allclose(run_vm(folded, [xs]), xs @ w.T, rtol=1e-5, atol=1e-5)


def test_constant_weight_with_a_partial_panel_is_padded():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((20, 8)).astype("float32")
    x = typed("x", (4, 8))
    mod = graph_module([x], lambda emit, x: ops.call("linear", x, Constant(w)))
    folded = fold_constant(AVX2_CTX)(legalize(AVX2_CTX)(mod))
    (call,) = [b.value for b in folded["main"].bindings()]
    packed = call.args[1].fields[1].data
    assert packed.shape == (2, 8, 16)
    np.testing.assert_array_equal(packed[1, :, 4:], 0)
    xs = rng.standard_normal((4, 8)).astype("float32")
    np.testing.assert_allclose(run_vm(folded, [xs]), xs @ w.T, rtol=1e-5, atol=1e-5)


def test_prepacking_can_be_turned_off():
    w = np.ones((32, 8), "float32")
    mod = graph_module([typed("x", (4, 8))], lambda emit, x: ops.call("linear", x, Constant(w)))
    after = legalize(PassContext(target=AVX2, prepack_weights=False))(mod)
    assert kernels(after) == ["linear"]


def test_pure():
    text = Before.script()
    legalize(AVX2_CTX)(Before)
    assert Before.script() == text


def test_existing_prim_funcs_and_call_tir_are_kept():
    after = legalize(AVX2_CTX)(Expected)
    assert_structural_equal(after, Expected)


def test_calls_in_the_returned_expression_are_legalized_too():
    from kiln.ir import FunctionBuilder, IRModule
    x = typed("x", (2, 3))
    fb = FunctionBuilder([x])
    mod = IRModule({"main": fb.finish(kiln.ir.GraphTuple((ops.call("relu", x), x)))})
    after = legalize(AVX2_CTX)(mod)
    assert kernels(after) == ["relu"]
    xs = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    got = run_vm(after, [xs])
    np.testing.assert_array_equal(got[0], np.maximum(xs, 0))
