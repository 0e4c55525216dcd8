"""``split_block_iter``: make a block iterate over a blocked index space (a layout helper of
the default schedules, not a schedule primitive: it rewrites the PrimFunc before scheduling).

A block ``E`` that reads a channel-blocked buffer ``C[n, o // bn, y, x, o % bn]`` while
iterating over ``(n, o, y, x)`` cannot be moved under the loops of ``C``'s producer or inlined
into its write-back: ``compute_at`` and ``reverse_compute_inline`` match buffer indices to
block iterators one by one. Splitting the iterator ``o`` into ``(ob, oi)`` (``o = ob * bn + oi``,
``oi`` innermost) turns the read into ``C[n, ob, y, x, oi]`` and the write into
``E[n, ob * bn + oi, y, x]``; the block computes the same elements.

Before ``split_block_iter(func, "E", 1, 8)`` (O = 16)::

    for n, o, y, x in T.grid(1, 16, 4, 4):
        with T.block("E"):
            vn, vo, vy, vx = T.axis.remap("SSSS", [n, o, y, x])
            E[vn, vo, vy, vx] = C[vn, vo // 8, vy, vx, vo % 8] + 1.0

After::

    for n, o_0, y, x, o_1 in T.grid(1, 2, 4, 4, 8):
        with T.block("E"):
            vn, vo_0, vy, vx, vo_1 = T.axis.remap("SSSSS", [n, o_0, y, x, o_1])
            E[vn, vo_0 * 8 + vo_1, vy, vx] = C[vn, vo_0, vy, vx, vo_1] + 1.0
"""
from __future__ import annotations

import dataclasses

from ..arith import Analyzer
from ..ir import (BufferLoad, BufferStore, For, IntImm, PrimFunc, Range, Var, substitute,
                  transform)
from ..ir.analysis import infer_access_regions
from ..ir.stmt import BlockRealize, IterVar
from .schedule_rules import find


class BlockIterError(ValueError):
    """The block is not in a form ``split_block_iter`` can rewrite."""


def split_block_iter(func: PrimFunc, block: str, index: int, factor: int) -> PrimFunc:
    """``func`` with spatial iterator ``index`` of block ``block`` split into an outer
    iterator (in its place) and an inner one of extent ``factor`` (last), with the loops
    likewise (module docstring). The block must sit alone in a perfect loop nest with one loop
    per iterator, iterator ``index`` bound to a loop ``[0, E)`` and E a multiple of ``factor``."""
    info = find(func, block)
    r = info.realize
    ivs, values = list(r.block.iter_vars), list(r.iter_values)
    if not 0 <= index < len(ivs) or ivs[index].kind != "spatial":
        raise BlockIterError(f"block '{block}' has no spatial iterator {index}")
    iv, value = ivs[index], values[index]
    loop = next((f for f in info.loops if f.loop_var is value), None)
    extent = iv.dom.extent
    if loop is None or not isinstance(extent, IntImm) or not isinstance(loop.extent, IntImm) \
            or loop.extent.value != extent.value or extent.value % factor:
        raise BlockIterError(f"block '{block}': iterator {iv.var.name} is not bound to one loop "
                             f"over a multiple of {factor}")
    for outer, inner in zip(info.loops, info.loops[1:] + [r]):
        if outer.body is not inner:
            raise BlockIterError(f"block '{block}' is not alone in a perfect loop nest")

    dtype = iv.var.dtype
    outer_v, inner_v = Var(f"{iv.var.name}_0", dtype), Var(f"{iv.var.name}_1", dtype)
    n_out = extent.value // factor
    ana = Analyzer({outer_v: Range.from_extent(IntImm(n_out, dtype)),
                    inner_v: Range.from_extent(IntImm(factor, dtype))})
    joined = outer_v * IntImm(factor, dtype) + inner_v

    def simplify_indices(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            idx = tuple(ana.simplify(i) for i in n.indices)
            return dataclasses.replace(n, indices=idx)
        return None
    body = transform(substitute(r.block.body, {iv.var: joined}), simplify_indices)
    init = r.block.init
    if init is not None:
        init = transform(substitute(init, {iv.var: joined}), simplify_indices)
    ivs[index] = IterVar(outer_v, Range.from_extent(IntImm(n_out, dtype)), "spatial")
    ivs.append(IterVar(inner_v, Range.from_extent(IntImm(factor, dtype)), "spatial"))
    lo_var = Var(f"{loop.loop_var.name}_0", loop.loop_var.dtype)
    li_var = Var(f"{loop.loop_var.name}_1", loop.loop_var.dtype)
    values[index] = lo_var
    values.append(li_var)
    new_block = dataclasses.replace(r.block, iter_vars=tuple(ivs), body=body, init=init)
    reads, writes = infer_access_regions(new_block)
    new_block = dataclasses.replace(new_block, reads=reads, writes=writes)
    stmt = BlockRealize(tuple(values), r.predicate, new_block)
    stmt = For(li_var, IntImm(0, li_var.dtype), IntImm(factor, li_var.dtype), "serial", stmt)
    for f in reversed(info.loops):
        if f is loop:
            f = dataclasses.replace(f, loop_var=lo_var, extent=IntImm(n_out, lo_var.dtype))
        stmt = dataclasses.replace(f, body=stmt)
    top = info.loops[0] if info.loops else r
    return func.with_body(transform(func.body, lambda n: None,
                                    pre=lambda n: stmt if n is top else None))
