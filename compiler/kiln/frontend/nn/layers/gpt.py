"""A GPT-2-layout language model whose export is ``prefill``, ``decode`` and ``create_cache``.

Layout and parameter names are GPT-2's (Hugging Face ``GPT2LMHeadModel``): token and position
embeddings ``transformer.wte`` / ``transformer.wpe``, pre-LayerNorm blocks
``transformer.h.{i}`` (``ln_1``, ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``,
``mlp.c_proj``; Conv1D weights stored (in, out)), ``transformer.ln_f``, and a head tied to
``wte``. So a GPT-2-shaped PyTorch ``state_dict`` loads as is (``lm_head.weight``, the tied
copy, and the attention's mask buffers are accepted and skipped).

``export_lm()`` traces three graph functions over one KV cache (``kiln.nn.kv_cache``):

- ``create_cache() -> kv_cache[layers, 2, heads, max_len, head_dim]``, zeroed;
- ``prefill(tokens[1, n], kv_cache) -> (logits[1, vocab], kv_cache)``: the prompt's keys and
  values written to positions ``0 .. n - 1``, the logits of its last token;
- ``decode(tokens[1, t], kv_cache) -> (logits[1, vocab], kv_cache)``: one step for the last
  of the tokens so far (positions ``0 .. t - 2`` are in the cache): O(t) work.

>>> model = GPT(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
>>> mod, _ = model.export_lm()          # doctest: +SKIP
"""
from __future__ import annotations

import math

from .. import functional as F
from ..kv_cache import kv_write, zeros_cache
from ..module import Module, ModuleList
from ..parameter import Parameter, normal, zeros
from ..spec import Tensor as Spec
from ..tensor import emit
from .linear import Embedding
from .norm import LayerNorm


class Conv1D(Module):
    """GPT-2's linear layer: ``x @ weight + bias``, ``weight`` of shape (in, out)."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = Parameter((n_in, n_out), "float32", init=normal(0.02))
        self.bias = Parameter((n_out,), "float32", init=zeros)

    def forward(self, x):
        return F.matmul(x, self.weight) + self.bias


class GPTAttention(Module):
    """Causal self-attention that appends to and reads from the KV cache of its layer."""
    _ignored_state_keys = ("bias", "masked_bias")  # GPT-2's mask buffers: Kiln builds its own

    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head, self.head_dim = n_head, n_embd // n_head
        self.c_attn = Conv1D(n_embd, 3 * n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)

    def _heads(self, x):
        b, s, _ = x.shape
        return x.reshape(b, s, self.n_head, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, tokens, cache, layer: int, mask=None):
        """``x[1, s, E]`` for the last ``s`` of ``tokens[1, t]``; with ``mask`` (prefill, s = t)
        attention among the new positions, else (decode, s = 1) over the cache's first t."""
        q, k, v = (self._heads(y) for y in F.split(self.c_attn(x), x.shape[-1], dim=2))
        cache = kv_write(cache, tokens, k, v, layer)
        scale = 1.0 / math.sqrt(self.head_dim)
        if mask is None:
            # one query over the cache's first t positions: scores as K @ q^T (t x 1), so the
            # cache slice is read in its own layout (no transposed copy of K per step)
            t = tokens.shape[1]
            L, _, H, M, D = cache.shape
            k, v = (emit("strided_slice", cache, begin=(layer, kind, 0, 0, 0), end=(layer + 1, kind + 1, H, t, D),
                         assume_in_bounds=True).reshape(1, H, t, D) for kind in (0, 1))
            scores = (F.matmul(k, q.reshape(1, H, D, 1)) * scale).reshape(1, H, 1, t)
            o = F.matmul(F.softmax(scores, dim=-1), v)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        b, h, s, d = o.shape
        return self.c_proj(o.permute(0, 2, 1, 3).reshape(b, s, h * d)), cache


class GPTMLP(Module):
    def __init__(self, n_embd: int):
        super().__init__()
        self.c_fc = Conv1D(n_embd, 4 * n_embd)
        self.c_proj = Conv1D(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPTBlock(Module):
    def __init__(self, n_embd: int, n_head: int, eps: float):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, eps=eps)
        self.attn = GPTAttention(n_embd, n_head)
        self.ln_2 = LayerNorm(n_embd, eps=eps)
        self.mlp = GPTMLP(n_embd)

    def forward(self, x, tokens, cache, layer: int, mask=None):
        a, cache = self.attn(self.ln_1(x), tokens, cache, layer, mask)
        x = x + a
        return x + self.mlp(self.ln_2(x)), cache


