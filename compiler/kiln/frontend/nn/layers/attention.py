"""Attention layers built from matmul / softmax / reshape / permute:

- ``Attention(embed_dim, num_heads, causal=False)``: self-attention over x [B, L, E] with
  ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` Linears and
  ``F.scaled_dot_product_attention``.
- ``MultiheadAttention``: PyTorch's ``nn.MultiheadAttention`` (same parameters:
  ``in_proj_weight`` [3E, E], ``in_proj_bias``, ``out_proj``; same masks and returns), so its
  ``state_dict`` loads as is.

>>> attn = Attention(64, num_heads=4, causal=True)
>>> [n for n, _ in attn.named_parameters()][:2]
['q_proj.weight', 'q_proj.bias']
"""
from __future__ import annotations

import math

import numpy as np

from ....ir import dtype as dt
from .. import functional as F
from ..module import Module
from ..parameter import Parameter, uniform, zeros
from ..tensor import constant, static_int
from .linear import Linear


def _split_heads(x, num_heads: int):
    # [B, L, E] -> [B, H, L, E / H]
    b, length, e = x.shape
    return x.reshape(b, length, num_heads, e // num_heads).permute(0, 2, 1, 3)


def _merge_heads(x):
    # [B, H, L, D] -> [B, L, H * D]
    b, h, length, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, length, h * d)


class Attention(Module):
    """Multi-head self-attention: ``out_proj(sdpa(q_proj(x), k_proj(x), v_proj(x)))`` with
    heads split from the embedding; ``causal`` masks future positions. ``forward(x, mask=None)``
    takes an optional mask broadcast to [B, H, L, L] (bool: True attends; float: added)."""

    def __init__(self, embed_dim: int, num_heads: int, causal: bool = False, bias: bool = True,
                 dtype: str = "float32"):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"Attention: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim, self.num_heads, self.causal = int(embed_dim), int(num_heads), bool(causal)
        self.q_proj = Linear(embed_dim, embed_dim, bias, dtype)
        self.k_proj = Linear(embed_dim, embed_dim, bias, dtype)
        self.v_proj = Linear(embed_dim, embed_dim, bias, dtype)
        self.out_proj = Linear(embed_dim, embed_dim, bias, dtype)

    def forward(self, x, mask=None):
        q = _split_heads(self.q_proj(x), self.num_heads)
        k = _split_heads(self.k_proj(x), self.num_heads)
        v = _split_heads(self.v_proj(x), self.num_heads)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.out_proj(_merge_heads(o))

    def extra_repr(self) -> str:
        return f"{self.embed_dim}, num_heads={self.num_heads}, causal={self.causal}"


class MultiheadAttention(Module):
    """PyTorch's ``nn.MultiheadAttention`` for inference (kdim = vdim = embed_dim).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)`` returns ``(output, weights or None)``.
    Masks follow PyTorch: a bool mask is True where attention is *not* allowed; a float mask
    is added. ``attn_mask`` is [L, S] or [B * H, L, S]; ``key_padding_mask`` is [B, S].
    Inputs are [L, B, E] unless ``batch_first`` (then [B, L, E]), or unbatched [L, E].
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, dtype: str = "float32"):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        if add_bias_kv or add_zero_attn or (kdim or embed_dim) != embed_dim or (vdim or embed_dim) != embed_dim:
            raise ValueError("MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim other than "
                             "embed_dim are not supported")
        self.embed_dim, self.num_heads, self.batch_first = int(embed_dim), int(num_heads), bool(batch_first)
        e = self.embed_dim
        # PyTorch: xavier_uniform_ for in_proj_weight, zeros for the biases
        self.in_proj_weight = Parameter((3 * e, e), dtype, init=uniform(math.sqrt(6.0 / (4 * e))))
        self.in_proj_bias = Parameter((3 * e,), dtype, init=zeros) if bias else None
        self.out_proj = Linear(e, e, bias, dtype)
        if bias:
            self.out_proj.bias.init = zeros

    def _project(self, query, key, value):
        e = self.embed_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        if query is key and key is value:  # self-attention: one matmul, then split
            return F.split(F.linear(query, w, b), e, dim=-1)
        return tuple(F.linear(x, w[i * e:(i + 1) * e], None if b is None else b[i * e:(i + 1) * e])
                     for i, x in enumerate((query, key, value)))

    def _mask(self, mask, dtype):
        """A PyTorch mask as an additive float mask."""
        if mask is None:
            return None
        if dt.is_bool(mask.dtype):
            lowest = float(np.finfo(dt.to_numpy(dtype)).min)
            return F.where(mask, constant(lowest, dtype), constant(0.0, dtype))
        return mask

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        elif not self.batch_first:
            same = query is key and key is value  # keep self-attention recognisable
            query = query.transpose(0, 1)
            key, value = (query, query) if same else (key.transpose(0, 1), value.transpose(0, 1))
        q, k, v = self._project(query, key, value)
        h = self.num_heads
        q, k, v = (_split_heads(t, h) for t in (q, k, v))  # [B, H, L, D]
        b, _, length, d = q.shape
        s = k.shape[2]
        scores = (q * (1.0 / math.sqrt(static_int(d, "head size")))) @ k.mT  # as PyTorch: scale q
        mask = self._mask(attn_mask, scores.dtype)
        if mask is not None and mask.ndim == 3:
            mask = mask.reshape(b, h, length, s)
        if is_causal and attn_mask is None:
            causal = np.triu(np.ones((static_int(length, "L"), static_int(s, "S")), bool), 1)
            mask = self._mask(constant(causal), scores.dtype)
        if key_padding_mask is not None:
            kpm = self._mask(key_padding_mask, scores.dtype)
            kpm = kpm.reshape(1, s) if unbatched else kpm.reshape(b, 1, 1, s)
            mask = kpm if mask is None else mask + kpm
        if mask is not None:
            scores = scores + mask
        weights = scores.softmax(-1)
        out = self.out_proj(_merge_heads(weights @ v))  # [B, L, E]
        if unbatched:
            out = out[0]
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(dim=1)
        return out, (weights[0] if unbatched else weights)

    def extra_repr(self) -> str:
        return f"{self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"


