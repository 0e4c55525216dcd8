"""A GPT-2-layout language model in plain PyTorch: the reference the dynamic-shape tests compare
Kiln against (ONNX export with past key/values, kiln.nn's GPT, the generation examples).

Parameter names and shapes are GPT-2's (Hugging Face ``GPT2LMHeadModel``): ``transformer.wte``,
``transformer.wpe``, ``transformer.h.{i}.ln_1 / attn.c_attn / attn.c_proj / ln_2 / mlp.c_fc /
mlp.c_proj`` with Conv1D weights stored (in, out), ``transformer.ln_f``, and ``lm_head`` tied to
``wte``. The causal mask is GPT-2's: a ``(ctx, ctx)`` lower-triangular buffer sliced at
``[past:past + n, :past + n]``, which is what makes a decode step's ONNX export need Range and
Slice over symbolic sizes.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class Conv1D(nn.Module):
    """GPT-2's linear layer: ``x @ weight + bias`` with ``weight`` of shape (in, out)."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.randn(n_out) * 0.02)

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, ctx: int):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx),
                             persistent=False)

    def forward(self, x, past_k, past_v):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        hd = d // self.heads
        q, k, v = (y.view(b, t, self.heads, hd).transpose(1, 2) for y in (q, k, v))
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        total = k.shape[2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = self.bias[:, :, total - t:total, :total]
        att = torch.where(mask, att, torch.tensor(torch.finfo(att.dtype).min, dtype=att.dtype))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.c_proj(y), k, v


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.c_fc = Conv1D(d, 4 * d)
        self.c_proj = Conv1D(4 * d, d)

    def forward(self, x):
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ctx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, heads, ctx)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d)

    def forward(self, x, past_k, past_v):
        a, k, v = self.attn(self.ln_1(x), past_k, past_v)
        x = x + a
        return x + self.mlp(self.ln_2(x)), k, v


class Transformer(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, ctx: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList([Block(d, heads, ctx) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)


class GPT2(nn.Module):
    """``forward(ids[b, n], *past)`` with ``past`` = (k0, v0, k1, v1, ...) each (b, heads, past, hd)
    -> ``(logits[b, n, vocab], k0', v0', ...)`` with the new keys and values appended."""

    def __init__(self, vocab=96, d=32, heads=4, layers=2, ctx=128, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.config = dict(vocab=vocab, d=d, heads=heads, layers=layers, ctx=ctx)
        self.transformer = Transformer(vocab, d, heads, layers, ctx)
        with torch.no_grad():
            for p in self.transformer.parameters():  # not all-zero / all-one: the test must see them
                p.add_(torch.randn_like(p) * 0.1)
            # GPT-2-like scales, so that greedy decoding does not just repeat the last token
            self.transformer.wte.weight.normal_(0, 0.3)
            self.transformer.wpe.weight.normal_(0, 0.3)
            for block in self.transformer.h:
                for m in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                    m.weight.normal_(0, 0.3)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, ids, *past):
        t, p = ids.shape[1], past[0].shape[2]
        pos = torch.arange(p, p + t, dtype=torch.long).unsqueeze(0)
        x = self.transformer.wte(ids) + self.transformer.wpe(pos)
        present = []
        for i, block in enumerate(self.transformer.h):
            x, k, v = block(x, past[2 * i], past[2 * i + 1])
            present += [k, v]
        return (self.lm_head(self.transformer.ln_f(x)), *present)

    def empty_past(self, batch: int = 1):
        c = self.config
        return [torch.zeros(batch, c["heads"], 0, c["d"] // c["heads"]) for _ in range(2 * c["layers"])]

    @torch.no_grad()
    def generate(self, prompt, steps: int):
        """Greedy decoding: the prompt's tokens then ``steps`` new ones (a list of ints)."""
        past = self.empty_past()
        ids = torch.tensor([list(prompt)], dtype=torch.long)
        out = []
        for _ in range(steps):
            logits, *past = self(ids, *past)
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            ids = torch.tensor([[nxt]], dtype=torch.long)
        return out


def export_decode_step(model: GPT2, path: str) -> None:
    """The model as ONNX with past key/values: inputs ``input_ids`` (batch, seq) and
    ``past_key_{i}`` / ``past_value_{i}`` (batch, heads, past, hd), dynamic batch, seq and past."""
    c = model.config
    names = ["input_ids"] + [f"past_{kind}_{i}" for i in range(c["layers"]) for kind in ("key", "value")]
    outs = ["logits"] + [f"present_{kind}_{i}" for i in range(c["layers"]) for kind in ("key", "value")]
    dyn = {"input_ids": {0: "batch", 1: "seq"},
           **{n: {0: "batch", 2: "past"} for n in names[1:]},
           "logits": {0: "batch", 1: "seq"}, **{n: {0: "batch", 2: "total"} for n in outs[1:]}}
    ids = torch.zeros(1, 3, dtype=torch.long)
    past = [torch.zeros(1, c["heads"], 4, c["d"] // c["heads"]) for _ in range(2 * c["layers"])]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings about the mask's fill value
        torch.onnx.export(model.eval(), (ids, *past), path, input_names=names, output_names=outs,
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
