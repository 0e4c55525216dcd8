"""Whole models: a small CNN (conv-bn-relu-pool-linear) and transformer blocks; the graph
(bindings, param_spec, output types) and the numbers against PyTorch with the same weights."""
import numpy as np
import pytest

from kiln import nn
from kiln.ir import Var
from kiln.ir.graph_interp import interpret

from nn_helpers import export_run, ops_of, torch_state
from test_layers import randomize

torch = pytest.importorskip("torch")
tnn = torch.nn


class CNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool2 = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.pool1(self.bn1(self.conv1(x)).relu())
        x = self.pool2(self.bn2(self.conv2(x)).relu())
        return self.fc(x.flatten(1))


class TorchCNN(tnn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = tnn.BatchNorm2d(8)
        self.pool1 = tnn.MaxPool2d(2)
        self.conv2 = tnn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = tnn.BatchNorm2d(16)
        self.pool2 = tnn.AdaptiveAvgPool2d(1)
        self.fc = tnn.Linear(16, num_classes)

    def forward(self, x):
        x = self.pool1(self.bn1(self.conv1(x)).relu())
        x = self.pool2(self.bn2(self.conv2(x)).relu())
        return self.fc(x.flatten(1))


def test_cnn_graph():
    mod, param_spec = CNN().export({"forward": {"x": nn.spec.Tensor(("batch", 3, 16, 16), "float32")}})
    f = mod["forward"]
    assert ops_of(f) == ["conv2d", "reshape", "add", "batch_norm", "relu", "max_pool2d",
                         "conv2d", "batch_norm", "relu", "adaptive_avg_pool2d", "flatten",
                         "linear", "add"]
    assert [n for n, _ in param_spec] == [
        "conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
        "conv2.weight", "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var",
        "fc.weight", "fc.bias"]
    assert dict(param_spec)["conv2.weight"].shape == (16, 8, 3, 3)
    types = {b.var.name: b.var.ty for b in f.bindings()}
    pool = next(b.var.ty for b in f.bindings() if b.value.op == "max_pool2d")
    assert [getattr(d, "value", None) for d in pool.shape[1:]] == [8, 8, 8]
    batch = f.params[0].ty.shape[0]
    assert isinstance(batch, Var) and f.ret_type.shape[0] is batch and f.ret_type.shape[1].value == 10
    assert len(types) == 13


def test_cnn_matches_torch():
    km, tm = CNN(), TorchCNN().eval()
    state = randomize(km.init_params(0), np.random.default_rng(0))
    tm.load_state_dict(torch_state(state), strict=False)
    km.load_state_dict(tm.state_dict())  # and back, through load_state_dict (num_batches_tracked ignored)
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype("float32")
    out, *_ = export_run(km, {"x": x}, state=km.state_dict())
    with torch.no_grad():
        ref = tm(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


class Block(nn.Module):
    """GPT-style pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, dim=32, heads=4, causal=True):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.Attention(dim, heads, causal=causal)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def torch_block(x, t, heads=4, causal=True):
    """The same block written with torch functions over the kiln state dict ``t``."""
    F = tnn.functional
    b, n, d = x.shape

    def lin(name, v):
        return F.linear(v, t[f"{name}.weight"], t[f"{name}.bias"])

    def split(v):
        return v.reshape(b, n, heads, d // heads).transpose(1, 2)
    h = F.layer_norm(x, (d,), t["ln1.weight"], t["ln1.bias"])
    o = F.scaled_dot_product_attention(split(lin("attn.q_proj", h)), split(lin("attn.k_proj", h)),
                                       split(lin("attn.v_proj", h)), is_causal=causal)
    x = x + lin("attn.out_proj", o.transpose(1, 2).reshape(b, n, d))
    h = F.layer_norm(x, (d,), t["ln2.weight"], t["ln2.bias"])
    return x + lin("mlp.2", F.gelu(lin("mlp.0", h), approximate="tanh"))


def test_transformer_block_graph_and_numbers():
    km = Block()
    mod, param_spec = km.export({"forward": {"x": nn.spec.Tensor((2, 7, 32), "float32")}})
    f = mod["forward"]
    ops = ops_of(f)
    assert ops.count("layer_norm") == 2 and ops.count("softmax") == 1 and ops.count("matmul") == 2
    assert ops.count("linear") == 6 and "where" in ops and "gelu" in ops
    assert [n for n, _ in param_spec][:4] == ["ln1.weight", "ln1.bias", "attn.q_proj.weight", "attn.q_proj.bias"]
    assert dict(param_spec)["mlp.0.weight"].shape == (128, 32)
    assert [d.value for d in f.ret_type.shape] == [2, 7, 32]
    state = randomize(km.init_params(0), np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((2, 7, 32)).astype("float32")
    out = interpret(f, [x] + [state[n] for n, _ in param_spec])
    with torch.no_grad():
        ref = torch_block(torch.from_numpy(x), torch_state(state)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_transformer_block_symbolic_sequence():
    km = Block(causal=False)
    mod, param_spec = km.export({"forward": {"x": nn.spec.Tensor(("b", "n", 32), "float32")}})
    f = mod["forward"]
    b, n = f.params[0].ty.shape[:2]
    assert f.ret_type.shape[0] is b and f.ret_type.shape[1] is n and f.ret_type.shape[2].value == 32
    state = km.init_params(3)
    for shape in ((1, 5, 32), (3, 2, 32)):
        x = np.random.default_rng(1).standard_normal(shape).astype("float32")
        out = interpret(f, [x] + list(state.values()))
        with torch.no_grad():
            ref = torch_block(torch.from_numpy(x), torch_state(state), causal=False).numpy()
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


class EncoderLayer(nn.Module):
    """torch.nn.TransformerEncoderLayer(norm_first=True, batch_first=True, gelu), same names."""

    def __init__(self, d_model, nhead, dim_feedforward):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(0.1)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, need_weights=False)[0]
        return x + self.linear2(self.dropout(nn.functional.gelu(self.linear1(self.norm2(x)))))


def test_torch_transformer_encoder_layer_state_dict_loads_and_matches():
    tm = tnn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu", batch_first=True,
                                     norm_first=True).eval()
    km = EncoderLayer(16, 4, 32)
    km.load_state_dict(tm.state_dict())
    x = np.random.default_rng(1).standard_normal((2, 5, 16)).astype("float32")
    out, *_ = export_run(km, {"x": x}, state=km.state_dict())
    with torch.no_grad():
        ref = tm(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
