"""A KV cache for language models: one tensor the exported functions update in place.

Layout: ``kv_cache[layers, 2, heads, max_len + 1, head_dim]``, float32, created once by the
model's ``create_cache`` function. Positions ``0 .. max_len - 1`` hold keys (``[:, 0]``) and
values (``[:, 1]``); position ``max_len`` is the cache's bookkeeping row, of which one number
is used: ``kv_cache[0, 0, 0, max_len, 0]`` is the *length*, how many positions are filled
(a float32, exact for any length a cache can have). So the cache alone says where the next
token goes, and ``decode`` takes one token.

``prefill(tokens[1, n], kv_cache)`` writes positions ``0 .. n - 1`` and sets the length to
``n`` (a new sequence: whatever the cache held is dropped); ``decode(token[1, 1], kv_cache)``
writes position ``length``, attends over positions ``0 .. length`` (O(length) work: the
kernel's loops stop at the length it reads) and sets the length to ``length + 1``. The graph
calls small tensor programs through ``call_tir`` with the attribute ``inplace=0``, whose
result *is* the cache (an alias); each reads the cache value the previous one returned, and
the final length update also takes the logits, so every read of the length comes before it.
Lowering marks the function's parameter as written (executable format 3, ``PARAM_WRITTEN``),
so the runtime accepts that argument being written, refuses a read-only one, and refuses it
sharing memory with any other argument.

The length is data, which the runtime does not check before the call, so the kernels never
trust it: a length outside ``0 .. max_len - 1`` (a full cache, or a corrupted one: negative,
NaN) makes ``decode`` write nothing, leave the length as it is and return NaN logits. Prompt
lengths are shapes, so ``prefill``'s ``1 <= n <= max_len`` is checked by the runtime.
"""
from __future__ import annotations

from ...ir.graph import Call, GlobalVar, Tuple as GraphTuple
from .tensor import Tensor, current_trace

# The length, whether it names a free position, and the number of positions a step attends
# over (0 when it does not: the attention then divides 0 by 0, so the logits are NaN).
_LEN = "cache[0, 0, 0, {M}, 0]"
_VALID = f"T.And({_LEN} >= T.float32(0), {_LEN} < T.float32({{M}}))"
_POS = f'T.Cast("int64", T.Select({_VALID}, {_LEN}, T.float32(0)))'
_COUNT = f'(T.Cast("int64", T.Select({_VALID}, {_LEN}, T.float32(-1))) + T.int64(1))'
_HAND = 'T.func_attr({{"kiln.schedule": "hand-written (kiln.nn.kv_cache)"}})'

# A prompt's keys and values, read from the QKV projection's output (q | k | v, each head's
# columns together), so no kernel copies them into heads first.
_WRITE_PROMPT = '''
@T.prim_func
def main(cache: T.Buffer(({L}, 2, {H}, {M1}, {D}), "float32"), qkv: T.Buffer((1, n, {E3}), "float32")):
    n = T.int64()
    for h, i, d in T.grid({H}, n, {D}):
        with T.block("kv_write"):
            vh, vi, vd = T.axis.remap("SSS", [h, i, d])
            cache[{layer}, 0, vh, vi, vd] = qkv[0, vi, {E} + vh * {D} + vd]
            cache[{layer}, 1, vh, vi, vd] = qkv[0, vi, {E2} + vh * {D} + vd]
'''

# One position, at the length (a loop of 0 or 1 iterations: nothing when the cache is full).
_WRITE_STEP = f'''
@T.prim_func
def main(cache: T.Buffer(({{L}}, 2, {{H}}, {{M1}}, {{D}}), "float32"),
         k: T.Buffer((1, {{H}}, 1, {{D}}), "float32"), v: T.Buffer((1, {{H}}, 1, {{D}}), "float32")):
    {_HAND}
    for once in range(T.Cast("int64", T.Select({_VALID}, T.int64(1), T.int64(0)))):
        for h, d in T.grid({{H}}, {{D}}):
            with T.block("kv_write"):
                vh, vd = T.axis.remap("SS", [h, d])
                cache[{{layer}}, 0, vh, {_POS}, vd] = k[0, vh, 0, vd]
                cache[{{layer}}, 1, vh, {_POS}, vd] = v[0, vh, 0, vd]
'''

