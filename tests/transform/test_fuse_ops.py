"""fuse_ops: operator groups become one tensor program each (counted in kernels)."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import assert_structural_equal
from kiln.ir.graph import Constant
from kiln.script import R, T
from kiln.transform import bind_params, default_schedule, fuse_ops, legalize
from kiln.transform.fuse_ops import find_groups

from transform_helpers import (AVX2_CTX, attr, graph_module, inputs_for, kernel_calls, kernels, reference,
                               run_vm, typed)
from transform_models import conv_bn_relu, mlp, transformer_block


@kiln.script.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((2, 8), "float32"), w: R.Tensor((4, 8), "float32"),
             b: R.Tensor((4,), "float32")):
        with R.dataflow():
            lv0 = R.linear(x, w)
            lv1 = R.add(lv0, b)
            gv = R.relu(lv1)
            R.output(gv)
        return gv


@kiln.script.ir_module
class Expected:
    @R.function
    def main(x: R.Tensor((2, 8), "float32"), w: R.Tensor((4, 8), "float32"),
             b: R.Tensor((4,), "float32")):
        with R.dataflow():
            gv = R.call_tir(Expected.fused_linear_add_relu, (x, w, b), R.Tensor((2, 4), "float32"))
            R.output(gv)
        return gv

    @T.prim_func
    def fused_linear_add_relu(x: T.Buffer((2, 8), "float32"), w: T.Buffer((4, 8), "float32"),
                              b: T.Buffer((4,), "float32"), relu: T.Buffer((2, 4), "float32")):
        T.func_attr({"kiln.anchor": "linear", "kiln.ops": "linear+add+relu"})
        linear = T.alloc_buffer((2, 4), "float32")
        add = T.alloc_buffer((2, 4), "float32")
        for i0, i1, k in T.grid(2, 4, 8):
            with T.block("linear"):
                vi0, vi1, vk = T.axis.remap("SSR", [i0, i1, k])
                T.reads(x[vi0, vk], w[vi1, vk])
                T.writes(linear[vi0, vi1])
                with T.init():
                    linear[vi0, vi1] = T.float32(0)
                linear[vi0, vi1] = linear[vi0, vi1] + x[vi0, vk] * w[vi1, vk]
        for i0, i1 in T.grid(2, 4):
            with T.block("add"):
                vi0, vi1 = T.axis.remap("SS", [i0, i1])
                T.reads(linear[vi0, vi1], b[vi1])
                T.writes(add[vi0, vi1])
                add[vi0, vi1] = linear[vi0, vi1] + b[vi1]
        for i0, i1 in T.grid(2, 4):
            with T.block("relu"):
                vi0, vi1 = T.axis.remap("SS", [i0, i1])
                T.reads(add[vi0, vi1])
                T.writes(relu[vi0, vi1])
                relu[vi0, vi1] = T.max(add[vi0, vi1], T.float32(0))


def test_before_expected():
    # One te graph: the linear's and the add's results are scratch buffers of one program.
    assert_structural_equal(fuse_ops(AVX2_CTX)(Before), Expected)


def _check_numerics(mod, fused, args=None):
    """The fused module (unscheduled, and through the default schedules) computes what the
    original does."""
    args = inputs_for(mod) if args is None else args
    want = reference(mod, args)
    for compiled in (legalize(AVX2_CTX)(fused), default_schedule(AVX2_CTX)(legalize(AVX2_CTX)(fused))):
        np.testing.assert_allclose(run_vm(compiled, args), want, rtol=2e-5, atol=2e-5)


def test_mlp_is_two_kernels():
    mod = mlp()
    fused = fuse_ops(AVX2_CTX)(mod)
    assert kernels(fused) == ["fused_linear_add_relu", "fused_linear_add"]
    _check_numerics(mod, fused)


@pytest.mark.parametrize("as_scale_shift", [False, True])
def test_conv_bn_relu_is_one_kernel(as_scale_shift):
    mod = conv_bn_relu(as_scale_shift=as_scale_shift)
    fused = fuse_ops(AVX2_CTX)(mod)
    assert kernel_calls(fused) == 1
    args = inputs_for(mod)
    if not as_scale_shift:
        args[-1] = np.abs(args[-1]) + 0.5       # variances are positive
    _check_numerics(mod, fused, args)


def test_transformer_block_kernel_count():
    mod = transformer_block()
    fused = legalize(AVX2_CTX)(fuse_ops(AVX2_CTX)(mod))
    # layer_norm, 3 x (linear+add, reshape+permute), matmul*scale, softmax, matmul,
    # permute+reshape, linear+add+residual, layer_norm, linear+add+gelu, linear+add+residual
    assert kernel_calls(fused) == 15
    assert kernel_calls(legalize(AVX2_CTX)(mod)) == 29
    args = inputs_for(mod)
    np.testing.assert_allclose(run_vm(fused, args), reference(mod, args), rtol=1e-4, atol=1e-4)


def test_value_used_twice_fuses_only_when_both_uses_are_in_the_group():
    x = typed("x", (4, 8))
    mod = graph_module([x], lambda emit, x: ops.call(
        "add", emit("exp", emit("relu", x)), emit("relu", x)))
    # relu(x) twice: two separate values; each used once -> everything fuses
    assert kernel_calls(fuse_ops(AVX2_CTX)(mod)) == 1
    # one relu read twice, both reads inside the exp-add group: it joins (gelu's pattern)
    mod2 = graph_module([x], lambda emit, x: ops.call(
        "add", emit("exp", (r := emit("relu", x))), r))
    groups = [[b.value.op for b in g] for g in find_groups(mod2["main"])]
    assert groups == [["relu", "exp", "add"]]
    _check_numerics(mod2, fuse_ops(AVX2_CTX)(mod2))
    # read by a matmul too: an elementwise producer never feeds an anchor inside a kernel
    w = Constant(np.random.default_rng(0).standard_normal((8, 8)).astype("float32"))
    mod3 = graph_module([x], lambda emit, x: ops.call(
        "add", emit("exp", (r := emit("relu", x))), emit("matmul", r, w)))
    groups = [[b.value.op for b in g] for g in find_groups(mod3["main"])]
    assert ["relu"] in groups, groups
    _check_numerics(mod3, fuse_ops(AVX2_CTX)(mod3))


def test_gelu_fuses_into_the_matmul_that_feeds_it():
    """gelu(t) = t * 0.5 * (1 + erf(t / sqrt(2))) reads t twice; both reads are in the
    epilogue, so linear + bias + gelu is one kernel."""
    rng = np.random.default_rng(1)
    w = Constant(rng.standard_normal((64, 32)).astype("float32"))
    bias = Constant(rng.standard_normal((64,)).astype("float32"))

    def body(emit, x):
        t = emit("add", emit("linear", x, w), bias)
        e = emit("erf", emit("divide", t, Constant(np.array(1.4142135, "float32"))))
        f = emit("add", e, Constant(np.array(1.0, "float32")))
        return ops.call("multiply", emit("multiply", t, f), Constant(np.array(0.5, "float32")))
    mod = graph_module([typed("x", (12, 32))], body)
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith("matmul: tile"), attr(out[name], "kiln.schedule")
    assert "epilogue inlined" in attr(out[name], "kiln.schedule")
    _check_numerics(mod, out)


def test_residual_add_joins_the_matmul_and_layer_norm_reads_it_once():
    """A pre-LN transformer's ``h = x + (y @ W + b)`` then ``layer_norm(h)``, with ``h`` used
    again by the next residual: the bias and the residual add are the matmul's epilogue (one
    pass writing ``h``), the layer norm one pass reading it; no kernel of its own for the add."""
    rng = np.random.default_rng(2)
    w = Constant(rng.standard_normal((32, 32)).astype("float32"))
    bias = Constant(rng.standard_normal((32,)).astype("float32"))
    g = Constant(rng.uniform(0.5, 1.5, 32).astype("float32"))
    beta = Constant(rng.standard_normal(32).astype("float32"))

    def body(emit, x, y):
        h = emit("add", x, emit("add", bias, emit("matmul", y, w)))
        n = emit("layer_norm", h, g, beta, axes=(1,), eps=1e-5)
        return ops.call("add", h, n)
    mod = graph_module([typed("x", (16, 32)), typed("y", (16, 32))], body)
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    names = kernels(out)
    assert [attr(out[n], "kiln.ops") for n in names] == ["matmul+add+add", "layer_norm+add"], names
    assert "epilogue inlined" in attr(out[names[0]], "kiln.schedule")
    _check_numerics(mod, out)


def test_reduce_takes_elementwise_producers_and_consumers():
    x = typed("x", (4, 8))
    mod = graph_module([x], lambda emit, x: ops.call(
        "sqrt", emit("sum", emit("exp", x), axis=1)))
    groups = [[b.value.op for b in g] for g in find_groups(mod["main"])]
    assert groups == [["exp", "sum", "sqrt"]]
    _check_numerics(mod, fuse_ops(AVX2_CTX)(mod))


def test_two_anchors_never_share_a_kernel():
    a, b, c = typed("a", (8, 8)), typed("b", (8, 8)), typed("c", (8, 8))
    mod = graph_module([a, b, c], lambda emit, a, b, c: ops.call(
        "matmul", emit("relu", emit("matmul", a, b)), c))
    groups = [[b.value.op for b in g] for g in find_groups(mod["main"])]
    assert groups == [["matmul", "relu"], ["matmul"]]
    mod2 = graph_module([a, b, c], lambda emit, a, b, c: ops.call(
        "add", emit("matmul", a, b), emit("matmul", a, c)))
    groups = [[b.value.op for b in g] for g in find_groups(mod2["main"])]
    assert groups == [["matmul"], ["matmul", "add"]]
    _check_numerics(mod2, fuse_ops(AVX2_CTX)(mod2))


def test_injective_chains_fuse_but_not_into_anchors():
    x, w = typed("x", (2, 3, 8)), typed("w", (8, 4))
    mod = graph_module([x, w], lambda emit, x, w: ops.call(
        "matmul", emit("reshape", emit("permute_dims", x, axes=(1, 0, 2)), shape=(6, 8)), w))
    groups = [[b.value.op for b in g] for g in find_groups(mod["main"])]
    assert groups == [["permute_dims", "reshape"], ["matmul"]]
    _check_numerics(mod, fuse_ops(AVX2_CTX)(mod))


def test_broadcasting_epilogue_of_a_different_shape_is_not_fused():
    x, w, z = typed("x", (1, 8)), typed("w", (4, 8)), typed("z", (3, 4))
    mod = graph_module([x, w, z], lambda emit, x, w, z: ops.call("add", emit("linear", x, w), z))
    groups = [[b.value.op for b in g] for g in find_groups(mod["main"])]
    assert groups == [["linear"], ["add"]]


def test_constant_weights_are_packed_once():
    mod = mlp()
    args = inputs_for(mod)
    bound = bind_params("main", {p.name: a for p, a in zip(mod["main"].params[1:], args[1:])})(mod)
    fused = fuse_ops(AVX2_CTX)(bound)
    # one pack kernel per weight shape, each called once on its constant
    assert kernels(fused) == ["pack_nk16", "fused_linear_add_relu", "pack_nk16_1",
                              "fused_linear_add"]
    out = kiln.get_pipeline("default", AVX2_CTX)(bound)
    assert kernels(out) == ["fused_linear_add_relu", "fused_linear_add"]
    np.testing.assert_allclose(run_vm(out, args[:1]), reference(mod, args), rtol=2e-5, atol=2e-5)


def test_operators_without_te_compute_stay_alone():
    x = typed("x", (2, 6))
    from kiln.ir import FunctionBuilder, IRModule
    from kiln.ir.graph import TupleGetItem
    fb = FunctionBuilder([x])
    with fb.dataflow():
        r = fb.emit(ops.call("relu", x))
        t = fb.emit(ops.call("topk", r, k=2))
        gv = fb.emit_output(ops.call("exp", fb.emit(TupleGetItem(t, 0))))
    mod = IRModule({"main": fb.finish(gv)})
    groups = [[b.value.op for b in g] for g in find_groups(mod["main"])]
    assert groups == [["relu"], ["exp"]]


def test_a_value_used_twice_by_one_consumer_still_fuses():
    x, w = typed("x", (4, 8)), typed("w", (16, 8))
    mod = graph_module([x, w], lambda emit, x, w: ops.call(
        "multiply", (t := emit("linear", x, w)), t))
    groups = [[b.value.op for b in g] for g in find_groups(mod["main"])]
    assert groups == [["linear", "multiply"]]
    _check_numerics(mod, fuse_ops(AVX2_CTX)(mod))
