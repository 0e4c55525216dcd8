"""Small models built here, exported with torch.export, imported, compiled with the "default"
pipeline and compared with torch eager (fp32, rtol = atol = 1e-4 unless stated)."""
from __future__ import annotations

import numpy as np
import pytest

from torch_helpers import check, compile_program, outputs, randomize, torch, torch_outputs

import kiln

nn = torch.nn
F = torch.nn.functional


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.hardswish(self.bn2(self.conv2(x)))
        x = F.avg_pool2d(x, 2, stride=1)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.log_softmax(self.fc(x), dim=-1)


class Block(nn.Module):
    """A pre-norm transformer block: embedding, causal masked attention through
    scaled_dot_product_attention, GELU MLP, residuals."""

    def __init__(self, vocab=50, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(16, d)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        b, s = ids.shape
        x = self.emb(ids) + self.pos(torch.arange(s))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
        x = x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))
        return self.head(x)


def test_mlp():
    x = torch.randn(4, 32)
    check(randomize(MLP()), x, rtol=1e-5, atol=1e-5)


def test_mlp_imports_as_linear_kernels():
    # nn.Linear is one linear op plus a bias add, as through ONNX (Gemm), not a permute + matmul
    ep = torch.export.export(MLP().eval(), (torch.randn(1, 32),))
    mod, params = kiln.frontend.from_exported_program(ep)
    ops = [b.value.op for b in mod["main"].bindings() if hasattr(b.value, "op")]
    assert ops.count("linear") == 2 and "matmul" not in ops and "permute_dims" not in ops, ops
    assert params == {}


def test_small_cnn_batchnorm_pool():
    x = torch.randn(2, 3, 16, 16)
    check(randomize(SmallCNN()), x)


def test_transformer_block_sdpa():
    ids = torch.randint(0, 50, (2, 8))
    check(randomize(Block()), ids, rtol=1e-4, atol=1e-4)


def test_transformer_attention_fuses():
    # scaled_dot_product_attention imports as softmax(q @ kt * scale + mask) @ v, which the
    # default pipeline's fuse_attention makes one attention kernel
    ep = torch.export.export(Block().eval(), (torch.randint(0, 50, (1, 8)),))
    mod, params = kiln.frontend.from_exported_program(ep)
    fused = kiln.transform.fuse_attention()(kiln.transform.bind_params("main", params)(mod))
    ops = [b.value.op for b in fused["main"].bindings() if hasattr(b.value, "op")]
    assert "attention" in ops and "softmax" not in ops, ops


def test_dynamic_batch_two_sizes():
    model = randomize(SmallCNN()).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    x = torch.randn(2, 3, 16, 16)
    ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    vm, mod, _ = compile_program(ep)
    (param,) = mod["main"].params
    assert str(param.ty.shape[0]) == "batch"
    assert dict(mod["main"].attr("kiln.bounds")) == {"batch": 8}
    for n in (3, 7):
        xn = torch.randn(n, 3, 16, 16)
        (got,), (want,) = outputs(vm, xn), torch_outputs(model, xn)
        assert got.shape == (n, 5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(Exception, match="batch"):
        vm["main"](np.zeros((9, 3, 16, 16), np.float32))      # past the Dim's max


def test_dim_min_is_enforced():
    # Dim min becomes a limit min - n <= 0 the runtime checks (x[:, 1:] - x[:, :-1] was traced
    # for n >= 3); the message names the dim and its minimum
    n = torch.export.Dim("n", min=3, max=11)
    ep = torch.export.export(_Diff(), (torch.randn(2, 5),), dynamic_shapes={"x": {1: n}})
    vm, mod, _ = compile_program(ep)
    assert dict(mod["main"].attr("kiln.bounds")) == {"n": 11}
    (got,) = outputs(vm, torch.arange(6.0).view(2, 3))
    np.testing.assert_array_equal(got, np.ones((2, 2), np.float32))
    with pytest.raises(kiln.runtime.KilnError, match="symbolic dimension 'n' = 2 is below its minimum 3"):
        vm["main"](np.zeros((2, 2), np.float32))
    with pytest.raises(kiln.runtime.KilnError, match="'n' = 12 exceeds its bound 11"):
        vm["main"](np.zeros((2, 12), np.float32))


class _Diff(nn.Module):
    def forward(self, x):
        return x[:, 1:] - x[:, :-1]


def test_dynamic_batch_transformer():
    model = randomize(Block()).eval()
    batch = torch.export.Dim("batch", min=1, max=4)
    ids = torch.randint(0, 50, (2, 8))
    more = [(torch.randint(0, 50, (n, 8)),) for n in (1, 3)]
    check(model, ids, dynamic_shapes={"ids": {0: batch}}, more=more)


def test_keep_params_as_input():
    model = randomize(MLP()).eval()
    ep = torch.export.export(model, (torch.randn(2, 32),))
    mod, params = kiln.frontend.from_exported_program(ep, keep_params_as_input=True)
    names = [p.name for p in mod["main"].params]
    assert names == ["x", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert set(params) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    np.testing.assert_array_equal(params["fc1.weight"], model.fc1.weight.detach().numpy())
    # weights passed at run time, in parameter order
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    x = torch.randn(2, 32)
    got = vm["main"](x.numpy(), *[params[n] for n in names[1:]]).numpy()
    np.testing.assert_allclose(got, torch_outputs(model, x)[0], rtol=1e-5, atol=1e-5)


def test_buffers_by_pytorch_name():
    model = randomize(SmallCNN()).eval()
    ep = torch.export.export(model, (torch.randn(1, 3, 16, 16),))
    _, params = kiln.frontend.from_exported_program(ep, keep_params_as_input=True)
    assert "bn1.running_mean" in params and "bn1.running_var" in params
    assert "bn1.num_batches_tracked" not in params        # unused by the inference program
    np.testing.assert_array_equal(params["bn2.running_var"], model.bn2.running_var.numpy())


@pytest.mark.parametrize("decompose", [True, False])
def test_program_decomposed_by_the_user(decompose):
    # run_decompositions() with torch's default table also breaks up linear and
    # scaled_dot_product_attention (into bmm, softmax and a guard for fully masked rows)
    model = randomize(Block()).eval()
    ids = torch.randint(0, 50, (2, 8))
    ep = torch.export.export(model, (ids,)).run_decompositions()
    mod, params = kiln.frontend.from_exported_program(ep, decompose=decompose)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    (got,), (want,) = outputs(vm, ids), torch_outputs(model, ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