# softmax(q K^T * scale) V over the positions 0 .. length, the heads in parallel, each with its
# own row of scores, max and sum (the max and sum 16 floats apart: a cache line each, so the
# threads do not write one line). At 2 threads a decode step at context 128 spent 13 us a
# layer here on one thread.
_ATTEND = f'''
@T.prim_func
def main(cache: T.Buffer(({{L}}, 2, {{H}}, {{M1}}, {{D}}), "float32"), q: T.Buffer((1, {{H}}, 1, {{D}}), "float32"),
         out: T.Buffer((1, {{H}}, 1, {{D}}), "float32")):
    {_HAND}
    s = T.alloc_buffer(({{H}}, {{M}}), "float32")
    mx = T.alloc_buffer(({{H}}, 16), "float32")
    sm = T.alloc_buffer(({{H}}, 16), "float32")
    for h in T.parallel({{H}}):
        for j in range({_COUNT}):
            with T.block("score_init"):
                vj = T.axis.remap("S", [j])
                s[h, vj] = T.float32(0)
            for d in range({{D}}):
                with T.block("score"):
                    vj, vd = T.axis.remap("SR", [j, d])
                    s[h, vj] = s[h, vj] + q[0, h, 0, vd] * cache[{{layer}}, 0, h, vj, vd]
        with T.block("max_init"):
            mx[h, 0] = T.float32(-3.0e38)
        for j in range({_COUNT}):
            with T.block("max"):
                vj = T.axis.remap("R", [j])
                mx[h, 0] = T.max(mx[h, 0], s[h, vj])
        with T.block("sum_init"):
            sm[h, 0] = T.float32(0)
        for d in range({{D}}):
            with T.block("pv_init"):
                vd = T.axis.remap("S", [d])
                out[0, h, 0, vd] = T.float32(0)
        for j in range({_COUNT}):
            with T.block("exp"):
                vj = T.axis.remap("S", [j])
                s[h, vj] = T.exp((s[h, vj] - mx[h, 0]) * T.float32({{scale}}))
                sm[h, 0] = sm[h, 0] + s[h, vj]
            for d in range({{D}}):
                with T.block("pv"):
                    vj, vd = T.axis.remap("RS", [j, d])
                    out[0, h, 0, vd] = out[0, h, 0, vd] + s[h, vj] * cache[{{layer}}, 1, h, vj, vd]
        for d in range({{D}}):
            with T.block("normalize"):
                vd = T.axis.remap("S", [d])
                out[0, h, 0, vd] = out[0, h, 0, vd] / sm[h, 0]
'''

_POSITION = f'''
@T.prim_func
def main(cache: T.Buffer(({{L}}, 2, {{H}}, {{M1}}, {{D}}), "float32"), pos: T.Buffer((1, 1), "int64")):
    {_HAND}
    with T.block("kv_position"):
        pos[0, 0] = {_POS}
'''

# prefill: the length is the prompt's; `after` (the logits) orders this write after every read.
_SET_LENGTH = '''
@T.prim_func
def main(cache: T.Buffer(({L}, 2, {H}, {M1}, {D}), "float32"), tokens: T.Buffer((1, n), "int64"),
         after: T.Buffer((1, {V}), "float32")):
    T.func_attr({{"kiln.schedule": "hand-written (kiln.nn.kv_cache)"}})
    n = T.int64()
    with T.block("kv_set_length"):
        cache[0, 0, 0, {M}, 0] = T.Cast("float32", n)
'''

_ADVANCE = f'''
@T.prim_func
def main(cache: T.Buffer(({{L}}, 2, {{H}}, {{M1}}, {{D}}), "float32"), after: T.Buffer((1, {{V}}), "float32")):
    {_HAND}
    with T.block("kv_advance"):
        cache[0, 0, 0, {{M}}, 0] = T.Select({_VALID}, {_LEN} + T.float32(1), {_LEN})
'''

_ZEROS = '''
@T.prim_func
def main(cache: T.Buffer(({L}, 2, {H}, {M1}, {D}), "float32")):
    for a, b, c, e, f in T.grid({L}, 2, {H}, {M1}, {D}):
        with T.block("zeros"):
            va, vb, vc, ve, vf = T.axis.remap("SSSSS", [a, b, c, e, f])
            cache[va, vb, vc, ve, vf] = T.float32(0)
'''


def _prim_func(text: str):
    from ... import script
    return script.parse(text)


def _dims(cache: Tensor) -> dict:
    L, _, H, M1, D = cache.shape
    return {"L": L, "H": H, "M": M1 - 1, "M1": M1, "D": D}


