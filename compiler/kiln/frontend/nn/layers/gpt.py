"""A GPT-2-layout language model whose export is ``prefill``, ``decode`` and ``create_cache``.

Layout and parameter names are GPT-2's (Hugging Face ``GPT2LMHeadModel``): token and position
embeddings ``transformer.wte`` / ``transformer.wpe``, pre-LayerNorm blocks
``transformer.h.{i}`` (``ln_1``, ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``,
``mlp.c_proj``; Conv1D weights stored (in, out)), ``transformer.ln_f``, and a head tied to
``wte``. So a GPT-2-shaped PyTorch ``state_dict`` loads as is (``lm_head.weight``, the tied
copy, and the attention's mask buffers are accepted and skipped).

``export_lm()`` traces three graph functions over one KV cache (``kiln.nn.kv_cache``):

- ``create_cache() -> kv_cache[layers, 2, heads, max_len + 1, head_dim]``, zeroed (length 0;
  the extra position holds the cache's length, see ``kiln.nn.kv_cache``);
- ``prefill(tokens[1, n], kv_cache) -> (logits[1, vocab], kv_cache)``: a new sequence, the
  prompt's keys and values written to positions ``0 .. n - 1`` and the length set to ``n``;
  the logits of its last token;
- ``decode(token[1, 1], kv_cache) -> (logits[1, vocab], kv_cache)``: one step for the next
  token, at the position the cache's length gives (then one more): O(length) work, and no
  symbolic shape, so everything a step needs is planned ahead.

The ``kv_cache`` argument is declared written: both functions update it in place and return
the same memory.

>>> model = GPT(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
>>> mod, _ = model.export_lm()          # doctest: +SKIP
"""
from __future__ import annotations

import math

from .. import functional as F
from .. import kv_cache as kv_cache_ops
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

    def forward(self, x, cache, layer: int, mask=None):
        """``x[1, s, E]``: with ``mask`` (prefill) a prompt written to the cache's positions
        ``0 .. s - 1``, attention among them; else (decode, s = 1) one token written at the
        cache's length and attending over the positions up to it."""
        qkv = self.c_attn(x)
        q, k, v = (self._heads(y) for y in F.split(qkv, x.shape[-1], dim=2))
        scale = 1.0 / math.sqrt(self.head_dim)
        if mask is None:
            cache = kv_cache_ops.write_step(cache, k, v, layer)
            o = kv_cache_ops.attend_step(cache, q, layer, scale)
        else:
            # The cache takes k and v from the projection's output: the heads split out here
            # then feed attention alone, which reads them in place (fuse_attention).
            cache = kv_cache_ops.write_prompt(cache, qkv, layer)
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

    def forward(self, x, cache, layer: int, mask=None):
        a, cache = self.attn(self.ln_1(x), cache, layer, mask)
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
    KV cache: prompts and generations up to that many tokens in all."""
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
        """``(layers, 2, heads, max_len + 1, head_dim)``: the last position holds the length."""
        return (self.n_layer, 2, self.n_head, self.max_len + 1, self.head_dim)

    def _run(self, cache, x, mask):
        tr = self.transformer
        for i, block in enumerate(tr.h):
            x, cache = block(x, cache, i, mask)
        s = x.shape[1]
        last = x if isinstance(s, int) and s == 1 else emit(
            "strided_slice", x, begin=(s - 1,), end=(s,), axes=(1,), assume_in_bounds=True)
        logits = F.matmul(tr.ln_f(last), tr.wte.weight.mT)
        return logits.reshape(1, logits.shape[-1]), cache

    def prefill(self, tokens, kv_cache):
        """A new sequence: the prompt ``tokens[1, n]`` into the cache (whatever it held is
        dropped), its length set to n; the last token's logits."""
        n = tokens.shape[1]
        pos = emit("arange", tokens, start=0, step=1, length=n, dtype="int64")
        x = self.transformer.wte(tokens) + self.transformer.wpe(pos)
        i = emit("arange", tokens, start=0, step=1, length=n, dtype="int64")
        mask = F.le(i.reshape(1, n), i.reshape(n, 1))  # key j attends for query i when j <= i
        logits, cache = self._run(kv_cache, x, mask)
        return logits, kv_cache_ops.set_length(cache, tokens, logits)

    def decode(self, token, kv_cache):
        """One step: the logits after ``token[1, 1]``, the next token of the sequence in the
        cache (at the position its length gives; NaN logits and no change when it is full)."""
        pos = kv_cache_ops.position(kv_cache)
        x = self.transformer.wte(token) + self.transformer.wpe(pos)
        logits, cache = self._run(kv_cache, x, None)
        return logits, kv_cache_ops.advance(cache, logits)

    def create_cache(self):
        """A zeroed cache for ``max_len`` positions."""
        return kv_cache_ops.zeros_cache(self.n_layer, self.n_head, self.max_len, self.head_dim)

    def export_lm(self, bounds: bool = True):
        """``(IRModule, param_spec)`` with ``prefill``, ``decode`` and ``create_cache`` (module
        docstring). With ``bounds``, prefill's intermediates are planned in the arena at
        ``max_len`` (decode has static shapes: always planned). The runtime refuses a prompt
        length ``n`` outside ``1 .. max_len``."""
        from ....ir.derived_dims import with_bounds
        from ....ir.expr import IntImm
        from ....ir.function import IRModule
        from ....ir.graph import Function
        cache = Spec(self.cache_shape(), "float32")
        spec = {"prefill": {"tokens": Spec((1, "n"), "int64"), "kv_cache": cache},
                "decode": {"token": Spec((1, 1), "int64"), "kv_cache": cache},
                "create_cache": {}}
        mod, param_spec = self.export(spec)
        funcs = {}
        for name, f in mod.items():
            if isinstance(f, Function) and name == "prefill":
                dim = f.params[0].ty.shape[1]
                # the cache writes and the position lookup rely on 1 <= n <= max_len
                limits = ((dim, self.max_len), (IntImm(1, dim.dtype) - dim, 0))
                f = Function(f.params, f.blocks, f.body, tuple(f.attrs) + (("kiln.limits", limits),))
            funcs[name] = f
        mod = IRModule(funcs, mod.attrs)
        if bounds:
            mod = with_bounds(mod, {"n": self.max_len})
        return mod, param_spec
