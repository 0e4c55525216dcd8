"""ATen operator coverage: one small module per group of ops, exported, imported, compiled
and compared with torch eager (fp32 at rtol = atol = 1e-5 unless stated; ints and bools exact)."""
from __future__ import annotations

import pytest

from torch_helpers import check, torch

F = torch.nn.functional
RNG = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=RNG)


class Fn(torch.nn.Module):
    """A module whose forward is ``fn``."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _put(x, index, value, accumulate=False):
    """``x[index] = value`` (or accumulated) on a copy: what exports as index_put."""
    y = x.clone()
    if accumulate:
        return y.index_put_(tuple(index), torch.as_tensor(value), accumulate=True)
    y[index] = value
    return y


CASES = {
    "unary": (lambda x: (x.exp(), x.abs().log(), x.abs().sqrt(), x.abs().rsqrt(), x.sigmoid(), x.tanh(),
                         -x, x.erf(), x.sin(), x.cos(), x.floor(), x.ceil(), x.round(), x.reciprocal()),
              [randn(3, 5)]),
    "more_math": (lambda x: ((x.abs() + 0.5).log1p(), x.expm1(), x.tan(), x.sign(), x.trunc(),
                             torch.isnan(x.log()), torch.nan_to_num(x.log(), nan=0.0), F.softplus(x), F.mish(x),
                             F.logsigmoid(x), F.celu(x), x.flip(1), x.flip((0, 1)), x.norm(dim=1), F.normalize(x, dim=0),
                             x.norm(p=1, dim=0, keepdim=True), *torch.std_mean(x, 1), F.cosine_similarity(x, x * 2 + 1)),
                  [randn(4, 6) * 1.3]),
    "activations": (lambda x: (F.relu(x), F.silu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.hardswish(x),
                               F.hardsigmoid(x), F.relu6(x), F.leaky_relu(x, 0.2), F.elu(x), F.hardtanh(x, -0.5, 0.5)),
                    [randn(4, 6) * 4]),
    "binary_broadcast": (lambda a, b: (a + b, a - 2 * b, a * b, a / (b.abs() + 1), torch.maximum(a, b),
                                       torch.minimum(a, b), a ** 2, a.abs() ** 0.5, a.abs().pow(b), a + 1.5),
                         [randn(2, 3, 4), randn(3, 1)]),
    "compare_where_masked_fill": (lambda a, b: (torch.where(a > b, a, b), a.masked_fill(a < 0, -1.0),
                                                (a == b) | (a >= 0.5), (a != 0) & (b <= 0.1), ~(a > 0),
                                                torch.where(a > 0, a, 0.0)),
                                  [randn(3, 4), randn(3, 4)]),
    "clamp": (lambda x: (x.clamp(-0.5, 0.5), x.clamp(min=0.1), x.clamp(max=0.2)), [randn(5, 5)]),
    "int_math": (lambda i: (i * 3 + 1, i // 2, i % 3, torch.fmod(i, 3), i.float() % 2.5, i.float() / 2,
                           (i > 2).to(torch.int32)),
                 [torch.randint(-5, 5, (3, 4), generator=RNG)]),
    "type_conversions": (lambda x: (x.to(torch.int64), x.int(), (x > 0).float(), x.double().float(),
                                    x.to(torch.float16).float()),
                         [randn(3, 4) * 10]),
    "reductions": (lambda x: (x.sum(), x.sum(1), x.mean((1, 2), keepdim=True), x.amax(-1), x.amin(0),
                              x.max(1)[0], x.max(1)[1], x.argmax(-1), x.argmin(1, keepdim=True),
                              x.var(1), x.std(-1, keepdim=True), x.prod(2), (x > 0).any(1), (x > -3).all(),
                              x.var(2, correction=0), *x.topk(2, dim=1), x.topk(3, largest=False)[0]),
                   [randn(2, 3, 4)]),
    "softmax_family": (lambda x: (x.softmax(-1), x.log_softmax(1), F.softmax(x, dim=0)), [randn(3, 7)]),
    "view_permute_expand": (lambda x: (x.view(6, 4), x.reshape(2, -1), x.permute(2, 0, 1), x.transpose(0, 1),
                                       x.flatten(), x[:, :1].expand(2, 3, 4), x.unsqueeze(1), x[:1].squeeze(0),
                                       x.t() if x.dim() == 2 else x.mT, x.contiguous()),
                            [randn(2, 3, 4)]),
    "slice_select": (lambda x: (x[:, 1:3], x[..., ::2], x[1], x[:, -1], x[:, :, 1:-1], x.narrow(2, 1, 2)),
                     [randn(2, 3, 4)]),
    "cat_split_stack": (lambda a, b: (torch.cat([a, b], 1), torch.stack([a, a], 0), *a.split(2, dim=1),
                                      *a.split([1, 3], dim=1), *a.unbind(0), *a.chunk(2, dim=1)),
                        [randn(2, 4), randn(2, 3)]),
    "index": (lambda x, i: (x[i], x[:, i], x.index_select(1, i), x[i, i], torch.gather(x, 0, i.view(1, -1).expand(2, -1))
                            if False else x[torch.tensor([0, 2])]),
              [randn(3, 3), torch.tensor([2, 0, 1, 2])]),
    "factories": (lambda x: (x + torch.ones(3, 4), torch.zeros_like(x), torch.full_like(x, 7.0), torch.arange(4) * 2,
                             torch.arange(1, 9, 2).float() + x[0], x.new_zeros(2), torch.ones_like(x, dtype=torch.int64)),
                  [randn(3, 4)]),
    "pad_repeat": (lambda x: (F.pad(x, (1, 2)), F.pad(x, (1, 0, 0, 2), value=0.5), x.repeat(2, 1, 3)),
                   [randn(2, 3, 4)]),
    "matmul_family": (lambda a, b, c: (a @ b, torch.bmm(c, c.transpose(1, 2)), torch.addmm(b[0], a, b),
                                       torch.einsum("bij,bkj->bik", c, c), torch.mm(a, b)),
                      [randn(3, 5), randn(5, 5), randn(2, 3, 5)]),
    "norms": (lambda x: (F.layer_norm(x, (4,)), F.layer_norm(x, (3, 4), eps=1e-3), F.group_norm(x, 3),
                         F.instance_norm(x), F.rms_norm(x, (4,)) if hasattr(F, "rms_norm") else x),
              [randn(2, 6, 3, 4)]),
    "pools": (lambda x: (F.max_pool2d(x, 3, stride=2, padding=1), F.max_pool2d(x, 2, ceil_mode=True),
                         F.avg_pool2d(x, 3, stride=2, padding=1), F.avg_pool2d(x, 3, padding=1, count_include_pad=False),
                         F.adaptive_avg_pool2d(x, (2, 3)), F.adaptive_avg_pool2d(x, 1), F.adaptive_max_pool2d(x, 1),
                         F.adaptive_max_pool2d(x[..., :6, :6], (2, 3))),
              [randn(1, 2, 7, 9)]),
    "conv1d": (lambda x, w: (F.conv1d(x, w, padding=1, stride=2), F.conv1d(x, w[:, :1].repeat(1, 1, 1), groups=4)
                             if False else F.conv1d(x, w, dilation=2)),
               [randn(2, 4, 12), randn(6, 4, 3)]),
    "conv_transpose": (lambda x, w, w1, x1: (F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
                                             F.conv_transpose2d(x, w, padding=1, dilation=2),
                                             F.conv_transpose2d(x, w.repeat(1, 1, 1, 1)[:, :2], groups=2),
                                             F.conv_transpose1d(x1, w1, stride=3, padding=1)),
                       [randn(1, 4, 5, 6), randn(4, 3, 3, 3), randn(4, 2, 3), randn(2, 4, 7)]),
    "upsample": (lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(x, size=(5, 11)),
                            F.interpolate(x, size=(7, 9), mode="bilinear"),
                            F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)),
                 [randn(1, 2, 4, 6)]),
    "conv2d_depthwise": (lambda x, w: F.conv2d(x, w, padding=1, groups=4), [randn(1, 4, 6, 6), randn(8, 1, 3, 3)]),
    "sdpa": (lambda q, k, v, m: (F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                 F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                 F.scaled_dot_product_attention(q, k, v, scale=0.3)),
             [randn(2, 2, 5, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8), randn(5, 5)]),
    "gather_cumsum": (lambda x, i: (torch.gather(x, 1, i), torch.gather(x, 0, i[:2] % 3), x.cumsum(1), x.cumsum(0),
                                    i.cumsum(-1)),
                      [randn(3, 4), torch.tensor([[0, 3, 2], [2, 2, 1], [1, 0, 3]])]),
    "embedding": (lambda i, w: F.embedding(i, w), [torch.tensor([[0, 3, 9], [4, 4, 1]]), randn(10, 6)]),
    "sort": (lambda x, t: (*x.sort(1), *x.sort(0, descending=True), x.argsort(-1), x.argsort(1, descending=True),
                           *torch.sort(t, stable=True), *torch.sort(t, descending=True, stable=True), *t.sort(dim=-1, stable=True)),
             [randn(4, 6), torch.tensor([[3, 1, 3, 0, 1], [2, 2, 2, 5, 1]])]),
    "scatter": (lambda x, i, s: (x.scatter(1, i, s), x.scatter(0, i[:2] % 3, s[:2]), x.scatter_add(1, i, s),
                                 x.scatter_add(0, i % 3, s), x.scatter(1, i, 2.5), x.scatter(1, i, s, reduce="multiply"),
                                 x.scatter_reduce(1, i, s, "amax"), x.scatter_reduce(1, i, s, "sum", include_self=False),
                                 x.scatter_reduce(0, i % 3, s, "amin", include_self=False), x.scatter_reduce(1, i, s, "prod")),
                [randn(3, 5), torch.tensor([[0, 1], [2, 2], [4, 3]]), randn(3, 4)]),
    "index_put": (lambda x, i, v, w: (_put(x, (i[1:],), v[:2]), _put(x, (i,), v[:3], True),
                                      _put(x, (slice(None), i[1:]), w), _put(x, (i, i), w[0, 0], True),
                                      _put(x, (i[1:], slice(None)), 1.5), _put(x, (x > 0,), -1.0),
                                      _put(x, (x[:, 0] > 0,), w[0, 0]), _put(x, (x < 0,), torch.tensor([2.0]), True)),
                  [randn(4, 5), torch.tensor([0, 2, 0]), randn(5, 5), randn(4, 2)]),
    "conv3d": (lambda x, w, wg, b: (F.conv3d(x, w, b, padding=1), F.conv3d(x, w, stride=(2, 1, 2), dilation=(2, 1, 1)),
                                    F.conv3d(x, wg, groups=2, padding=(0, 1, 0))),
               [randn(2, 4, 6, 5, 7), randn(3, 4, 3, 3, 3), randn(4, 2, 2, 3, 1), randn(3)]),
    "pool3d": (lambda x: (F.max_pool3d(x, 2), F.max_pool3d(x, 3, stride=2, padding=1, ceil_mode=True),
                          F.avg_pool3d(x, (2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 0)),
                          F.avg_pool3d(x, 3, stride=2, padding=1, count_include_pad=False)),
               [randn(1, 3, 5, 6, 7)]),
}


DYNAMIC = {
    # symbolic windows and sizes: x[:, :n] of a fixed buffer, x[:, :1] of a symbolic dim,
    # gather and cumsum along a symbolic dim, arange of a symbolic length
    "windows": (lambda x, buf: (buf[:, : x.shape[1]] + x, x[:, :1] * 2, x[:, 1:] - x[:, :-1], x.cumsum(1),
                                torch.gather(buf, 1, torch.arange(x.shape[1]).view(1, -1).expand(2, -1)),
                                x + torch.arange(x.shape[1]))),
}


@pytest.mark.parametrize("name", sorted(DYNAMIC))
def test_dynamic_op_group(name):
    n = torch.export.Dim("n", min=3, max=11)
    x, buf = randn(2, 5), randn(2, 12)
    check(Fn(DYNAMIC[name]), x, buf, rtol=1e-5, atol=1e-5, dynamic_shapes=(({1: n}, None),),
          more=[(randn(2, 9), buf), (randn(2, 3), buf)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_group(name):
    fn, inputs = CASES[name]
    check(Fn(fn), *inputs, rtol=1e-5, atol=1e-5)


class _MaskBuffers(torch.nn.Module):
    """Boolean-mask indexing with masks known at export (buffers): the result size is static."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cols", torch.tensor([True, False, True, True]))
        self.register_buffer("cells", torch.rand(3, 4, generator=RNG) > 0.5)

    def forward(self, x):
        y = x[:, self.cols]
        return y * 2, y.sum(1), x[self.cells], x[self.cells].cumsum(0)


def test_boolean_mask_known_at_export():
    check(_MaskBuffers(), randn(3, 4), rtol=1e-5, atol=1e-5)
