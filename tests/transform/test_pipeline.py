"""Pipelines, Sequential, PassContext and the module check, and the API flows end to end."""
import numpy as np
import pytest

import kiln
from kiln.ir import IRModule, TensorType
from kiln.ir.graph import Binding, BindingBlock, Function, call_tir
from kiln.script import R, T
from kiln.transform import PassContext, Sequential, bind_params, get_pipeline, legalize
from kiln.transform.well_formed import WellFormedError, check_well_formed

from transform_helpers import AVX2, AVX2_CTX, inputs_for, kernel_calls, kernels, reference, run_vm
from transform_models import conv_bn_relu, mlp, transformer_block


def test_pipeline_contents():
    assert get_pipeline("zero", AVX2_CTX).names() == ["legalize", "default_schedule"]
    assert get_pipeline("default", AVX2_CTX).names() == [
        "fold_constant", "simplify_power", "eliminate_common_subexpr", "dead_code_elimination", "conv1d_as_2d",
        "conv_live_taps", "pad_conv_channels", "conv_winograd",
        "fuse_attention", "flatten_matmul_rows", "convert_layout_nchwc", "fold_channel_scale", "fuse_winograd", "split_as_slices", "fuse_ops",
        "legalize", "fold_constant", "dead_code_elimination", "default_schedule"]
    assert kiln.get_pipeline("zero", AVX2_CTX).names() == ["legalize", "default_schedule"]


def test_unknown_pipeline():
    with pytest.raises(ValueError, match="unknown pipeline 'fast'; the pipelines are "
                                         "default, zero"):
        get_pipeline("fast")


def test_pass_context_checks_its_options():
    with pytest.raises(ValueError, match="fold_backend"):
        PassContext(target=AVX2, fold_backend="gpu")
    with pytest.raises(ValueError, match="vector_lanes"):
        PassContext(target=AVX2, vector_lanes=0)
    assert AVX2_CTX.replace(tile_rows=2).tile_rows == 2


def test_sequential_skips_disabled_passes_and_verifies():
    mod = mlp()
    seq = get_pipeline("default", PassContext(target=AVX2, disabled_passes=("fuse_ops",), verify=True))
    out = seq(mod)
    assert kernel_calls(out) == 5   # nothing fused
    assert repr(Sequential([legalize()])) == "Sequential('sequential': legalize())"


def test_passes_reject_non_modules():
    with pytest.raises(TypeError, match="pass legalize: expected an IRModule"):
        legalize(AVX2_CTX)(mlp()["main"])


def test_well_formed_names_the_problem():
    mod = legalize(AVX2_CTX)(mlp())
    check_well_formed(mod)
    func = mod["main"]
    broken = IRModule({**mod.functions, "main": Function(
        func.params, (BindingBlock(tuple(reversed(func.blocks[0].bindings)), True,
                                   func.blocks[0].outputs),), func.body)})
    with pytest.raises(WellFormedError, match=r"graph function 'main' after pass p: .* uses .* "
                                              "before it is defined"):
        check_well_formed(broken, after="p")
    bad_call = IRModule({**mod.functions, "main": Function(
        func.params, (BindingBlock((Binding(func.blocks[0].bindings[0].var,
                                            call_tir("nope", (func.params[0],),
                                                     TensorType((1, 256), "float32"))),), True,
                                   ()),), func.params[0])})
    with pytest.raises(WellFormedError, match="call_tir names 'nope'"):
        check_well_formed(bad_call)


@pytest.mark.parametrize("pipeline", ["zero", "default"])
def test_api_section_1_mlp(pipeline):
    from kiln import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.relu1 = nn.ReLU()
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return self.fc2(self.relu1(self.fc1(x)))

    mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    compiled = kiln.get_pipeline(pipeline, AVX2_CTX)(mod)
    assert kernel_calls(compiled, "forward") == (2 if pipeline == "default" else 5)
    rng = np.random.default_rng(0)
    x = rng.random((1, 784), dtype="float32")
    params = [rng.random(p.shape, dtype="float32") for _, p in param_spec]
    got = run_vm(compiled, [x] + params, "forward")
    w1, b1, w2, b2 = params
    np.testing.assert_allclose(got, np.maximum(x @ w1.T + b1, 0) @ w2.T + b2, rtol=1e-4)


