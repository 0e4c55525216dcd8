"""``fuse_attention``: scaled dot-product attention written as separate operators becomes one
``attention`` call (``ops/attention.py``), so it runs as one kernel per block of query rows
(``schedule_attention.py``)::

    lv15 = R.matmul(q, kt)                 # (b..., M, D) @ (b..., D, N)
    lv16 = R.multiply(lv15, R.const(0.125))          # optional: a scalar scale (or divide)
    lv17 = R.add(lv16, mask)                         # optional: an additive mask, or
                                                     # R.where(bool_mask, lv16, R.const(fill)),
                                                     # or R.where(R.const(m), R.const(fill), lv16)
    lv18 = R.softmax(lv17, axis=-1)
    lv19 = R.matmul(lv18, v)               # (b..., M, N) @ (b..., N, Dv)
  ->
    lv19 = R.attention(q, kt, v, mask, scale=0.125)

This is how exporters write attention (PyTorch's ``q @ k.transpose(-2, -1) * scale + mask``,
then softmax, then ``@ v``). Each intermediate must have no other use (else it is computed
anyway and nothing is saved), the batch dims of q, kt and v must be equal (no broadcasting),
the dtype float32. Run it before ``fuse_ops``; ``PassContext(fuse_attention=False)`` leaves
the graph alone.

When the heads come out of one projection and go back into the next, as exporters write
that too::

    q = R.permute_dims(R.reshape(qf, (B, M, H, D)), axes=(0, 2, 1, 3))      # qf (B, M, H*D)
    kt = R.permute_dims(R.reshape(kf, (B, N, H, D)), axes=(0, 2, 3, 1))
    v = R.permute_dims(R.reshape(vf, (B, N, H, Dv)), axes=(0, 2, 1, 3))
    y = R.reshape(R.permute_dims(attention, axes=(0, 2, 1, 3)), (B, M, H*Dv))
  ->
    y = R.attention(qf, kf, vf, mask, scale=0.125, heads=H)

the heads stay packed in the last axis (``ops/attention.py``): no kernel copies them out and
back (four copies a layer of a GPT-style decoder). The keys may also be split out as the
values are and then transposed (``permute_dims(k, (0, 1, 3, 2))``, as ``kiln.nn`` writes
them). A copy that something else also reads stays, for that reader alone: the keys and
values split into heads that a model also returns (an exported decoder's present keys and
values). And when qf, kf
and vf are the three equal pieces of one QKV projection's output, split along its last axis,
the call takes that output whole (``R.attention(qkv, mask, heads=H, qkv=True)``); the split
goes too when nothing else reads it.

On a target with several cores (``PassContext.cores`` = G dividing H), when that projection
is ``matmul(x, W)`` (``+ b``) with W and b constant, its columns are permuted into G groups of
H/G heads, each group's q, k and v together (``groups=G``, ops/attention.py): the projection
splits its columns among the cores and the attention kernel its heads, so each core finds
the q, k and v of its heads in its own cache. (Alone, the attention kernel of the 64-token,
4-head decoder scales 0.52-0.54 from one thread to two; reading a projection's output split
by columns, 0.64-0.67; grouped, 0.54-0.60; bench/RESULTS.md, "Session 13".)
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphExpr, GraphVar, TensorType, TupleGetItem
from ..ops import OpError
from ..ops import call as op_call
from ..ops.common import const_dim, dims_equal, same_shape
from .dead_code_elimination import remove_dead_bindings
from .graph_util import graph_functions, rewrite_function, use_counts, vars_in
from .infra import Pass, PassContext, context


def _scalar(e: GraphExpr) -> Optional[float]:
    """The value of a constant holding one number, else None."""
    if isinstance(e, Constant) and e.data.size == 1 and e.data.dtype.kind == "f":
        return float(e.data.reshape(()))
    return None


def _call_of(e: GraphExpr, defs, op: str) -> Optional[Call]:
    """The call of ``op`` that binds variable ``e`` (whatever its uses), else None."""
    value = defs.get(e) if isinstance(e, GraphVar) else None
    return value if isinstance(value, Call) and value.op == op else None


def _single_use(e: GraphExpr, defs, uses, op: str) -> Optional[Call]:
    """The call defining variable ``e`` when it is a call of ``op`` used once, else None."""
    return _call_of(e, defs, op) if isinstance(e, GraphVar) and uses[e] == 1 else None


def match_attention(call: Call, defs: Dict[GraphVar, GraphExpr], uses
                    ) -> Optional[Tuple[tuple, dict, list]]:
    """For ``call`` = ``matmul(softmax(...), v)`` of the attention pattern (module docstring):
    (the attention call's arguments, its attributes, the variables the fused call replaces),
    else None."""
    if call.op != "matmul" or len(call.args) != 2:
        return None
    probs, v = call.args
    sm = _single_use(probs, defs, uses, "softmax")
    if sm is None or dict(sm.attrs).get("axis", -1) not in (-1, sm.ty.ndim - 1):
        return None
    replaced = [probs]
    x, mask, scale, fill = sm.args[0], None, 1.0, None
    add = _single_use(x, defs, uses, "add")
    where = _single_use(x, defs, uses, "where")
    if where is not None and where.args[0].ty.dtype == "bool" \
            and _scalar(where.args[2]) is not None:
        # PyTorch's boolean attn_mask: where(mask, scores, lowest)
        replaced.append(x)
        mask, fill, x = where.args[0], _scalar(where.args[2]), where.args[1]
    elif where is not None and isinstance(where.args[0], Constant) \
            and where.args[0].data.dtype == np.bool_ and _scalar(where.args[1]) is not None:
        # masked_fill(mask, lowest): where(mask, lowest, scores), the mask a constant (a causal
        # mask exported with the model): the same with the mask inverted
        replaced.append(x)
        mask, fill, x = Constant(~where.args[0].data), _scalar(where.args[1]), where.args[2]
    elif add is not None:
        for score_side, mask_side in ((0, 1), (1, 0)):
            inner = add.args[score_side]
            if _single_use(inner, defs, uses, "multiply") or _single_use(inner, defs, uses, "divide") \
                    or _single_use(inner, defs, uses, "matmul"):
                replaced.append(x)
                x, mask = inner, add.args[mask_side]
                break
    for op in ("multiply", "divide"):
        scaled = _single_use(x, defs, uses, op)
        if scaled is None:
            continue
        sides = ((0, 1), (1, 0)) if op == "multiply" else ((0, 1),)
        for t_side, c_side in sides:
            c = _scalar(scaled.args[c_side])
            if c is not None and c != 0.0:
                replaced.append(x)
                x, scale = scaled.args[t_side], (c if op == "multiply" else 1.0 / c)
                break
        break
    qk = _single_use(x, defs, uses, "matmul")
    if qk is None:
        return None
    replaced.append(x)
    q, kt = qk.args
    args = (q, kt, v) + ((mask,) if mask is not None else ())
    attrs = {"scale": scale, **({"mask_fill": fill} if fill is not None else {})}
    if not all(isinstance(a.ty, TensorType) for a in args) or not np.isfinite(scale):
        return None
    try:
        fused = op_call("attention", *args, **attrs)
    except OpError:          # batch dims that broadcast, another dtype, a mask of another shape
        return None
    if not same_shape(fused.ty.shape, call.ty.shape):
        return None
    return args, attrs, replaced


def _axes(call: Call) -> Optional[tuple]:
    axes = call.attr("axes")
    return tuple(int(a) for a in axes) if axes is not None else None


def _heads_of(e: GraphExpr, axes: tuple, defs) -> Optional[Tuple[GraphExpr, int, list]]:
    """For ``e`` = ``permute_dims(reshape(x, (B, R, H, W)), axes)`` with ``x`` (B, R, H*W), or,
    for the keys (``axes`` (0, 2, 3, 1)), ``permute_dims(permute_dims(reshape(x, ...), (0, 2,
    1, 3)), (0, 1, 3, 2))`` (the heads split out, then transposed): (x, H, the variables in
    between), else None. They may have other uses (a KV cache written from the split heads):
    those keep their copies, and the attention call reads ``x``."""
    perm = _call_of(e, defs, "permute_dims")
    if perm is None:
        return None
    chain = [e]
    if axes == (0, 2, 3, 1) and _axes(perm) == (0, 1, 3, 2):
        chain.append(perm.args[0])
        perm = _call_of(perm.args[0], defs, "permute_dims")
        axes = (0, 2, 1, 3)
    if perm is None or _axes(perm) != axes:
        return None
    reshape = _call_of(perm.args[0], defs, "reshape")
    if reshape is None:
        return None
    x = reshape.args[0]
    four, three = reshape.ty.shape, getattr(x.ty, "shape", None)
    if three is None or len(three) != 3 or len(four) != 4:
        return None
    h, w = const_dim(four[2]), const_dim(four[3])
    if h is None or w is None or const_dim(three[2]) != h * w or \
            not all(dims_equal(a, b) is True for a, b in zip(three[:2], four[:2])):
        return None
    return x, h, chain + [perm.args[0]]


def _merged_output(var: GraphVar, users, uses) -> Optional[Tuple[GraphVar, list]]:
    """For attention output ``var`` used once as ``reshape(permute_dims(var, (0, 2, 1, 3)), (B,
    M, H*Dv))``: (the reshape's variable, the permute's variable), else None."""
    def only_user(v, op):
        if uses[v] != 1 or len(users.get(v, ())) != 1:
            return None
        b = users[v][0]
        return b if isinstance(b.value, Call) and b.value.op == op else None
    perm = only_user(var, "permute_dims")
    if perm is None or _axes(perm.value) != (0, 2, 1, 3):
        return None
    merge = only_user(perm.var, "reshape")
    if merge is None:
        return None
    four, three = perm.value.ty.shape, merge.value.ty.shape
    if len(three) != 3 or not all(dims_equal(a, b) is True for a, b in zip(three[:2], four[:2])) \
            or const_dim(three[2]) is None or const_dim(three[2]) != \
            (const_dim(four[2]) or 0) * (const_dim(four[3]) or 0):
        return None
    return merge.var, [var, perm.var]


def _qkv_split(inputs, defs) -> Optional[Tuple[GraphExpr, list]]:
    """For q, k, v = ``t[0], t[1], t[2]`` of ``t = split(x, 3, axis=-1)``: (x, the variables of
    t, q, k and v), else None."""
    items = [defs.get(v) if isinstance(v, GraphVar) else None for v in inputs]
    if not all(isinstance(it, TupleGetItem) for it in items) or \
            [it.index for it in items] != [0, 1, 2]:
        return None
    t = items[0].tuple_value
    if not all(it.tuple_value is t for it in items):
        return None
    split = defs.get(t)
    if not isinstance(split, Call) or split.op != "split" or len(split.ty.fields) != 3:
        return None
    x = split.args[0]
    rank = len(x.ty.shape)
    if split.attr("axis", 0) not in (-1, rank - 1) or \
            not all(same_shape(f.shape, split.ty.fields[0].shape) for f in split.ty.fields):
        return None
    return x, [t] + list(inputs)


def group_columns(width: int, heads: int, groups: int) -> np.ndarray:
    """The column order of a QKV projection's output in ``groups`` (``ops/attention.py``,
    "Heads in groups"): entry j is the column of the ungrouped output that lands at j.

    >>> group_columns(12, 2, 2).tolist()     # q0 k0 v0 | q1 k1 v1, heads of width 2
    [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]
    """
    d = width // (3 * heads)
    # (part, group, head of group, column) -> (group, part, head of group, column)
    cols = np.arange(width).reshape(3, groups, heads // groups, d)
    return cols.transpose(1, 0, 2, 3).reshape(-1)


def _grouped_projection(x: GraphExpr, defs, uses, heads: int, groups: int
                        ) -> Optional[Dict[GraphVar, Call]]:
    """The bindings of the projection ``x = matmul(y, W) [+ b]`` (W and b constant, each used
    once) with its output columns in ``groups`` (``group_columns``), else None."""
    out: Dict[GraphVar, Call] = {}
    add = _single_use(x, defs, uses, "add")
    mm_var, bias_at = x, None
    if add is not None:
        consts = [i for i, a in enumerate(add.args) if isinstance(a, Constant)]
        if len(consts) != 1:
            return None
        bias_at = consts[0]
        mm_var = add.args[1 - bias_at]
    mm = _single_use(mm_var, defs, uses, "matmul")
    if mm is None or not isinstance(mm.args[1], Constant):
        return None
    w = mm.args[1].data
    width = w.shape[-1]
    if w.ndim != 2 or width % (3 * heads):
        return None
    order = group_columns(width, heads, groups)
    out[mm_var] = op_call("matmul", mm.args[0], Constant(np.ascontiguousarray(w[:, order])),
                          **dict(mm.attrs))
    if add is not None:
        b = add.args[bias_at].data
        if b.ndim < 1 or b.shape[-1] != width or b.size != width:
            return None
        args = list(add.args)
        args[bias_at] = Constant(np.ascontiguousarray(b[..., order]))
        args[1 - bias_at] = mm_var
        out[x] = op_call("add", *args, **dict(add.attrs))
    return out


def fold_heads(var: GraphVar, args: tuple, attrs: dict, defs, uses, users, cores: int = 1
               ) -> Optional[Tuple[GraphVar, Call, list, Dict[GraphVar, Call]]]:
    """The attention call ``var = attention(*args, **attrs)`` with its heads split out of and
    merged back into packed projections (module docstring) as one call with ``heads=H``:
    (the variable that now binds it, the call, the variables it replaces, the projection's
    bindings rewritten for ``groups=cores``), else None. The copies of the heads stay in the
    graph: ``fuse_attention`` drops those that nothing else reads (``dead_code_elimination``)
    and keeps those that something does (a KV cache written from the split heads)."""
    if len(args[0].ty.shape) != 4:
        return None
    found = [_heads_of(a, axes, defs) for a, axes in
             zip(args[:3], ((0, 2, 1, 3), (0, 2, 3, 1), (0, 2, 1, 3)))]
    out = _merged_output(var, users, uses)
    if out is None or any(f is None for f in found) or len({f[1] for f in found}) != 1:
        return None
    inputs = [f[0] for f in found]
    packed = _qkv_split(inputs, defs)
    heads = found[0][1]
    # The projection's columns may be put in another order (groups) only when nothing but
    # this attention reads them: every variable from the split to here used once.
    alone = packed is not None and uses[packed[1][0]] == 3 and \
        all(uses[v] == 1 for v in packed[1][1:] + [v for f in found for v in f[2]])
    grouped: Dict[GraphVar, Call] = {}
    if alone and cores > 1 and heads % cores == 0:
        grouped = _grouped_projection(packed[0], defs, uses, heads, cores) or {}
    try:
        if packed is not None:
            call = op_call("attention", packed[0], *args[3:], **attrs, heads=heads, qkv=True,
                           **({"groups": cores} if grouped else {}))
        else:
            call = op_call("attention", *inputs, *args[3:], **attrs, heads=heads)
    except OpError:
        return None
    target, dropped = out
    if not same_shape(call.ty.shape, defs[target].ty.shape):
        return None
    return target, call, dropped, grouped


def fuse_attention(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        if not ctx.fuse_attention:
            return mod
        out = mod
        for name, func in graph_functions(mod):
            defs = {b.var: b.value for blk in func.blocks for b in blk.bindings}
            uses = use_counts(func)
            users: Dict[GraphVar, list] = {}
            for blk in func.blocks:
                for b in blk.bindings:
                    for v in set(vars_in(b.value)):
                        users.setdefault(v, []).append(b)
            fused: Dict[GraphVar, Call] = {}
            dropped = set()
            for blk in func.blocks:
                for b in blk.bindings:
                    if isinstance(b.value, Call):
                        m = match_attention(b.value, defs, uses)
                        if m is None:
                            continue
                        args, attrs, replaced = m
                        folded = fold_heads(b.var, args, attrs, defs, uses, users,
                                            ctx.cores or 1)
                        if folded is not None:
                            target, call, more, grouped = folded
                            fused[target] = call
                            fused.update(grouped)
                            dropped.update(replaced + more)
                        else:
                            fused[b.var] = op_call("attention", *args, **attrs)
                            dropped.update(replaced)
            if not fused:
                continue

            def visit(b: Binding, em, _block):
                if b.var in dropped:
                    return
                em.emit(Binding(b.var, fused[b.var]) if b.var in fused else b)
            out = out.with_function(name, remove_dead_bindings(rewrite_function(func, visit)))
        return out
    return Pass("fuse_attention", run)
