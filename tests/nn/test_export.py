"""Module.export: graph structure, param_spec, symbolic dims, several functions, errors."""
import numpy as np
import pytest

from kiln import nn
from kiln.ir import IntImm, Var
from kiln.ir.graph import Function, Tuple, TupleType
from kiln.ir.graph_interp import interpret
from kiln.ops import OpError

from nn_helpers import export_run, ops_of


class MLP(nn.Module):  # API.md section 1, verbatim
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(self.relu1(self.fc1(x)))


def shape_of(ty):
    return tuple(d.value if isinstance(d, IntImm) else d.name for d in ty.shape)


def test_mlp_graph():
    mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    assert list(mod.functions) == ["forward"]
    f = mod["forward"]
    assert isinstance(f, Function)
    assert [p.name for p in f.params] == ["x", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [shape_of(p.ty) for p in f.params] == [(1, 784), (256, 784), (256,), (10, 256), (10,)]
    assert f.attr("num_input") == 1
    assert len(f.blocks) == 1 and f.blocks[0].dataflow
    assert ops_of(f) == ["linear", "add", "relu", "linear", "add"]
    assert f.blocks[0].outputs == (f.body,)
    assert shape_of(f.ret_type) == (1, 10) and f.ret_type.dtype == "float32"
    # the linear's arguments are the input and the parameters themselves
    first = f.blocks[0].bindings[0].value
    assert first.args == (f.params[0], f.params[1])
    assert [(n, s.shape, s.dtype) for n, s in param_spec] == [
        ("fc1.weight", (256, 784), "float32"), ("fc1.bias", (256,), "float32"),
        ("fc2.weight", (10, 256), "float32"), ("fc2.bias", (10,), "float32")]


def test_mlp_numerics_against_numpy(rng):
    x = rng.standard_normal((2, 784)).astype("float32")
    y, state, _, _ = export_run(MLP(), {"x": x})
    h = np.maximum(x @ state["fc1.weight"].T + state["fc1.bias"], 0)
    np.testing.assert_allclose(y, h @ state["fc2.weight"].T + state["fc2.bias"], rtol=1e-5, atol=1e-5)


def test_symbolic_dims_are_one_var_across_functions():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 16)
            self.head = nn.Linear(16, 100)

        def prefill(self, tokens, cache):
            return self.head(self.emb(tokens)), cache + 1.0

        def decode(self, token, cache):
            return self.head(self.emb(token)).softmax(-1), cache

    spec = {"prefill": {"tokens": nn.spec.Tensor(("b", "n"), "int32"),
                        "cache": nn.spec.Tensor(("b", 16), "float32")},
            "decode": {"token": nn.spec.Tensor(("b", 1), "int32"),
                       "cache": nn.spec.Tensor(("b", 16), "float32")}}
    mod, param_spec = LM().export(spec)
    assert list(mod.functions) == ["prefill", "decode"]
    pre, dec = mod["prefill"], mod["decode"]
    b = pre.params[0].ty.shape[0]
    assert isinstance(b, Var) and b.name == "b"
    assert pre.params[1].ty.shape[0] is b and dec.params[0].ty.shape[0] is b
    assert [p.name for p in dec.params] == ["token", "cache", "emb.weight", "head.weight", "head.bias"]
    assert isinstance(pre.body, Tuple) and isinstance(pre.ret_type, TupleType)
    assert shape_of(pre.ret_type.fields[0]) == ("b", "n", 100)
    assert set(pre.blocks[0].outputs) == set(pre.body.fields)
    assert [n for n, _ in param_spec] == ["emb.weight", "head.weight", "head.bias"]
    # runs for any b, n
    m = LM()
    state = m.init_params(0)
    tokens = np.array([[1, 2, 3], [4, 5, 6]], "int32")
    logits, cache = interpret(pre, [tokens, np.zeros((2, 16), "float32"), *state.values()])
    assert logits.shape == (2, 3, 100)
    np.testing.assert_allclose(logits[1, 2], state["emb.weight"][6] @ state["head.weight"].T + state["head.bias"],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cache, np.ones((2, 16), "float32"))


def test_returning_an_input_and_dead_code():
    class M(nn.Module):
        def forward(self, x, y):
            unused = x * 2.0  # noqa: F841  dropped: nothing returned needs it
            return y, x.relu()
    mod, _ = M().export({"forward": {"x": nn.spec.Tensor((2,)), "y": nn.spec.Tensor((3,))}})
    f = mod["forward"]
    assert ops_of(f) == ["relu"]
    assert f.body.fields[0] is f.params[1]


