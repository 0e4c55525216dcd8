"""Turn blocks into plain loop code: ``opaque_blocks``.

    for k in range(n):                          C[i, j] = 0
        with T.block("C"):                      for k in range(n):
            vi, vj, vk = T.axis.remap(...)  =>      C[i, j] = C[i, j] + A[i, k] * B[k, j]
            with T.init(): C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + ...

A reduction's init runs before its reduction loops (``kiln.ir.reduce_init``), so an empty
reduction still yields its start value; an init that cannot be separated from the loops
becomes an ``if`` run when the reduction iterators are at their first value. Blocks that
allocate buffers stay, without iterators, as the scope of their allocations.
"""
from __future__ import annotations

from ..ir import (And, Block, BlockRealize, IfThenElse, IntImm, PrimFunc, Stmt, substitute,
                  transform, seq)
from ..arith import simplify
from ..ir.reduce_init import hoist_reduction_inits


def _true(e) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def opaque_blocks(func: PrimFunc) -> PrimFunc:
    """Replace block iterators by their bindings; inits move before their reduction loops
    (or become ``if``s where they cannot), predicates become ``if``s."""
    def post(node):
        if not isinstance(node, BlockRealize) or not node.block.iter_vars:
            return None
        block = node.block
        vmap = dict(zip((iv.var for iv in block.iter_vars), node.iter_values))
        body = substitute(block.body, vmap)
        if block.init is not None:
            first = None
            for iv, value in zip(block.iter_vars, node.iter_values):
                if iv.kind == "reduce":
                    cond = simplify(value == iv.dom.min)
                    first = cond if first is None else And(first, cond)
            init = substitute(block.init, vmap)
            body = seq(init if first is None or _true(first) else IfThenElse(first, init), body)
        stmt: Stmt = body
        if block.alloc_buffers:
            stmt = BlockRealize((), IntImm(1, "bool"), Block(block.name_hint, (), (), (), body,
                                                              None, block.alloc_buffers))
        if not _true(node.predicate):
            stmt = IfThenElse(node.predicate, stmt)
        return stmt
    func = hoist_reduction_inits(func)
    return func.with_body(transform(func.body, post))
