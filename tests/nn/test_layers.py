"""Every layer against PyTorch with the same weights (kiln init_params loaded into torch),
run through the reference interpreter."""
import numpy as np
import pytest

from kiln import nn
from kiln.frontend.nn import functional as F

from nn_helpers import export_run, ops_of, torch_state

torch = pytest.importorskip("torch")
tnn = torch.nn


def randomize(state, rng):
    """Random values for every parameter (positive for variances), so that ones/zeros inits
    do not hide a mixed-up weight."""
    out = {}
    for k, v in state.items():
        r = rng.standard_normal(v.shape).astype(v.dtype)
        out[k] = np.abs(r) + 0.5 if k.endswith("running_var") else r
    return out


def check(kiln_layer, torch_layer, *inputs, rng=None, rtol=1e-4, atol=1e-5, random_weights=True):
    """Export ``kiln_layer`` on ``inputs``, give torch the same weights, compare outputs."""
    rng = rng or np.random.default_rng(0)
    state = kiln_layer.init_params(0)
    if random_weights:
        state = randomize(state, rng)
    torch_layer.load_state_dict(torch_state(state), strict=False)
    torch_layer.eval()
    names = ["x", "y", "z"]
    out, _, mod, _ = export_run(kiln_layer, dict(zip(names, inputs)), state=state)
    with torch.no_grad():
        ref = torch_layer(*(torch.from_numpy(a) for a in inputs))
    np.testing.assert_allclose(out, ref.numpy(), rtol=rtol, atol=atol)
    return mod["forward"]


def x_of(*shape, rng=None, dtype="float32"):
    return (rng or np.random.default_rng(1)).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("kw", [
    dict(), dict(bias=False), dict(stride=2, padding=1), dict(padding=(2, 1), dilation=2),
    dict(groups=2, padding="same"), dict(padding="valid", stride=(1, 2)),
])
def test_conv2d(kw):
    f = check(nn.Conv2d(4, 6, 3, **kw), tnn.Conv2d(4, 6, 3, **kw), x_of(2, 4, 9, 8))
    assert ops_of(f) == (["conv2d"] if kw.get("bias") is False else ["conv2d", "reshape", "add"])


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=2, dilation=2), dict(groups=3, bias=False)])
def test_conv1d(kw):
    check(nn.Conv1d(3, 6, 3, **kw), tnn.Conv1d(3, 6, 3, **kw), x_of(2, 3, 11))


def test_linear_and_embedding():
    check(nn.Linear(5, 3), tnn.Linear(5, 3), x_of(2, 4, 5))
    check(nn.Linear(5, 3, bias=False), tnn.Linear(5, 3, bias=False), x_of(5))
    idx = np.array([[0, 3, 9], [2, 2, 1]], "int64")
    check(nn.Embedding(10, 4), tnn.Embedding(10, 4), idx)


def test_norms():
    x = x_of(2, 6, 5, 4)
    check(nn.BatchNorm2d(6), tnn.BatchNorm2d(6), x)
    check(nn.BatchNorm2d(6, affine=False), tnn.BatchNorm2d(6, affine=False), x)
    check(nn.BatchNorm1d(6), tnn.BatchNorm1d(6), x_of(3, 6))
    check(nn.GroupNorm(3, 6), tnn.GroupNorm(3, 6), x)
    check(nn.LayerNorm(4), tnn.LayerNorm(4), x)
    check(nn.LayerNorm((5, 4), eps=1e-3), tnn.LayerNorm((5, 4), eps=1e-3), x)
    check(nn.LayerNorm(4, elementwise_affine=False), tnn.LayerNorm(4, elementwise_affine=False), x)
    check(nn.LayerNorm(4, bias=False), tnn.LayerNorm(4, bias=False), x)
    check(nn.RMSNorm(4), tnn.RMSNorm(4), x)
    check(nn.RMSNorm((5, 4), eps=1e-6), tnn.RMSNorm((5, 4), eps=1e-6), x)


