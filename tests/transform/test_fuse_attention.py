"""Fused attention: the ``attention`` operator against its numpy reference, the
``fuse_attention`` pass (which graphs it rewrites and which it leaves), and the kernel the
default pipeline makes of it (``schedule_attention.py``) against numpy for odd shapes, with
its register tile derived from an AVX2, an AVX-512 and an AArch64 target."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import codegen, ops
from kiln.driver import lower
from kiln.ir.graph import Constant
from kiln.ops.attention import attention_reference
from kiln.transform import PassContext, fuse_attention
from kiln.transform.schedule_attention import tile_of

from transform_helpers import (AVX2, attr, graph_module, kernels, outputs_at_threads, rand,
                               run_vm, typed)

AVX512 = "llvm -mcpu=skylake-avx512"
AARCH64 = "llvm -mtriple=aarch64-linux-gnu"


def _attention_graph(b, m, d, n, dv, mask_shape=(), scale=0.125, mask_first=False, divide=False,
                     bool_mask=False):
    """The graph exporters write: matmul, scale, + mask (or where(bool mask, s, lowest), as
    PyTorch's boolean attn_mask), softmax, matmul."""
    q, kt, v = typed("q", b + (m, d)), typed("kt", b + (d, n)), typed("v", b + (n, dv))
    params = [q, kt, v]
    if mask_shape:
        params.append(typed("mask", mask_shape, "bool" if bool_mask else "float32"))

    def body(emit, q, kt, v, *mask):
        s = emit("matmul", q, kt)
        if scale is not None:
            c = Constant(np.array(1.0 / scale if divide else scale, "float32"))
            s = emit("divide" if divide else "multiply", s, c)
        if mask and bool_mask:
            s = emit("where", mask[0], s, Constant(np.array(np.finfo(np.float32).min, "float32")))
        elif mask:
            s = emit("add", *((mask[0], s) if mask_first else (s, mask[0])))
        p = emit("softmax", s, axis=-1)
        return ops.call("matmul", p, v)
    return graph_module(params, body)


def _args(mod, seed=0):
    params = mod["main"].params
    out = [rand(p.ty.static_shape(), seed=seed + i) for i, p in enumerate(params)]
    if len(out) == 4:   # a causal mask, as GPT-2 adds it (or as a bool: True = attend)
        m, n = out[3].shape[-2:]
        if params[3].ty.dtype == "bool":
            out[3] = np.broadcast_to(np.tril(np.ones((m, n), bool)), out[3].shape).copy()
        else:
            out[3] = np.broadcast_to(np.triu(np.full((m, n), -1e4, "float32"), 1), out[3].shape).copy()
    return out


def _want(args, scale=0.125):
    return attention_reference(*args[:3], args[3] if len(args) == 4 else None, scale=scale)


def _run(mod, args, target=AVX2):
    """``mod`` through the "zero" pipeline (legalize + default schedules), compiled, run."""
    return run_vm(kiln.get_pipeline("zero", target=target)(mod), args, target=target)


def _ops(mod):
    return [b.value.op for b in mod["main"].bindings()]


# ---- the operator ------------------------------------------------------------------------------
def test_attention_op_matches_its_reference():
    q, kt, v = typed("q", (2, 5, 3)), typed("kt", (2, 3, 7)), typed("v", (2, 7, 4))
    assert ops.call("attention", q, kt, v, scale=0.5).ty.static_shape() == (2, 5, 4)
    mod = graph_module([q, kt, v], lambda emit, q, kt, v: ops.call("attention", q, kt, v, scale=0.5))
    args = _args(mod)
    np.testing.assert_allclose(_run(mod, args), attention_reference(*args, scale=0.5),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes,match", [
    (((2, 5, 3), (2, 4, 7), (2, 7, 4)), "kt's dim -2"),
    (((2, 5, 3), (2, 3, 7), (2, 6, 4)), "kt's last dim"),
    (((2, 5, 3), (1, 3, 7), (2, 7, 4)), "batch dims of kt"),
    (((5, 3), (3, 7), (7, 4), (2, 5, 7)), "does not broadcast"),
])
def test_attention_op_errors_name_the_shapes(shapes, match):
    args = [typed(f"x{i}", s) for i, s in enumerate(shapes)]
    with pytest.raises(ops.OpError, match=match):
        ops.call("attention", *args)