def test_spec_order_is_argument_order():
    class M(nn.Module):
        def forward(self, a, b):
            return a - b
    mod, _ = M().export({"forward": {"b": nn.spec.Tensor((2,)), "a": nn.spec.Tensor((2,))}})
    f = mod["forward"]
    assert [p.name for p in f.params] == ["b", "a"]
    np.testing.assert_array_equal(interpret(f, [np.ones(2, "float32"), np.full(2, 5, "float32")]),
                                  np.full(2, 4, "float32"))


def test_default_arguments_need_no_spec():
    class M(nn.Module):
        def forward(self, x, mask=None, scale=2.0):
            y = x * scale
            return y if mask is None else y + mask
    mod, _ = M().export({"forward": {"x": nn.spec.Tensor((2,))}})
    assert ops_of(mod["forward"]) == ["multiply"]


# ---- errors ---------------------------------------------------------------------------------

def test_spec_missing_argument():
    class M(nn.Module):
        def forward(self, x, mask):
            return x
    with pytest.raises(nn.SpecError, match=r"missing argument\(s\) 'mask' of M.forward\(x, mask\)"):
        M().export({"forward": {"x": nn.spec.Tensor((1,))}})


def test_spec_unknown_argument_and_method():
    with pytest.raises(nn.SpecError, match=r"names argument 'y', which MLP.forward\(x\) does not take"):
        MLP().export({"forward": {"x": nn.spec.Tensor((1, 784)), "y": nn.spec.Tensor((1,))}})
    with pytest.raises(nn.SpecError, match="MLP has no method 'forwad'"):
        MLP().export({"forwad": {"x": nn.spec.Tensor((1, 784))}})


@pytest.mark.parametrize("bad, msg", [
    ({"forward": {"x": (1, 784)}}, r"spec\['forward'\]\['x'\] must be nn.spec.Tensor\(shape, dtype\), got tuple"),
    ({"forward": [("x", nn.spec.Tensor((1, 784)))]}, r"spec\['forward'\] must be a dict"),
    ([("forward", {})], "spec must be a non-empty dict"),
])
def test_spec_wrong_types(bad, msg):
    with pytest.raises(nn.SpecError, match=msg):
        MLP().export(bad)


def test_spec_tensor_validation():
    with pytest.raises(nn.SpecError, match="entry 1.5"):
        nn.spec.Tensor((1, 1.5))
    with pytest.raises(nn.SpecError, match="unknown dtype 'float'"):
        nn.spec.Tensor((1,), "float")
    assert nn.spec.Tensor(3, np.float16) == nn.spec.Tensor((3,), "float16")


def test_shape_mismatch_names_the_layer():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 255)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return self.fc2(self.fc1(x))
    with pytest.raises(OpError, match=r"^fc2 \(Linear\): linear: x \(1, 255\) has 255 input features "
                                      r"but weight \(10, 256\) expects 256$"):
        Bad().export({"forward": {"x": nn.spec.Tensor((1, 784))}})


def test_nested_layer_and_root_errors_are_named():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Inner(), Inner()])

        def forward(self, x):
            for blk in self.blocks:
                x = blk(x)
            return x @ x  # (2, 8) @ (2, 8) does not fit
    with pytest.raises(OpError, match=r"^Outer.forward: matmul: "):
        Outer().export({"forward": {"x": nn.spec.Tensor((2, 8))}})
    with pytest.raises(OpError, match=r"^blocks.0.norm \(LayerNorm\): layer_norm: "):
        Outer().export({"forward": {"x": nn.spec.Tensor((2, 7))}})


def test_unregistered_parameter_and_bad_result():
    class M(nn.Module):
        def forward(self, x):
            return x + nn.Parameter((2,))
    with pytest.raises(RuntimeError, match="not registered"):
        M().export({"forward": {"x": nn.spec.Tensor((2,))}})

    class N(nn.Module):
        def forward(self, x):
            return x, 3
    with pytest.raises(nn.SpecError, match=r"must return a Tensor or a tuple of Tensors; result\[1\] is int"):
        N().export({"forward": {"x": nn.spec.Tensor((2,))}})


def test_exporting_a_module_does_not_leave_a_trace():
    with pytest.raises(OpError):
        MLP().export({"forward": {"x": nn.spec.Tensor((1, 783))}})
    with pytest.raises(RuntimeError, match="outside export"):
        MLP()(None)


def test_exported_modules_print_and_parse_back():
    import kiln
    from kiln.ir.graph_printer import metadata
    from test_models import CNN, Block
    for model, x in ((MLP(), nn.spec.Tensor(("n", 784))), (CNN(), nn.spec.Tensor(("b", 3, 16, 16))),
                     (Block(), nn.spec.Tensor((2, 7, 32))), (Block(causal=False), nn.spec.Tensor(("b", "n", 32)))):
        mod, _ = model.export({"forward": {"x": x}})
        back = kiln.script.parse(mod.script(), metadata=metadata(mod))
        assert kiln.ir.structural_equal(back, mod), type(model).__name__
