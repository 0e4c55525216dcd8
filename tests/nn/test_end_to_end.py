"""API.md section 1 end to end (export -> pipeline -> compile -> VM), and the nn test models
compiled and run against the reference interpreter. Skipped until the pipeline, executable
and VM exist."""

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.ir.graph_interp import interpret


pytestmark = pytest.mark.slow


def test_api_section_1_verbatim(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the block writes mlp.so into the working directory
    # ---- API.md section 1, as written -------------------------------------------------------
    import numpy as np
    import kiln
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
    mod.show()                                   # the IRModule as script text
    mod = kiln.get_pipeline("zero")(mod)         # "zero": legalize + default schedules; "default": all passes
    ex = kiln.compile(mod, target="llvm")        # host CPU; also "llvm -mcpu=...", "aarch64-linux-gnu"
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    x = kiln.nd.array(np.random.rand(1, 784).astype("float32"))
    params = [kiln.nd.array(np.random.rand(*p.shape).astype("float32")) for _, p in param_spec]
    y = vm["forward"](x, *params)                # a kiln NDArray
    print(y.numpy())

    ex.export_library("mlp.so")                  # one file: machine code + serialized executable
    vm = kiln.VirtualMachine(kiln.load_module("mlp.so"), kiln.cpu())
    # ---- checks -------------------------------------------------------------------------------
    xs, (w1, b1, w2, b2) = x.numpy(), [p.numpy() for p in params]
    expected = np.maximum(xs @ w1.T + b1, 0) @ w2.T + b2
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vm["forward"](x, *params).numpy(), expected, rtol=1e-4, atol=1e-4)


def _compile_and_compare(model, inputs, pipeline):
    spec = {"forward": {k: nn.spec.Tensor(v.shape, str(v.dtype)) for k, v in inputs.items()}}
    mod, param_spec = model.export(spec)
    state = model.init_params(0)
    args = list(inputs.values()) + [state[n] for n, _ in param_spec]
    expected = interpret(mod["forward"], args)
    ex = kiln.compile(kiln.get_pipeline(pipeline)(mod), target="llvm")
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    out = vm["forward"](*[kiln.nd.array(a) for a in args])
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pipeline", ["zero", "default"])
def test_cnn_compiled(pipeline):
    from test_models import CNN
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype("float32")
    _compile_and_compare(CNN(), {"x": x}, pipeline)


@pytest.mark.parametrize("pipeline", ["zero", "default"])
def test_transformer_block_compiled(pipeline):
    from test_models import Block
    x = np.random.default_rng(0).standard_normal((2, 7, 32)).astype("float32")
    _compile_and_compare(Block(), {"x": x}, pipeline)


class LM(nn.Module):
    """prefill/decode over symbolic batch and sequence, tuple results, one parameter list."""

    def __init__(self):
        super().__init__()
        from test_models import Block
        self.emb = nn.Embedding(100, 32)
        self.block = Block(causal=False)
        self.head = nn.Linear(32, 100)

    def prefill(self, tokens, cache):
        return self.head(self.block(self.emb(tokens))), cache + 1.0

    def decode(self, token, cache):
        return self.head(self.emb(token)).softmax(-1), cache


@pytest.mark.parametrize("pipeline", ["zero", "default"])
def test_prefill_decode_symbolic(pipeline):
    m = LM()
    spec = {"prefill": {"tokens": nn.spec.Tensor(("b", "n"), "int32"), "cache": nn.spec.Tensor(("b", 16))},
            "decode": {"token": nn.spec.Tensor(("b", 1), "int32"), "cache": nn.spec.Tensor(("b", 16))}}
    mod, _ = m.export(spec)
    state = list(m.init_params(0).values())
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline(pipeline)(mod), target="llvm"), kiln.cpu())
    for b, n in ((1, 5), (3, 2)):
        tokens = np.random.default_rng(b).integers(0, 100, (b, n)).astype("int32")
        cache = np.zeros((b, 16), "float32")
        for fname, args in (("prefill", [tokens, cache] + state), ("decode", [tokens[:, :1], cache] + state)):
            expected = interpret(mod[fname], args)
            out = vm[fname](*[kiln.nd.array(a) for a in args])
            assert len(out) == len(expected), (fname, len(out), len(expected))
            for o, e in zip(out, expected):
                np.testing.assert_allclose(o.numpy(), e, rtol=1e-4, atol=1e-5)


def test_bound_weights_from_state_dict():
    from test_export import MLP
    m = MLP()
    m.load_state_dict(m.init_params(1))
    mod, _ = m.export({"forward": {"x": nn.spec.Tensor((2, 784))}})
    bound = kiln.transform.bind_params("forward", m.state_dict())(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(bound), target="llvm"), kiln.cpu())
    x = np.random.default_rng(0).standard_normal((2, 784)).astype("float32")
    expected = interpret(mod["forward"], [x] + list(m.state_dict().values()))
    np.testing.assert_allclose(vm["forward"](kiln.nd.array(x)).numpy(), expected, rtol=1e-4, atol=1e-5)