# ---- the pass ----------------------------------------------------------------------------------
def test_pass_fuses_masked_fill_with_a_constant_mask():
    """``scores.masked_fill(causal, -inf)`` as exported: where(const mask, fill, scores), the
    mask True where a key is hidden; fused with the mask inverted (True = attend)."""
    hidden = np.triu(np.ones((16, 16), bool), 1)
    q, kt, v = typed("q", (1, 2, 16, 8)), typed("kt", (1, 2, 8, 16)), typed("v", (1, 2, 16, 8))

    def body(emit, q, kt, v):
        s = emit("divide", emit("matmul", q, kt), Constant(np.array(8.0, "float32")))
        s = emit("where", Constant(hidden), Constant(np.array(-np.inf, "float32")), s)
        return ops.call("matmul", emit("softmax", s, axis=-1), v)
    mod = graph_module([q, kt, v], body)
    out = fuse_attention()(mod)
    assert _ops(out) == ["attention"]
    (call,) = [b.value for b in out["main"].bindings()]
    np.testing.assert_array_equal(call.args[3].data, ~hidden)
    args = _args(mod)
    want = attention_reference(*args, np.where(hidden, -np.inf, 0).astype("float32"), scale=0.125)
    np.testing.assert_allclose(_run(out, args), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", [
    dict(mask_shape=(1, 1, 16, 16)),
    dict(mask_shape=(1, 1, 16, 16), mask_first=True),
    dict(mask_shape=(16, 16), divide=True),
    dict(mask_shape=(16, 16), bool_mask=True),
    dict(),
    dict(scale=None),
])
def test_pass_fuses_the_exported_pattern(variant):
    mod = _attention_graph((1, 2), 16, 8, 16, 8, **variant)
    out = fuse_attention()(mod)
    assert _ops(out) == ["attention"]
    scale = variant.get("scale", 0.125)
    assert dict(next(out["main"].bindings()).value.attrs)["scale"] == pytest.approx(scale or 1.0)
    args = _args(mod)
    np.testing.assert_allclose(_run(out, args), _want(args, scale or 1.0), rtol=1e-5, atol=1e-5)


def test_pass_leaves_attention_whose_scores_are_used_elsewhere():
    q, kt, v = typed("q", (2, 8, 4)), typed("kt", (2, 4, 8)), typed("v", (2, 8, 4))

    def body(emit, q, kt, v):
        s = emit("matmul", q, kt)
        p = emit("softmax", s, axis=-1)
        o = emit("matmul", p, v)
        return ops.call("add", o, emit("sum", s, axis=-1, keepdims=True))   # s used twice
    mod = graph_module([q, kt, v], body)
    assert "attention" not in _ops(fuse_attention()(mod))


def test_pass_leaves_broadcast_batch_dims_and_other_axes():
    q, kt, v = typed("q", (2, 8, 4)), typed("kt", (4, 8)), typed("v", (2, 8, 4))
    mod = graph_module([q, kt, v], lambda emit, q, kt, v: ops.call(
        "matmul", emit("softmax", emit("matmul", q, kt), axis=-1), v))
    assert "attention" not in _ops(fuse_attention()(mod))
    q, kt, v = typed("q", (2, 8, 4)), typed("kt", (2, 4, 8)), typed("v", (2, 8, 4))
    mod = graph_module([q, kt, v], lambda emit, q, kt, v: ops.call(
        "matmul", emit("softmax", emit("matmul", q, kt), axis=1), v))
    assert "attention" not in _ops(fuse_attention()(mod))


def test_pass_can_be_switched_off():
    mod = _attention_graph((1, 2), 16, 8, 16, 8)
    assert "attention" not in _ops(fuse_attention(PassContext(fuse_attention=False))(mod))
    out = kiln.get_pipeline("default", PassContext(fuse_attention=False), target=AVX2)(mod)
    assert not any(n.startswith("attention") for n in kernels(out))