@pytest.mark.parametrize("layer, ref", [
    (nn.ReLU(), tnn.ReLU()), (nn.GELU(), tnn.GELU()), (nn.GELU("tanh"), tnn.GELU("tanh")),
    (nn.SiLU(), tnn.SiLU()), (nn.Sigmoid(), tnn.Sigmoid()), (nn.Tanh(), tnn.Tanh()),
    (nn.Softmax(1), tnn.Softmax(1)), (nn.LogSoftmax(-1), tnn.LogSoftmax(-1)),
    (nn.Dropout(0.3), tnn.Dropout(0.3)), (nn.Flatten(), tnn.Flatten()),
    (nn.Flatten(0, 2), tnn.Flatten(0, 2)), (nn.Identity(), tnn.Identity()),
    (nn.MaxPool2d(2), tnn.MaxPool2d(2)),
    (nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), tnn.MaxPool2d(3, 2, 1, ceil_mode=True)),
    (nn.MaxPool2d((2, 3), dilation=2), tnn.MaxPool2d((2, 3), dilation=2)),
    (nn.AvgPool2d(2), tnn.AvgPool2d(2)),
    (nn.AvgPool2d(3, 2, 1, count_include_pad=False), tnn.AvgPool2d(3, 2, 1, count_include_pad=False)),
    (nn.AvgPool2d(3, 2, 1, ceil_mode=True), tnn.AvgPool2d(3, 2, 1, ceil_mode=True)),
    (nn.AdaptiveAvgPool2d(1), tnn.AdaptiveAvgPool2d(1)),
    (nn.AdaptiveAvgPool2d((3, None)), tnn.AdaptiveAvgPool2d((3, None))),
])
def test_parameter_free_layers(layer, ref):
    check(layer, ref, x_of(2, 3, 7, 6))


@pytest.mark.parametrize("kw", [dict(size=(5, 9)), dict(scale_factor=2), dict(size=(4, 5), mode="bilinear"),
                                dict(size=(11, 3), mode="bilinear", align_corners=True)])
def test_interpolate(kw):
    class Up(nn.Module):
        def forward(self, x):
            return F.interpolate(x, **kw)

    class TUp(tnn.Module):
        def forward(self, x):
            return tnn.functional.interpolate(x, **kw)
    check(Up(), TUp(), x_of(1, 2, 7, 6))


# ---- attention ------------------------------------------------------------------------------

class SDPA(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, x, y, z):
        return F.scaled_dot_product_attention(x, y, z, **self.kw)


class TSDPA(tnn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v):
        return tnn.functional.scaled_dot_product_attention(q, k, v, **self.kw)


@pytest.mark.parametrize("kw", [dict(), dict(is_causal=True), dict(scale=0.3)])
@pytest.mark.parametrize("lengths", [(5, 5), (3, 6)])
def test_sdpa(kw, lengths):
    length, source = lengths
    q, k, v = x_of(2, 3, length, 8), x_of(2, 3, source, 8), x_of(2, 3, source, 4)
    check(SDPA(**kw), TSDPA(**kw), q, k, v)


