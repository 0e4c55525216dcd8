"""A KV cache for language models: one tensor the exported functions update in place.

Layout: ``kv_cache[layers, 2, heads, max_len, head_dim]`` (keys at ``[:, 0]``, values at
``[:, 1]``), float32, created once by the model's ``create_cache`` function. ``prefill`` and
``decode`` take it as an argument and write the new positions' keys and values into it
in place: the traced graph calls a small tensor program (``kv_write``) through ``call_tir``
with the attribute ``inplace=0``, whose result *is* the cache (an alias). Lowering marks the
function's parameter as written (executable format 3, ``PARAM_WRITTEN``), so the runtime
accepts that argument being written, refuses a read-only one, and refuses it sharing memory
with any other argument.

The number of positions already in the cache is not stored in it: the functions take the
tokens so far, ``tokens[1, t]`` (a view of the caller's buffer, no copy), and the shape gives
``t``. The new keys and values go to positions ``t - n .. t - 1``; a step's attention reads
positions ``0 .. t - 1``: O(t) work per token. ``t <= max_len`` (and ``t >= 1``) are limits
the runtime checks before any kernel runs, since the write kernel relies on them.
"""
from __future__ import annotations

from ...ir.graph import Call, GlobalVar, Tuple as GraphTuple
from .tensor import Tensor, current_trace

_WRITE = '''
@T.prim_func
def main(cache: T.Buffer(({L}, 2, {H}, {M}, {D}), "float32"), tokens: T.Buffer((1, t), "int64"),
         k: T.Buffer((1, {H}, n, {D}), "float32"), v: T.Buffer((1, {H}, n, {D}), "float32")):
    t = T.int64()
    n = T.int64()
    for h, i, d in T.grid({H}, n, {D}):
        with T.block("kv_write"):
            vh, vi, vd = T.axis.remap("SSS", [h, i, d])
            cache[{layer}, 0, vh, t - n + vi, vd] = k[0, vh, vi, vd]
            cache[{layer}, 1, vh, t - n + vi, vd] = v[0, vh, vi, vd]
'''

_ZEROS = '''
@T.prim_func
def main(cache: T.Buffer(({L}, 2, {H}, {M}, {D}), "float32")):
    for a, b, c, e, f in T.grid({L}, 2, {H}, {M}, {D}):
        with T.block("zeros"):
            va, vb, vc, ve, vf = T.axis.remap("SSSSS", [a, b, c, e, f])
            cache[va, vb, vc, ve, vf] = T.float32(0)
'''


def _prim_func(text: str):
    from ... import script
    return script.parse(text)


def kv_write(cache: Tensor, tokens: Tensor, k: Tensor, v: Tensor, layer: int) -> Tensor:
    """``cache[layer, 0, :, t - n:t] = k[0]`` and ``cache[layer, 1, :, t - n:t] = v[0]`` in place,
    for ``tokens[1, t]`` and ``k, v[1, heads, n, head_dim]``; returns the cache (the same
    memory) for the reads that must come after the write."""
    tr = current_trace("kv_write")
    L, _, H, M, D = cache.shape
    name = f"kv_write_l{layer}_of_{L}x{H}x{M}x{D}"
    if name not in tr.prim_funcs:
        tr.prim_funcs[name] = _prim_func(_WRITE.format(L=L, H=H, M=M, D=D, layer=layer))
    call = Call("call_tir", (GlobalVar(name), GraphTuple((cache.expr, tokens.expr, k.expr, v.expr))),
                {"inplace": 0}, cache.expr.ty)
    return Tensor(tr.bind(call))


def zeros_cache(layers: int, heads: int, max_len: int, head_dim: int) -> Tensor:
    """A new, zeroed cache (a kernel fills it, so each call returns fresh writable memory)."""
    from ...ir.graph import TensorType
    tr = current_trace("zeros_cache")
    name = f"kv_zeros_{layers}x{heads}x{max_len}x{head_dim}"
    if name not in tr.prim_funcs:
        tr.prim_funcs[name] = _prim_func(_ZEROS.format(L=layers, H=heads, M=max_len, D=head_dim))
    ty = TensorType((layers, 2, heads, max_len, head_dim), "float32")
    call = Call("call_tir", (GlobalVar(name), GraphTuple(())), {"kiln.no_fold": True}, ty)
    return Tensor(tr.bind(call))