# ---- the kernel --------------------------------------------------------------------------------
@pytest.mark.parametrize("b,m,d,n,dv", [
    ((1, 4), 64, 64, 64, 64),       # GPT-2 small's heads at 64 tokens
    ((2, 3), 7, 5, 13, 3),          # odd everything, batch > 1
    ((1,), 1, 16, 40, 24),          # one query row (a decode step)
    ((3,), 10, 8, 100, 72),         # more keys / values than one register tile
])
@pytest.mark.parametrize("target", [AVX2, "llvm"])
def test_default_pipeline_runs_attention_as_one_kernel(b, m, d, n, dv, target):
    mod = _attention_graph(b, m, d, n, dv, mask_shape=(1,) * len(b) + (m, n))
    out = kiln.get_pipeline("default", target=target)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith("attention: rows"), attr(out[name], "kiln.schedule")
    args = _args(mod, seed=3)
    np.testing.assert_allclose(run_vm(out, args, target=target), _want(args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target,nr,rows,ku,vector", [
    (AVX2, 32, 2, 4, r"vfmadd\w+\s+.*%ymm"),   # 4 vectors x 2 rows within 12 accumulators
    (AVX512, 64, 4, 2, r"vfmadd\w+\s+.*%zmm"),  # 4 vectors x 4 rows within 24
    (AARCH64, 16, 4, 2, r"fmla\s+v\d+\.4s"),
])
def test_attention_tile_follows_the_target(target, nr, rows, ku, vector):
    ctx = PassContext(target=target).resolved()
    assert tile_of(64, 64, 64, ctx) == (rows, nr)
    mod = _attention_graph((1, 4), 64, 64, 64, 64, mask_shape=(1, 1, 64, 64))
    out = kiln.get_pipeline("default", target=target)(mod)
    (name,) = kernels(out)
    assert f"x{nr}" in attr(out[name], "kiln.schedule")
    # both products run K steps a trip up to 48 vector FMAs (schedule_tile.k_unroll)
    decisions = attr(out[name], "kiln.decisions").split()
    assert f"ku_attention_score={ku}" in decisions and f"ku_attention_pv={ku}" in decisions
    asm = codegen.compile_module(lower(kiln.IRModule({name: out[name]})), target).assembly()
    assert re.search(vector, asm)


@pytest.mark.parametrize("b,m,n", [((4,), 37, 37), ((3,), 197, 61), ((1,), 37, 37), ((), 37, 37)])
def test_a_prime_row_count_keeps_a_full_register_tile(b, m, n):
    """m with no divisor near the tile's rows (a ViT's 197 tokens): with a task per core in the
    batch, full row tiles and a ragged last block run inside each task (not one row at a
    time); without (a batch of 1, no batch), the rows a divisor of m. numpy's result either way."""
    ctx = PassContext(target=AVX512).resolved()
    assert tile_of(37, 37, 64, ctx) == (6, 64) and tile_of(37, 37, 64, ctx, ragged=False) == (1, 64)
    assert tile_of(60, 60, 64, ctx, ragged=False) == (6, 64)
    mod = _attention_graph(b, m, 64, n, 64)
    out = kiln.get_pipeline("default", target=AVX512)(mod)
    (name,) = kernels(out)
    rows = 6 if len(b) and b[0] >= 2 else 1
    assert attr(out[name], "kiln.schedule").startswith(f"attention: rows {rows},"), attr(out[name], "kiln.schedule")
    args = _args(mod, seed=7)
    # (run for this host: an AVX-512 build would not run on an AVX2 one)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), target="llvm"), kiln.cpu())
    for got in outputs_at_threads(vm, args):
        np.testing.assert_allclose(got, _want(args), rtol=1e-4, atol=1e-5)


def test_attention_over_symbolic_queries_and_keys():
    """A prompt of any length against a KV cache of any length (the shapes of prefill and
    decode): one kernel, its row blocks and key tiles guarded at the ends; correct at every
    size, including one query and one key."""
    from kiln.ir import GraphVar, TensorType, Var
    m, n = Var("m", "int64"), Var("n", "int64")
    q = GraphVar("q", TensorType((1, 4, m, 16), "float32"))
    kt = GraphVar("kt", TensorType((1, 4, 16, n), "float32"))
    v = GraphVar("v", TensorType((1, 4, n, 24), "float32"))
    mod = graph_module([q, kt, v], lambda emit, q, kt, v: ops.call("attention", q, kt, v, scale=0.25))
    out = kiln.get_pipeline("default", target=AVX2)(mod)
    (name,) = kernels(out)
    assert attr(out[name], "kiln.schedule").startswith("attention: rows"), attr(out[name], "kiln.schedule")
    vm = kiln.VirtualMachine(kiln.compile(out, target=AVX2), kiln.cpu())
    rng = np.random.default_rng(5)
    for mm, nn in ((1, 1), (1, 37), (5, 17), (13, 64)):
        a = [rng.standard_normal(s).astype("float32")
             for s in ((1, 4, mm, 16), (1, 4, 16, nn), (1, 4, nn, 24))]
        got = vm["main"](*[kiln.nd.array(x) for x in a]).numpy()
        np.testing.assert_allclose(got, attention_reference(*a, scale=0.25), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs,match", [
    (dict(scale=float("inf")), "scale=inf must be a finite number"),
    (dict(scale=True), "scale=True must be a finite number"),
    (dict(mask_fill=float("nan")), "mask_fill=nan must be a finite number or -inf"),
])
def test_attention_op_checks_its_attributes(attrs, match):
    q, kt, v = typed("q", (2, 5, 3)), typed("kt", (2, 3, 7)), typed("v", (2, 7, 4))
    with pytest.raises(ops.OpError, match=match):
        ops.call("attention", q, kt, v, **attrs)
    ops.call("attention", q, kt, v, typed("m", (5, 7), "bool"), mask_fill=float("-inf"))


