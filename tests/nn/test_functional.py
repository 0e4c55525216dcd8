"""Tensor methods and nn.functional ops, checked against numpy through the reference
interpreter."""
import numpy as np
import pytest

from kiln import nn
from kiln.frontend.nn import functional as F
from kiln.ops import OpError

from nn_helpers import export_run, ops_of


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, y=None):
        return self.fn(x) if y is None else self.fn(x, y)


def run(fn, *arrays):
    inputs = dict(zip(["x", "y"], arrays))
    out, _, mod, _ = export_run(Fn(fn), inputs)
    return out, mod["forward"]


X = np.arange(24, dtype="float32").reshape(2, 3, 4) - 10.0


@pytest.mark.parametrize("fn, ref", [
    (lambda x: x + 1, lambda x: x + 1),
    (lambda x: 2 - x, lambda x: 2 - x),
    (lambda x: x * 0.5 / 4, lambda x: x * 0.5 / 4),
    (lambda x: 1 / (x + 100), lambda x: 1 / (x + 100)),
    (lambda x: -x ** 2, lambda x: -x ** 2),
    (lambda x: abs(x).sqrt(), lambda x: np.sqrt(np.abs(x))),
    (lambda x: x.clamp(min=-3, max=4), lambda x: np.clip(x, -3, 4)),
    (lambda x: x.clamp(max=0), lambda x: np.minimum(x, 0)),
    (lambda x: F.where(x > 0, x, 0.0), lambda x: np.where(x > 0, x, 0)),
    (lambda x: (x >= 2).float(), lambda x: (x >= 2).astype("float32")),
    (lambda x: x.sum(), lambda x: x.sum()),
    (lambda x: x.mean(dim=(0, 2), keepdim=True), lambda x: x.mean(axis=(0, 2), keepdims=True)),
    (lambda x: x.max(-1), lambda x: x.max(-1)),
    (lambda x: x.argmax(1), lambda x: x.argmax(1)),
    (lambda x: x.var(-1), lambda x: x.var(-1, ddof=1)),
    (lambda x: x.softmax(-1), lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    (lambda x: x.reshape(6, -1), lambda x: x.reshape(6, -1)),
    (lambda x: x.view(-1), lambda x: x.reshape(-1)),
    (lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    (lambda x: x.transpose(-1, -2), lambda x: x.swapaxes(-1, -2)),
    (lambda x: x.mT, lambda x: x.swapaxes(-1, -2)),
    (lambda x: x.flatten(1), lambda x: x.reshape(2, 12)),
    (lambda x: x.unsqueeze(-1).squeeze(), lambda x: x),
    (lambda x: x[:1].expand(4, -1, -1), lambda x: np.broadcast_to(x[:1], (4, 3, 4))),
    (lambda x: F.cat([x, x * 2], dim=1), lambda x: np.concatenate([x, x * 2], 1)),
    (lambda x: F.stack([x, x], dim=-1), lambda x: np.stack([x, x], -1)),
    (lambda x: F.pad(x, (1, 2)), lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2)))),
    (lambda x: F.split(x, 2, dim=-1)[1], lambda x: x[..., 2:]),
    (lambda x: F.split(x, [1, 3], dim=-1)[1], lambda x: x[..., 1:]),
    (lambda x: x.chunk(2, dim=1)[1], lambda x: x[:, 2:]),
    (lambda x: F.topk(x, 2)[0], lambda x: -np.sort(-x, -1)[..., :2]),
    (lambda x: F.gelu(x, approximate="tanh"),
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    (lambda x: F.silu(x), lambda x: x / (1 + np.exp(-x))),
    (lambda x: F.log_softmax(x, 0), lambda x: x - np.log(np.exp(x).sum(0, keepdims=True))),
])
def test_ops_match_numpy(fn, ref):
    out, _ = run(fn, X)
    np.testing.assert_allclose(out, ref(X).astype(out.dtype), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("key", [
    0, -1, (slice(None), 1), (Ellipsis, slice(1, 3)), (1, slice(None), slice(None, None, 2)),
    (None, 0), (slice(None), None, -2, slice(1, None)), (Ellipsis, None), slice(-1, None),
    (slice(0, 10),), (slice(2, 1),),
])
def test_indexing_matches_numpy(key):
    out, _ = run(lambda x: x[key], X)
    np.testing.assert_array_equal(out, X[key])


def test_tensor_index_is_take():
    idx = np.array([[2, 0], [1, 1]], "int64")
    out, f = run(lambda x, i: x[:, i], X, idx)
    np.testing.assert_array_equal(out, X[:, idx])
    assert ops_of(f) == ["take"]
    out, _ = run(lambda x, i: x[1, :, i], X, idx)
    np.testing.assert_array_equal(out, X[1, :, idx].transpose(1, 2, 0) if False else X[1][:, idx])


@pytest.mark.parametrize("dim, shape", [(0, (1, 3, 4)), (1, (2, 5, 2)), (-1, (2, 3, 6)), (2, (1, 2, 1))])
def test_gather_matches_torch(dim, shape):
    torch = pytest.importorskip("torch")
    idx = np.random.default_rng(0).integers(0, X.shape[dim], shape).astype("int64")
    out, f = run(lambda x, i: x.gather(dim, i), X, idx)
    np.testing.assert_array_equal(out, torch.gather(torch.from_numpy(X), dim, torch.from_numpy(idx)).numpy())
    assert ops_of(f)[-1] == "take"


def test_logical_operators():
    out, _ = run(lambda x: F.where((x > 0) & ~(x > 5) | (x < -8), x, 0.0), X)
    np.testing.assert_array_equal(out, np.where(((X > 0) & ~(X > 5)) | (X < -8), X, 0))


def test_matmul_and_operators_with_parameters():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter((4, 5))

        def forward(self, x):
            return (x @ self.w) * 2 + self.w.sum(0)
    x = np.ones((2, 3, 4), "float32")
    out, state, mod, _ = export_run(M(), {"x": x})
    w = state["w"]
    np.testing.assert_allclose(out, (x @ w) * 2 + w.sum(0), rtol=1e-6)


def test_no_op_shape_calls_are_skipped():
    _, f = run(lambda x: x.reshape(2, 3, 4).permute(0, 1, 2).flatten(1, 1).contiguous().squeeze(0) + 0, X)
    assert ops_of(f) == ["add"]


def test_scalar_constants_take_the_tensor_dtype():
    h = np.ones(3, "float16")
    out, f = run(lambda x: x * 0.5 + 1, h)
    assert out.dtype == np.float16
    c = f.blocks[0].bindings[0].value.args[1]
    assert c.data.dtype == np.float16 and c.data.shape == ()
    with pytest.raises(TypeError, match="non-integer value 0.5"):
        run(lambda x: x * 0.5, np.ones(3, "int32"))


def test_symbolic_shapes_flow_through_methods():
    class M(nn.Module):
        def forward(self, x):
            b, n, _ = x.shape
            return x.reshape(b, n, 2, 2).permute(0, 2, 1, 3).reshape(b * 2, n, 2)
    mod, _ = M().export({"forward": {"x": nn.spec.Tensor(("b", "n", 4))}})
    out = mod["forward"].ret_type
    b, n = mod["forward"].params[0].ty.shape[:2]
    assert str(out.shape[0]) == str(b * 2) and out.shape[1] is n
    from kiln.ir.graph_interp import interpret
    x = np.arange(3 * 5 * 4, dtype="float32").reshape(3, 5, 4)
    ref = x.reshape(3, 5, 2, 2).transpose(0, 2, 1, 3).reshape(6, 5, 2)
    np.testing.assert_array_equal(interpret(mod["forward"], [x]), ref)


def test_bad_uses_are_clear():
    with pytest.raises(OpError, match="only positive slice steps"):
        run(lambda x: x[::-1], X)
    with pytest.raises(OpError, match="too many indices"):
        run(lambda x: x[0, 0, 0, 0], X)
    with pytest.raises(OpError, match="index 3 is out of range for axis 0"):
        run(lambda x: x[3], X)
    with pytest.raises(TypeError, match="truth value"):
        run(lambda x: x if x.sum() > 0 else -x, X)
    with pytest.raises(TypeError, match="iterating"):
        run(lambda x: [r for r in x][0], X)
    with pytest.raises(RuntimeError, match="needs a trace"):
        F.relu(None)


def test_indexing_symbolic_dims():
    class M(nn.Module):
        def forward(self, x):
            return x[:, 1:3, None, ...][..., -1]
    mod, _ = M().export({"forward": {"x": nn.spec.Tensor(("n", 5, 4))}})
    from kiln.ir.graph_interp import interpret
    x = np.arange(40, dtype="float32").reshape(2, 5, 4)
    np.testing.assert_array_equal(interpret(mod["forward"], [x]), x[:, 1:3, None, ...][..., -1])

    # slicing inside a symbolic dim: its length is a derived dim (n - 1), computed at run time
    class Tail(nn.Module):
        def forward(self, x):
            return x[:, 1:]
    mod, _ = Tail().export({"forward": {"x": nn.spec.Tensor((2, "n"))}})
    for n in (5, 1):  # max(n - min(1, n), 0): clamped as numpy does, also for n = 0
        x = np.arange(2 * n, dtype="float32").reshape(2, n)
        np.testing.assert_array_equal(interpret(mod["forward"], [x]), x[:, 1:])