def test_sdpa_masks_and_gqa():
    q, k, v = x_of(2, 4, 5, 8), x_of(2, 2, 6, 8), x_of(2, 2, 6, 8)
    check(SDPA(enable_gqa=True), TSDPA(enable_gqa=True), q, k, v)
    mask = np.random.default_rng(3).random((5, 6)) > 0.3
    mask[:, 0] = True  # no fully masked row: torch gives NaN there

    class Masked(nn.Module):
        def forward(self, x, y, z, m):
            return F.scaled_dot_product_attention(x, y, z, attn_mask=m)
    k, v = x_of(2, 4, 6, 8), x_of(2, 4, 6, 8)
    for m in (mask, x_of(5, 6)):
        out, *_ = export_run(Masked(), {"x": q, "y": k, "z": v, "m": m})
        ref = tnn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v, m)))
        np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_self(batch_first):
    km, tm = nn.MultiheadAttention(16, 4, batch_first=batch_first), tnn.MultiheadAttention(16, 4, batch_first=batch_first)
    assert [n for n, _ in km.named_parameters()] == list(tm.state_dict())
    state = randomize(km.init_params(0), np.random.default_rng(0))
    tm.load_state_dict(torch_state(state))
    x = x_of(2, 5, 16)

    class Self(nn.Module):
        def __init__(self, **kw):
            super().__init__()
            self.attn, self.kw = km, kw

        def forward(self, x):
            out, weights = self.attn(x, x, x, **self.kw)
            return out if weights is None else (out, weights)
    for kw in (dict(), dict(need_weights=False), dict(average_attn_weights=False),
               dict(is_causal=True, attn_mask=None)):
        out, _, mod, _ = export_run(Self(**kw), {"x": x}, state={"attn." + k: v for k, v in state.items()})
        tkw = dict(kw)
        if kw.get("is_causal"):
            tkw["attn_mask"] = tnn.Transformer.generate_square_subsequent_mask(x.shape[1 if batch_first else 0])
        with torch.no_grad():
            ref = tm(*(torch.from_numpy(x),) * 3, **tkw)
        if ref[1] is None:
            np.testing.assert_allclose(out, ref[0].numpy(), rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_allclose(out[0], ref[0].numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(out[1], ref[1].numpy(), rtol=1e-4, atol=1e-5)
    # self-attention projects once and splits
    assert ops_of(mod["forward"]).count("linear") == 2


def test_multihead_attention_cross_with_masks():
    km, tm = nn.MultiheadAttention(8, 2, batch_first=True), tnn.MultiheadAttention(8, 2, batch_first=True)
    state = randomize(km.init_params(0), np.random.default_rng(0))
    tm.load_state_dict(torch_state(state))
    q, kv = x_of(2, 3, 8), x_of(2, 4, 8)
    attn_mask = np.zeros((3, 4), bool)
    attn_mask[0, 3] = True
    pad = np.array([[False, False, False, True], [False, False, False, False]])

    class Cross(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = km

        def forward(self, x, y, m, p):
            return self.attn(x, y, y, key_padding_mask=p, attn_mask=m)[0]
    out, *_ = export_run(Cross(), {"x": q, "y": kv, "m": attn_mask, "p": pad},
                         state={"attn." + k: v for k, v in state.items()})
    with torch.no_grad():
        ref = tm(torch.from_numpy(q), torch.from_numpy(kv), torch.from_numpy(kv),
                 key_padding_mask=torch.from_numpy(pad), attn_mask=torch.from_numpy(attn_mask))[0]
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-5)


def test_attention_layer_matches_manual_torch():
    km = nn.Attention(16, 4, causal=True)
    state = randomize(km.init_params(0), np.random.default_rng(0))
    x = x_of(2, 6, 16)
    out, *_ = export_run(km, {"x": x}, state=state)
    t = torch_state(state)
    tx = torch.from_numpy(x)

    def proj(name, v):
        return v @ t[f"{name}.weight"].T + t[f"{name}.bias"]

    def heads(v):
        return v.reshape(2, 6, 4, 4).transpose(1, 2)
    o = tnn.functional.scaled_dot_product_attention(heads(proj("q_proj", tx)), heads(proj("k_proj", tx)),
                                                    heads(proj("v_proj", tx)), is_causal=True)
    ref = proj("out_proj", o.transpose(1, 2).reshape(2, 6, 16))
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-5)


def test_errors_from_layers():
    from kiln.ops import OpError
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.Attention(10, 3)
    with pytest.raises(OpError, match=r"^conv \(Conv2d\): conv2d: "):
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3)

            def forward(self, x):
                return self.conv(x)
        M().export({"forward": {"x": nn.spec.Tensor((1, 4, 8, 8))}})
    with pytest.raises(OpError, match="is_causal needs static sequence lengths"):
        nn.Attention(8, 2, causal=True).export({"forward": {"x": nn.spec.Tensor((1, "n", 8))}})