# ---- heads packed in the last axis (heads=H) ----------------------------------------------------
def _split_heads_attention(emit, q, k, v, mask, dims):
    """Heads split out of q, k, v (b, rows, h*w) as exporters write it, then attention over
    them (scale 0.125, the mask added when given); returns the (b, h, m, dv) output."""
    b, m, n, h, d, dv = dims
    q4 = emit("permute_dims", emit("reshape", q, shape=(b, m, h, d)), axes=(0, 2, 1, 3))
    kt = emit("permute_dims", emit("reshape", k, shape=(b, n, h, d)), axes=(0, 2, 3, 1))
    v4 = emit("permute_dims", emit("reshape", v, shape=(b, n, h, dv)), axes=(0, 2, 1, 3))
    s = emit("multiply", emit("matmul", q4, kt), Constant(np.array(0.125, "float32")))
    if mask:
        s = emit("add", s, mask[0])
    return emit("matmul", emit("softmax", s, axis=-1), v4)


def _heads_graph(b, m, n, h, d, dv, mask_shape=(), merge=True, reuse=False):
    """What exporters write around attention with the heads in one projection: each of q, k, v
    (b, rows, h*w) reshaped to (b, rows, h, w) and transposed to heads first (k to (b, h, d,
    n)); the output transposed back and reshaped to (b, m, h*dv) (``merge``); ``reuse``: the
    transposed output is also summed into the result."""
    params = [typed("q", (b, m, h * d)), typed("k", (b, n, h * d)), typed("v", (b, n, h * dv))]
    if mask_shape:
        params.append(typed("mask", mask_shape))

    def body(emit, q, k, v, *mask):
        o = _split_heads_attention(emit, q, k, v, mask, (b, m, n, h, d, dv))
        if not merge:
            return ops.call("permute_dims", o, axes=(0, 2, 1, 3))
        t = emit("permute_dims", o, axes=(0, 2, 1, 3))
        if reuse:
            return ops.call("add", emit("reshape", t, shape=(b, m, h * dv)),
                            emit("sum", t, axis=(1, 2, 3), keepdims=False))
        return ops.call("reshape", t, shape=(b, m, h * dv))
    return graph_module(params, body)