class _Transformer(Module):
    def __init__(self, vocab_size, n_positions, n_embd, n_layer, n_head, eps):
        super().__init__()
        self.wte = Embedding(vocab_size, n_embd)
        self.wpe = Embedding(n_positions, n_embd)
        self.h = ModuleList([GPTBlock(n_embd, n_head, eps) for _ in range(n_layer)])
        self.ln_f = LayerNorm(n_embd, eps=eps)


class GPT(Module):
    """GPT-2 layout (see the module docstring). ``max_len`` (default ``n_positions``) sizes the
    KV cache: prompts and generations up to that many tokens."""
    _ignored_state_keys = ("lm_head.weight",)  # tied to transformer.wte.weight

    def __init__(self, vocab_size: int = 50257, n_positions: int = 1024, n_embd: int = 768,
                 n_layer: int = 12, n_head: int = 12, layer_norm_epsilon: float = 1e-5, max_len=None):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"GPT: n_embd ({n_embd}) must be divisible by n_head ({n_head})")
        self.n_layer, self.n_head, self.head_dim = n_layer, n_head, n_embd // n_head
        self.max_len = int(max_len or n_positions)
        if self.max_len > n_positions:
            raise ValueError(f"GPT: max_len {self.max_len} exceeds the {n_positions} positions")
        self.transformer = _Transformer(vocab_size, n_positions, n_embd, n_layer, n_head, layer_norm_epsilon)

    def cache_shape(self) -> tuple:
        return (self.n_layer, 2, self.n_head, self.max_len, self.head_dim)

    def _run(self, tokens, cache, x, mask):
        tr = self.transformer
        for i, block in enumerate(tr.h):
            x, cache = block(x, tokens, cache, i, mask)
        s = x.shape[1]
        last = x if isinstance(s, int) and s == 1 else emit(
            "strided_slice", x, begin=(s - 1,), end=(s,), axes=(1,), assume_in_bounds=True)
        logits = F.matmul(tr.ln_f(last), tr.wte.weight.mT)
        return logits.reshape(1, logits.shape[-1]), cache

    def prefill(self, tokens, kv_cache):
        """Process a prompt ``tokens[1, n]`` into an empty cache; the last token's logits."""
        n = tokens.shape[1]
        pos = emit("arange", tokens, start=0, step=1, length=n, dtype="int64")
        x = self.transformer.wte(tokens) + self.transformer.wpe(pos)
        i = emit("arange", tokens, start=0, step=1, length=n, dtype="int64")
        mask = F.le(i.reshape(1, n), i.reshape(n, 1))  # key j attends for query i when j <= i
        return self._run(tokens, kv_cache, x, mask)

    def decode(self, tokens, kv_cache):
        """One step: the logits after ``tokens[1, t]``, whose first t - 1 are in the cache."""
        t = tokens.shape[1]
        last = emit("strided_slice", tokens, begin=(t - 1,), end=(t,), axes=(1,), assume_in_bounds=True)
        pos = emit("arange", tokens, start=t - 1, step=1, length=1, dtype="int64")
        x = self.transformer.wte(last) + self.transformer.wpe(pos)
        return self._run(tokens, kv_cache, x, None)

    def create_cache(self):
        """A zeroed cache for ``max_len`` positions."""
        return zeros_cache(self.n_layer, self.n_head, self.max_len, self.head_dim)

    def export_lm(self, bounds: bool = True):
        """``(IRModule, param_spec)`` with ``prefill``, ``decode`` and ``create_cache`` (module
        docstring). With ``bounds``, intermediates are planned in the arena at ``max_len``, so
        a step allocates no intermediate on the heap. The runtime refuses ``n`` or ``t``
        outside ``1 .. max_len``."""
        from ....ir.derived_dims import with_bounds
        from ....ir.expr import IntImm
        from ....ir.function import IRModule
        from ....ir.graph import Function
        cache = Spec(self.cache_shape(), "float32")
        spec = {"prefill": {"tokens": Spec((1, "n"), "int64"), "kv_cache": cache},
                "decode": {"tokens": Spec((1, "t"), "int64"), "kv_cache": cache},
                "create_cache": {}}
        mod, param_spec = self.export(spec)
        funcs = {}
        for name, f in mod.items():
            if isinstance(f, Function) and name != "create_cache":
                dim = f.params[0].ty.shape[1]
                # the cache write and the position lookup rely on 1 <= dim <= max_len
                limits = ((dim, self.max_len), (IntImm(1, dim.dtype) - dim, 0))
                f = Function(f.params, f.blocks, f.body, tuple(f.attrs) + (("kiln.limits", limits),))
            funcs[name] = f
        mod = IRModule(funcs, mod.attrs)
        if bounds:
            mod = with_bounds(mod, {"n": self.max_len, "t": self.max_len})
        return mod, param_spec