@kiln.script.ir_module
class Net:
    @T.prim_func
    def linear0(X: T.Buffer((1, 784), "float32"), W: T.Buffer((128, 784), "float32"),
                B: T.Buffer((128,), "float32"), Z: T.Buffer((1, 128), "float32")):
        for i, j, k in T.grid(1, 128, 784):
            with T.block("Z"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    Z[vi, vj] = B[vj]
                Z[vi, vj] = Z[vi, vj] + X[vi, vk] * W[vj, vk]

    @R.function
    def main(x: R.Tensor((1, 784), "float32"), w0: R.Tensor((128, 784), "float32"),
             b0: R.Tensor((128,), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(Net.linear0, (x, w0, b0), R.Tensor((1, 128), "float32"))
            lv1 = R.call_dps_packed("env.relu", (lv0,), R.Tensor((1, 128), "float32"))
            R.output(lv1)
        return lv1


def test_api_section_3_bound_params_and_extern():
    @kiln.register_func("env.relu", override=True)
    def relu(x, out):
        np.maximum(np.from_dlpack(x), 0, out=np.from_dlpack(out))

    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((128, 784)).astype("float32")
    b0 = rng.standard_normal(128).astype("float32")
    bound = bind_params("main", {"w0": w0, "b0": b0})(Net)
    out = get_pipeline("default", AVX2_CTX)(bound)
    assert kernels(out) == ["linear0"]
    assert dict(out["linear0"].attrs)["kiln.schedule"].startswith("matmul")
    x = rng.standard_normal((1, 784)).astype("float32")
    np.testing.assert_allclose(run_vm(out, [x]), np.maximum(x @ w0.T + b0, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_transformer_block_default_pipeline_with_bound_weights():
    mod = transformer_block()
    args = inputs_for(mod)
    names = [p.name for p in mod["main"].params]
    bound = bind_params("main", dict(zip(names[1:], args[1:])))(mod)
    out = get_pipeline("default", PassContext(target=AVX2, verify=True))(bound)
    # 15 kernels, of which the attention's QK^T, softmax and PV become one, and the head split
    # of q, k and v and the merge after it fold into it (fuse_attention: heads packed)
    assert kernel_calls(out) == 9
    assert "attention" in kernels(out)
    assert "heads packed" in dict(out["attention"].attrs)["kiln.schedule"]
    np.testing.assert_allclose(run_vm(out, args[:1]), reference(mod, args), rtol=1e-4, atol=1e-4)


def test_conv_bn_relu_default_pipeline_is_one_kernel():
    mod = conv_bn_relu()
    args = inputs_for(mod)
    args[-1] = np.abs(args[-1]) + 0.5
    names = [p.name for p in mod["main"].params]
    bound = bind_params("main", dict(zip(names[1:], args[1:])))(mod)
    out = get_pipeline("default", AVX2_CTX)(bound)
    assert kernel_calls(out) == 1
    (name,) = kernels(out)
    desc = dict(out[name].attrs)["kiln.schedule"]
    # channel-blocked (16 output channels x 4 pixels), batch norm + relu in the write-back
    assert desc.startswith("conv nchwc: tile 4x16") and "epilogue inlined" in desc, desc
    np.testing.assert_allclose(run_vm(out, args[:1]), reference(mod, args), rtol=1e-4, atol=1e-4)


def test_compiled_modules_print_and_parse_back():
    mod = mlp()
    args = inputs_for(mod)
    names = [p.name for p in mod["main"].params]
    bound = bind_params("main", dict(zip(names[1:], args[1:])))(mod)
    for out in (get_pipeline("zero", AVX2_CTX)(mod), get_pipeline("default", AVX2_CTX)(bound)):
        kiln.script.assert_roundtrip(out)