@pytest.mark.parametrize("b,m,n,h,d,dv", [
    (1, 64, 64, 4, 64, 64),     # the GPT-style decoder's layer
    (2, 7, 13, 3, 5, 3),        # odd everything, batch > 1
    (1, 1, 40, 2, 16, 24),      # one query row
    (1, 64, 64, 1, 32, 32),     # one head: the rows of the head split among tasks
])
@pytest.mark.parametrize("target", [AVX2, "llvm"])
def test_pass_folds_the_head_split_and_merge_into_one_kernel(b, m, n, h, d, dv, target):
    mod = _heads_graph(b, m, n, h, d, dv, mask_shape=(1, 1, m, n))
    fused = fuse_attention()(mod)
    assert _ops(fused) == ["attention"]
    assert dict(next(fused["main"].bindings()).value.attrs)["heads"] == h
    out = kiln.get_pipeline("default", target=target)(mod)
    (name,) = kernels(out)
    assert "heads packed" in attr(out[name], "kiln.schedule"), attr(out[name], "kiln.schedule")
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(p.ty.static_shape()).astype("float32") for p in mod["main"].params]
    args[3] = np.triu(np.full((m, n), -1e4, "float32"), 1).reshape(1, 1, m, n)
    want = attention_reference(*args[:3], args[3], scale=0.125, heads=h)
    np.testing.assert_allclose(run_vm(out, args, target=target), want, rtol=1e-4, atol=1e-5)
    # the same numbers as the graph written out op by op
    unfused = kiln.get_pipeline("default", PassContext(fuse_attention=False), target=target)(mod)
    np.testing.assert_allclose(run_vm(unfused, args, target=target), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", [dict(merge=False), dict(reuse=True)])
def test_pass_keeps_the_head_split_when_the_output_is_not_only_merged_back(variant):
    """The heads not merged back, or the merge's input used again: attention over split-out
    heads (heads=0), the splits and merge kept."""
    mod = _heads_graph(1, 8, 8, 2, 4, 4, **variant)
    fused = fuse_attention()(mod)
    calls = {b.value.op: b.value for b in fused["main"].bindings()}
    assert calls["attention"].attr("heads", 0) == 0
    assert "permute_dims" in calls and "reshape" in calls


def test_heads_packed_tile_splits_a_head_among_the_cores():
    """One head of 64 rows on 2 cores: P = 4 tasks of 4 row blocks each, the keys transposed
    once per task; P is a decision the tuner may change."""
    mod = _heads_graph(1, 64, 64, 1, 32, 32)
    ctx = PassContext(target="llvm -mcpu=skylake-avx512", cores=2)
    out = kiln.get_pipeline("default", ctx)(mod)
    (name,) = kernels(out)
    assert re.search(r"heads packed, \d+ tasks a head", attr(out[name], "kiln.schedule"))
    assert "parts=" in attr(out[name], "kiln.decisions")


def test_heads_packed_over_symbolic_queries_and_keys():
    from kiln.ir import GraphVar, TensorType, Var
    m, n = Var("m", "int64"), Var("n", "int64")
    q = GraphVar("q", TensorType((1, m, 32), "float32"))
    k = GraphVar("k", TensorType((1, n, 32), "float32"))
    v = GraphVar("v", TensorType((1, n, 48), "float32"))
    mod = graph_module([q, k, v], lambda emit, q, k, v: ops.call("attention", q, k, v, scale=0.25,
                                                                   heads=2))
    out = kiln.get_pipeline("default", target=AVX2)(mod)
    vm = kiln.VirtualMachine(kiln.compile(out, target=AVX2), kiln.cpu())
    rng = np.random.default_rng(6)
    for mm, nn in ((1, 1), (1, 37), (5, 17), (13, 64)):
        a = [rng.standard_normal(s).astype("float32") for s in ((1, mm, 32), (1, nn, 32), (1, nn, 48))]
        got = vm["main"](*[kiln.nd.array(x) for x in a]).numpy()
        np.testing.assert_allclose(got, attention_reference(*a, scale=0.25, heads=2), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shapes,attrs,match", [
    (((1, 4, 8), (1, 4, 8), (1, 4, 8)), dict(heads=-1), "heads=-1 must be a non-negative int"),
    (((1, 4, 8), (1, 4, 8), (1, 4, 8)), dict(heads=True), "heads=True must be a non-negative int"),
    (((1, 4, 8), (1, 4, 8), (1, 4, 8)), dict(heads=3), "q's last dim must be a multiple of heads=3"),
    (((1, 4, 8), (1, 4, 4), (1, 4, 8)), dict(heads=2), "q and k must have the same last dim"),
    (((1, 4, 8), (1, 5, 8), (1, 4, 8)), dict(heads=2), "k and v must have as many rows"),
])
def test_heads_packed_attention_errors_name_the_shapes(shapes, attrs, match):
    args = [typed(nm, s) for nm, s in zip(("q", "k", "v"), shapes)]
    with pytest.raises(ops.OpError, match=match):
        ops.call("attention", *args, **attrs)