def _call(name: str, template: str, fmt: dict, args, ty, inplace: bool = True) -> Tensor:
    """Bind ``call_tir`` of the tensor program ``template.format(**fmt)`` (made once per name)."""
    tr = current_trace(name)
    if name not in tr.prim_funcs:
        tr.prim_funcs[name] = _prim_func(template.format(**fmt))
    attrs = {"inplace": 0} if inplace else {}
    return Tensor(tr.bind(Call("call_tir", (GlobalVar(name), GraphTuple(tuple(a.expr for a in args))),
                               attrs, ty)))


def _key(d: dict) -> str:
    return f"{d['L']}x{d['H']}x{d['M']}x{d['D']}"


def write_prompt(cache: Tensor, qkv: Tensor, layer: int) -> Tensor:
    """The prompt's keys and values into ``cache[layer, 0 / 1, :, :n]`` in place, from
    ``qkv[1, n, 3 * heads * head_dim]`` (a QKV projection's output: q, k, v, each head's
    columns together); returns the cache (the same memory) for later reads."""
    d = _dims(cache)
    e = d["H"] * d["D"]
    return _call(f"kv_write_prompt_l{layer}_of_{_key(d)}", _WRITE_PROMPT,
                 dict(d, layer=layer, E=e, E2=2 * e, E3=3 * e), (cache, qkv), cache.expr.ty)


def write_step(cache: Tensor, k: Tensor, v: Tensor, layer: int) -> Tensor:
    """``k, v[1, heads, 1, head_dim]`` written at the cache's length in place (nothing when the
    cache is full); returns the cache."""
    d = _dims(cache)
    return _call(f"kv_write_step_l{layer}_of_{_key(d)}", _WRITE_STEP, dict(d, layer=layer),
                 (cache, k, v), cache.expr.ty)


def attend_step(cache: Tensor, q: Tensor, layer: int, scale: float) -> Tensor:
    """``softmax(q @ K^T * scale) @ V`` of ``q[1, heads, 1, head_dim]`` over the layer's
    positions ``0 .. length`` (the step's own included): ``[1, heads, 1, head_dim]``, NaN when
    the length names no free position."""
    from ...ir.graph import TensorType
    d = _dims(cache)
    name = f"kv_attend_l{layer}_of_{_key(d)}_s{scale!r}".replace(".", "p").replace("-", "m")
    return _call(name, _ATTEND, dict(d, layer=layer, scale=repr(float(scale))), (cache, q),
                 TensorType(tuple(q.shape), "float32"), inplace=False)


def position(cache: Tensor) -> Tensor:
    """``int64[1, 1]``: the cache's length, the position of the token being decoded (0 when
    the length names no free position: the step's logits are NaN then anyway)."""
    from ...ir.graph import TensorType
    d = _dims(cache)
    return _call(f"kv_position_of_{_key(d)}", _POSITION, d, (cache,), TensorType((1, 1), "int64"),
                 inplace=False)


def set_length(cache: Tensor, tokens: Tensor, after: Tensor) -> Tensor:
    """The cache's length set to ``n`` of ``tokens[1, n]``, in place, after ``after`` (the
    logits) is computed; returns the cache."""
    d = _dims(cache)
    vocab = after.shape[-1]
    return _call(f"kv_set_length_of_{_key(d)}_v{vocab}", _SET_LENGTH, dict(d, V=vocab),
                 (cache, tokens, after), cache.expr.ty)


def advance(cache: Tensor, after: Tensor) -> Tensor:
    """The cache's length plus one, in place, after ``after`` (the logits) is computed
    (unchanged when it names no free position); returns the cache."""
    d = _dims(cache)
    vocab = after.shape[-1]
    return _call(f"kv_advance_of_{_key(d)}_v{vocab}", _ADVANCE, dict(d, V=vocab), (cache, after),
                 cache.expr.ty)


def zeros_cache(layers: int, heads: int, max_len: int, head_dim: int) -> Tensor:
    """A new, zeroed cache of length 0 (a kernel fills it, so each call returns fresh writable
    memory)."""
    from ...ir.graph import TensorType
    tr = current_trace("zeros_cache")
    name = f"kv_zeros_{layers}x{heads}x{max_len}x{head_dim}"
    if name not in tr.prim_funcs:
        tr.prim_funcs[name] = _prim_func(_ZEROS.format(L=layers, H=heads, M1=max_len + 1, D=head_dim))
    ty = TensorType((layers, 2, heads, max_len + 1, head_dim), "float32")
    call = Call("call_tir", (GlobalVar(name), GraphTuple(())), {"kiln.no_fold": True}, ty)
    return Tensor(tr.bind(call))
