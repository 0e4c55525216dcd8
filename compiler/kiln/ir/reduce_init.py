"""Hoisting reduction inits in front of their reduction loops.

A reduction block's ``init`` means "the value the reduction starts from". Run as "when the
reduction iterators are at their first value", it never runs when the reduction is empty (a
sum over a zero-size axis), and the output keeps whatever the memory held. So the evaluator
and the lowering both run the init *before* the reduction: ``hoist_reduction_inits`` moves it
in front of the outermost loop that drives a reduction iterator, under copies of the loops
below that one which bind spatial iterators (what ``decompose_reduction`` does as a schedule
primitive), as plain statements::

    for i in range(n):                          for i in range(n):
        for k in range(m):                          C[i] = 0.0
            with T.block("C"):            =>        for k in range(m):
                vi, vk = T.axis.remap("SR", ...)        with T.block("C"):   # no init left
                with T.init(): C[vi] = 0.0                  ...
                C[vi] = C[vi] + A[vi, vk]

A block whose init cannot be separated keeps it (and the first-iteration semantics): a loop
between drives both spatial and reduction iterators, an ``if`` or another block lies between,
the predicate mixes both kinds of loops, or the init reads a reduction iterator.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from .expr import And, IntImm, PrimExpr, Var, conjuncts, is_const_int
from .function import PrimFunc
from .functor import substitute, uses_var
from .stmt import Block, BlockRealize, For, IfThenElse, SeqStmt, Stmt, seq


def hoist_reduction_inits(func: PrimFunc) -> PrimFunc:
    """``func`` with every separable reduction init moved before its reduction loops (see the
    module docstring); the result computes the same as ``func`` wherever no reduction is
    empty, and the reduction's start value where one is."""
    pending: Dict[int, List[Stmt]] = {}
    body = _rewrite(func.body, [], pending)
    return func if body is func.body else func.with_body(body)


def _rewrite(s: Stmt, path: list, pending: Dict[int, List[Stmt]]) -> Stmt:
    """``s`` with its separable inits removed; each removed init is queued in ``pending``
    under the loop (an ancestor in ``path``) it must run before."""
    inner = path + [s]
    if isinstance(s, For):
        body = _rewrite(s.body, inner, pending)
        out = s if body is s.body else dataclasses.replace(s, body=body)
        inits = pending.pop(id(s), [])
        return seq(*inits, out) if inits else out
    if isinstance(s, SeqStmt):
        parts = [_rewrite(x, inner, pending) for x in s.seq]
        return s if all(a is b for a, b in zip(parts, s.seq)) else seq(*parts)
    if isinstance(s, IfThenElse):
        then = _rewrite(s.then_case, inner, pending)
        other = None if s.else_case is None else _rewrite(s.else_case, inner, pending)
        same = then is s.then_case and other is s.else_case
        return s if same else dataclasses.replace(s, then_case=then, else_case=other)
    if isinstance(s, BlockRealize):
        return _rewrite_realize(s, path, pending)
    return s


def _rewrite_realize(r: BlockRealize, path: list, pending) -> BlockRealize:
    block = r.block
    body = _rewrite(block.body, path + [r], pending)
    init = block.init
    if init is not None:
        hoisted = _separate_init(r, path)
        if hoisted is not None:
            loop, stmt = hoisted
            pending.setdefault(id(loop), []).append(stmt)
            init = None
    if body is block.body and init is block.init:
        return r
    return dataclasses.replace(r, block=dataclasses.replace(block, body=body, init=init))


def _separate_init(r: BlockRealize, path: list):
    """``(loop, init statement)`` to run before ``loop``, or None when the init of ``r`` must
    stay in the block (the module docstring lists when)."""
    block = r.block
    pairs = list(zip(block.iter_vars, r.iter_values))
    reduce = [v for iv, v in pairs if iv.kind == "reduce"]
    spatial = [(iv, v) for iv, v in pairs if iv.kind != "reduce"]
    driving = [k for k, p in enumerate(path) if isinstance(p, For)
               and any(uses_var(v, p.loop_var) for v in reduce)]
    if not driving:
        return None  # the reduction is not over loops: the init already runs once
    if any(uses_var(block.init, iv.var) for iv, _ in pairs if iv.kind == "reduce"):
        return None
    chain = path[driving[0]:]
    if any(isinstance(p, (IfThenElse, BlockRealize, Block)) for p in chain):
        return None
    vmap: Dict[Var, Var] = {}
    kept: List[For] = []
    for lp in (p for p in chain if isinstance(p, For)):
        in_s = any(uses_var(v, lp.loop_var) for _, v in spatial)
        in_r = any(uses_var(v, lp.loop_var) for v in reduce)
        if in_s and in_r:
            return None
        if in_s:
            vmap[lp.loop_var] = Var(f"{lp.loop_var.name}_init", lp.loop_var.dtype)
            kept.append(lp)
    dropped = [p.loop_var for p in chain if isinstance(p, For) and p.loop_var not in vmap]
    if any(uses_var(e, v) for lp in kept for e in (lp.min, lp.extent) for v in dropped):
        return None
    pred = _spatial_predicate(r.predicate, vmap, dropped)
    if pred is None:
        return None
    ivmap = {iv.var: substitute(v, vmap) for iv, v in spatial}
    stmt: Stmt = substitute(block.init, ivmap)
    if not is_const_int(pred, 1):
        stmt = IfThenElse(pred, stmt)
    for lp in reversed(kept):
        stmt = dataclasses.replace(lp, loop_var=vmap[lp.loop_var], min=substitute(lp.min, vmap),
                                   extent=substitute(lp.extent, vmap), body=stmt)
    return path[driving[0]], stmt


def _spatial_predicate(pred: PrimExpr, vmap, dropped) -> Optional[PrimExpr]:
    """The conjuncts of ``pred`` on spatial loops (renamed by ``vmap``); None if one mixes
    spatial and dropped (reduction) loops."""
    conds = []
    for c in conjuncts(pred):
        on_dropped = any(uses_var(c, v) for v in dropped)
        if on_dropped and any(uses_var(c, v) for v in vmap):
            return None
        if not on_dropped:
            conds.append(substitute(c, vmap))
    out: PrimExpr = IntImm(1, "bool")
    for c in conds:
        out = c if is_const_int(out, 1) else And(out, c)
    return out