@pytest.mark.parametrize("target,nr,vector", [
    (AVX2, 32, r"vfmadd\w+\s+.*%ymm"),
    (AVX512, 64, r"vfmadd\w+\s+.*%zmm"),
    (AARCH64, 16, r"fmla\s+v\d+\.4s"),
])
def test_heads_packed_tile_follows_the_target(target, nr, vector):
    """The packed-heads kernel keeps the target's register tile and vector width."""
    mod = _heads_graph(1, 64, 64, 4, 64, 64, mask_shape=(1, 1, 64, 64))
    out = kiln.get_pipeline("default", target=target)(mod)
    (name,) = kernels(out)
    desc = attr(out[name], "kiln.schedule")
    assert "heads packed" in desc and f"x{nr}" in desc, desc
    asm = codegen.compile_module(lower(kiln.IRModule({name: out[name]})), target).assembly()
    assert re.search(vector, asm)


def _qkv_graph(b, m, h, d, mask=True, reuse_k=False):
    """The heads graph with q, k and v split out of one projection output (b, m, 3*h*d);
    ``reuse_k``: k's piece is also added into the result."""
    from kiln.ir import FunctionBuilder, TupleGetItem
    fb_params = [typed("qkv", (b, m, 3 * h * d))] + ([typed("mask", (1, 1, m, m))] if mask else [])
    fb = FunctionBuilder(list(fb_params))
    with fb.dataflow():
        def emit(op, *args, **attrs):
            return fb.emit(ops.call(op, *args, **attrs))
        x = fb_params[0]
        t = emit("split", x, indices_or_sections=3, axis=-1)
        q, k, v = (fb.emit(TupleGetItem(t, i)) for i in range(3))
        o = _split_heads_attention(emit, q, k, v, fb_params[1:], (b, m, m, h, d, d))
        merged = emit("permute_dims", o, axes=(0, 2, 1, 3))
        if reuse_k:
            y = ops.call("add", emit("reshape", merged, shape=(b, m, h * d)), k)
        else:
            y = ops.call("reshape", merged, shape=(b, m, h * d))
        gv = fb.emit_output(y)
    return kiln.IRModule({"main": fb.finish(gv)})


@pytest.mark.parametrize("b,m,h,d", [(1, 64, 4, 64), (2, 7, 3, 5), (1, 1, 2, 16)])
def test_pass_takes_q_k_v_straight_from_the_projection(b, m, h, d):
    """q, k, v split out of one (b, m, 3*h*d) tensor: one attention call with qkv=True, no
    split kernel left; the numbers of the graph op by op."""
    mod = _qkv_graph(b, m, h, d)
    fused = fuse_attention()(mod)
    assert _ops(fused) == ["attention"]
    call = next(fused["main"].bindings()).value
    assert call.attr("qkv") is True and call.attr("heads") == h and len(call.args) == 2
    out = kiln.get_pipeline("default", target=AVX2)(mod)
    assert kernels(out) == ["attention"]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((b, m, 3 * h * d)).astype("float32")
    mask = np.triu(np.full((m, m), -1e4, "float32"), 1).reshape(1, 1, m, m)
    want = attention_reference(x, mask, scale=0.125, heads=h, qkv=True)
    np.testing.assert_allclose(run_vm(out, [x, mask]), want, rtol=1e-4, atol=1e-5)
    unfused = kiln.get_pipeline("default", PassContext(fuse_attention=False), target=AVX2)(mod)
    np.testing.assert_allclose(run_vm(unfused, [x, mask]), want, rtol=1e-4, atol=1e-5)


def test_pass_keeps_the_split_when_a_piece_is_used_elsewhere():
    """k's piece is also added into the result: the split stays for that add alone, and the
    attention call still takes the projection's output whole, its columns in their order."""
    mod = _qkv_graph(1, 8, 2, 4, reuse_k=True)
    fused = fuse_attention(PassContext(cores=2))(mod)
    calls = {b.value.op: b.value for b in fused["main"].bindings() if hasattr(b.value, "op")}
    assert sorted(calls) == ["add", "attention", "split"]
    att = calls["attention"]
    assert att.attr("qkv") is True and att.attr("heads") == 2 and att.attr("groups") is None
    x = np.random.default_rng(5).standard_normal((1, 8, 24)).astype("float32")
    mask = np.triu(np.full((8, 8), -1e4, "float32"), 1).reshape(1, 1, 8, 8)
    want = attention_reference(x, mask, scale=0.125, heads=2, qkv=True) + x[..., 8:16]
    out = kiln.get_pipeline("default", target=AVX2)(mod)
    np.testing.assert_allclose(run_vm(out, [x, mask]), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shapes,attrs,match", [
    (((1, 4, 24),), dict(qkv=True), "qkv=True needs heads > 0"),
    (((1, 4, 25),), dict(heads=2, qkv=True), "qkv's last dim must be a multiple of 3"),
    (((1, 4, 24), (1, 4, 24), (1, 4, 24)), dict(heads=2, qkv=True), "expected 1 or 2 arguments"),
    (((1, 4, 24),), dict(heads=2, qkv=1), "qkv=1 must be a bool"),
    (((1, 4, 24),), dict(heads=4, qkv=True, groups=3), "groups=3 must be a positive int"),
    (((1, 4, 8), (1, 4, 8), (1, 4, 8)), dict(heads=2, groups=2), "more than 1 needs qkv=True"),
])
def test_qkv_attention_errors(shapes, attrs, match):
    args = [typed(f"a{i}", s) for i, s in enumerate(shapes)]
    with pytest.raises(ops.OpError, match=match):
        ops.call("attention", *args, **attrs)


# ---- heads in groups (a QKV projection's columns permuted so on several cores) -----------------
def _projected_qkv_graph(b, m, h, d, bias=True, weight_input=False, seed=6):
    """``_qkv_graph`` fed by a projection ``x @ W (+ bias)``; W and the bias constant (or W an
    input)."""
    from kiln.ir import FunctionBuilder, TupleGetItem
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((h * d, 3 * h * d)) / np.sqrt(h * d)).astype("float32")
    bias_c = Constant(rng.standard_normal(3 * h * d).astype("float32"))
    params = [typed("x", (b, m, h * d)), typed("mask", (1, 1, m, m))]
    if weight_input:
        params.append(typed("w", w.shape))
    fb = FunctionBuilder(params)
    with fb.dataflow():
        def emit(op, *args, **attrs):
            return fb.emit(ops.call(op, *args, **attrs))
        qkv = emit("matmul", params[0], params[2] if weight_input else Constant(w))
        if bias:
            qkv = emit("add", qkv, bias_c)
        t = emit("split", qkv, indices_or_sections=3, axis=-1)
        q, k, v = (fb.emit(TupleGetItem(t, i)) for i in range(3))
        o = _split_heads_attention(emit, q, k, v, params[1:2], (b, m, m, h, d, d))
        merged = emit("permute_dims", o, axes=(0, 2, 1, 3))
        gv = fb.emit_output(ops.call("reshape", merged, shape=(b, m, h * d)))
    return kiln.IRModule({"main": fb.finish(gv)}), w


def test_group_columns():
    from kiln.transform.fuse_attention import group_columns
    # 2 heads of width 2 in 2 groups: q0 k0 v0 | q1 k1 v1
    assert group_columns(12, 2, 2).tolist() == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]
    assert group_columns(12, 2, 1).tolist() == list(range(12))
    cols = group_columns(3 * 4 * 8, 4, 2)
    assert sorted(cols.tolist()) == list(range(96))


def test_reference_reads_the_groups():
    from kiln.transform.fuse_attention import group_columns
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 3 * 6 * 4)).astype("float32")
    want = attention_reference(x, scale=0.5, heads=6, qkv=True)
    for groups in (2, 3, 6):
        grouped = x[..., group_columns(x.shape[-1], 6, groups)]
        got = attention_reference(grouped, scale=0.5, heads=6, qkv=True, groups=groups)
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("b,m,h,d,bias", [(1, 64, 4, 64, True), (2, 7, 6, 8, False)])
def test_qkv_projection_grouped_for_two_cores(b, m, h, d, bias):
    """With 2 cores the projection's weight (and bias) columns are permuted into 2 groups and
    the attention call reads them so (``groups=2``); the model's numbers at 1 and 2 threads
    are the unfused graph's."""
    mod, w = _projected_qkv_graph(b, m, h, d, bias=bias)
    ctx = PassContext(target=AVX2, cores=2)
    fused = fuse_attention(ctx)(mod)
    calls = {bd.value.op: bd.value for bd in fused["main"].bindings()}
    assert calls["attention"].attr("groups") == 2 and calls["attention"].attr("qkv") is True
    from kiln.transform.fuse_attention import group_columns
    np.testing.assert_array_equal(calls["matmul"].args[1].data, w[:, group_columns(w.shape[1], h, 2)])
    out = kiln.get_pipeline("default", ctx)(mod)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((b, m, h * d)).astype("float32")
    mask = np.triu(np.full((m, m), -1e4, "float32"), 1).reshape(1, 1, m, m)
    unfused = kiln.get_pipeline("default", PassContext(target=AVX2, fuse_attention=False))(mod)
    want = run_vm(unfused, [x, mask])
    vm = kiln.VirtualMachine(kiln.compile(out, target=AVX2), kiln.cpu())
    for got in outputs_at_threads(vm, [x, mask]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _prefill_graph(b, m, h, d, seed=9):
    """What ``kiln.nn.GPT``'s prefill writes: a constant QKV projection split into q, k, v, the
    heads split out of each, the keys then transposed for the scores, and the heads of k and v
    also returned (for the KV cache) beside the merged attention output."""
    from kiln.ir import FunctionBuilder, TupleGetItem
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((h * d, 3 * h * d)) / np.sqrt(h * d)).astype("float32")
    params = [typed("x", (b, m, h * d)), typed("mask", (1, 1, m, m))]
    fb = FunctionBuilder(params)
    with fb.dataflow():
        def emit(op, *args, **attrs):
            return fb.emit(ops.call(op, *args, **attrs))
        t = emit("split", emit("matmul", params[0], Constant(w)), indices_or_sections=3, axis=-1)
        q, k, v = (emit("permute_dims", emit("reshape", fb.emit(TupleGetItem(t, i)), shape=(b, m, h, d)),
                        axes=(0, 2, 1, 3)) for i in range(3))
        s = emit("matmul", q, emit("permute_dims", k, axes=(0, 1, 3, 2)))
        s = emit("add", emit("multiply", s, Constant(np.array(0.125, "float32"))), params[1])
        o = emit("matmul", emit("softmax", s, axis=-1), v)
        y = emit("reshape", emit("permute_dims", o, axes=(0, 2, 1, 3)), shape=(b, m, h * d))
        gv = fb.emit_output(kiln.ir.graph.Tuple((y, k, v)))
    return kiln.IRModule({"main": fb.finish(gv)})


@pytest.mark.parametrize("b,m,h,d", [(1, 16, 4, 64), (2, 5, 2, 8)])
def test_heads_folded_when_the_kv_cache_also_takes_them(b, m, h, d):
    """The heads of k and v also go out (to a KV cache): their copies stay for that, but the
    attention call reads the projection's output whole (qkv=True; not grouped, as the copies
    read its columns in order), and the transposed keys and the copies of q and of the output
    go. Numbers at 1 and 2 threads as the unfused graph's."""
    mod = _prefill_graph(b, m, h, d)
    ctx = PassContext(target=AVX2, cores=2)
    fused = fuse_attention(ctx)(mod)
    calls = [bd.value for bd in fused["main"].bindings() if hasattr(bd.value, "op")]
    att = next(c for c in calls if c.op == "attention")
    assert att.attr("qkv") is True and att.attr("heads") == h and att.attr("groups", 1) == 1
    assert [c.attr("axes") for c in calls if c.op == "permute_dims"] == [(0, 2, 1, 3)] * 2
    assert [c.op for c in calls].count("reshape") == 2
    rng = np.random.default_rng(10)
    x = rng.standard_normal((b, m, h * d)).astype("float32")
    mask = np.triu(np.full((m, m), -1e4, "float32"), 1).reshape(1, 1, m, m)
    want = run_vm(kiln.get_pipeline("default", PassContext(target=AVX2, fuse_attention=False))(mod), [x, mask])
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default", ctx)(mod), target=AVX2), kiln.cpu())
    for threads in (1, 2):
        kiln.set_num_threads(threads)
        try:
            got = [o.numpy() for o in vm["main"](kiln.nd.array(x), kiln.nd.array(mask))]
        finally:
            kiln.set_num_threads(0)
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g, w_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cores,h,weight_input", [(1, 4, False), (2, 3, False), (2, 4, True)])
def test_qkv_projection_left_ungrouped(cores, h, weight_input):
    """One core, heads the cores do not divide, or a weight given at run time: no groups."""
    mod, _ = _projected_qkv_graph(1, 8, h, 4, weight_input=weight_input)
    fused = fuse_attention(PassContext(target=AVX2, cores=cores))(mod)
    call = next(bd.value for bd in fused["main"].bindings() if bd.value.op == "attention")
    assert call.attr("qkv") is True and call.attr("groups", 1) == 1
