"""``split_block_iter`` / ``fuse_block_iter``: make a block iterate over a blocked index space
(layout helpers of the default schedules, not schedule primitives: they rewrite the PrimFunc
before scheduling).

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

``fuse_block_iter`` is the other direction, for a blocked buffer whose pixels are one flat axis
``C[n, ob, y * W + x, oi]`` (``ops/conv_nchwc.py``): fusing the iterators ``(y, x)`` of the
block into ``p`` (``y = p // W``, ``x = p % W``) turns the read into ``C[n, ob, p, oi]`` (the
analyzer folds ``(p // W) * W + p % W`` to ``p``) and the write into ``E[n, o, p // W, p % W]``.
"""
from __future__ import annotations

import dataclasses

from ..arith import Analyzer
from ..ir import (BufferLoad, BufferStore, For, IntImm, PrimFunc, Range, Var, replace_stmts,
                  substitute, transform)
from ..ir.expr import FloorDiv, FloorMod
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
    _check_perfect(info, block)

    dtype = iv.var.dtype
    outer_v, inner_v = Var(f"{iv.var.name}_0", dtype), Var(f"{iv.var.name}_1", dtype)
    n_out = extent.value // factor
    ana = Analyzer({outer_v: Range.from_extent(IntImm(n_out, dtype)),
                    inner_v: Range.from_extent(IntImm(factor, dtype))})
    joined = outer_v * IntImm(factor, dtype) + inner_v

    body, init = _rewrite_body(r.block, {iv.var: joined}, ana)
    ivs[index] = IterVar(outer_v, Range.from_extent(IntImm(n_out, dtype)), "spatial")
    ivs.append(IterVar(inner_v, Range.from_extent(IntImm(factor, dtype)), "spatial"))
    lo_var = Var(f"{loop.loop_var.name}_0", loop.loop_var.dtype)
    li_var = Var(f"{loop.loop_var.name}_1", loop.loop_var.dtype)
    values[index] = lo_var
    values.append(li_var)
    stmt = _realize(r, ivs, values, body, init)
    stmt = For(li_var, IntImm(0, li_var.dtype), IntImm(factor, li_var.dtype), "serial", stmt)
    for f in reversed(info.loops):
        if f is loop:
            f = dataclasses.replace(f, loop_var=lo_var, extent=IntImm(n_out, lo_var.dtype))
        stmt = dataclasses.replace(f, body=stmt)
    return _replace_nest(func, info, stmt)


def fuse_block_iter(func: PrimFunc, block: str, index: int, count: int = 2) -> PrimFunc:
    """``func`` with the ``count`` spatial iterators ``index .. index + count - 1`` of block
    ``block`` fused into one iterator (in their place) over the product of their extents, and
    their loops likewise (module docstring). The block must sit alone in a perfect loop nest
    with one loop per iterator; those iterators must be bound, in order, to adjacent loops
    ``[0, E_k)`` with static extents."""
    info = find(func, block)
    r = info.realize
    ivs, values = list(r.block.iter_vars), list(r.iter_values)
    if count < 2 or index < 0 or index + count > len(ivs) or \
            any(iv.kind != "spatial" for iv in ivs[index:index + count]):
        raise BlockIterError(f"block '{block}' has no {count} spatial iterators from {index}")
    _check_perfect(info, block)
    loops = []
    for iv, value in zip(ivs[index:index + count], values[index:index + count]):
        loop = next((f for f in info.loops if f.loop_var is value), None)
        if loop is None or not isinstance(iv.dom.extent, IntImm) or \
                not isinstance(loop.extent, IntImm) or loop.extent.value != iv.dom.extent.value:
            raise BlockIterError(f"block '{block}': iterator {iv.var.name} is not bound to one "
                                 "loop over its static extent")
        loops.append(loop)
    first = info.loops.index(loops[0])
    if info.loops[first:first + count] != loops:
        raise BlockIterError(f"block '{block}': the loops of the fused iterators are not adjacent")
    extents = [iv.dom.extent.value for iv in ivs[index:index + count]]
    total = 1
    for e in extents:
        total *= e
    dtype = ivs[index].var.dtype
    fused_v = Var("_".join(iv.var.name for iv in ivs[index:index + count]), dtype)
    ana = Analyzer({fused_v: Range.from_extent(IntImm(total, dtype))})
    vmap, inner = {}, 1
    for iv, e in reversed(list(zip(ivs[index:index + count], extents))):
        # v_k = (p // (product of the later extents)) % E_k; the first needs no modulo.
        q = fused_v if inner == 1 else FloorDiv(fused_v, IntImm(inner, dtype))
        vmap[iv.var] = q if iv is ivs[index] else FloorMod(q, IntImm(e, dtype))
        inner *= e
    body, init = _rewrite_body(r.block, vmap, ana)
    ivs[index:index + count] = [IterVar(fused_v, Range.from_extent(IntImm(total, dtype)), "spatial")]
    loop_var = Var("_".join(f.loop_var.name for f in loops), loops[0].loop_var.dtype)
    values[index:index + count] = [loop_var]
    stmt = _realize(r, ivs, values, body, init)
    nest = info.loops[:first] + [dataclasses.replace(loops[0], loop_var=loop_var,
                                                     extent=IntImm(total, loop_var.dtype))] \
        + info.loops[first + count:]
    for f in reversed(nest):
        stmt = dataclasses.replace(f, body=stmt)
    return _replace_nest(func, info, stmt)


def _check_perfect(info, block: str) -> None:
    for outer, inner in zip(info.loops, info.loops[1:] + [info.realize]):
        if outer.body is not inner:
            raise BlockIterError(f"block '{block}' is not alone in a perfect loop nest")


def _rewrite_body(blk, vmap, ana: Analyzer):
    """The block's body and init with ``vmap`` substituted, buffer indices simplified."""
    def simplify_indices(n):
        if isinstance(n, (BufferLoad, BufferStore)):
            idx = tuple(ana.simplify(i) for i in n.indices)
            return dataclasses.replace(n, indices=idx)
        return None
    body = transform(substitute(blk.body, vmap), simplify_indices)
    init = blk.init
    if init is not None:
        init = transform(substitute(init, vmap), simplify_indices)
    return body, init


def _realize(r: BlockRealize, ivs, values, body, init) -> BlockRealize:
    new_block = dataclasses.replace(r.block, iter_vars=tuple(ivs), body=body, init=init)
    reads, writes = infer_access_regions(new_block)
    new_block = dataclasses.replace(new_block, reads=reads, writes=writes)
    return BlockRealize(tuple(values), r.predicate, new_block)


def _replace_nest(func: PrimFunc, info, stmt) -> PrimFunc:
    top = info.loops[0] if info.loops else info.realize
    return func.with_body(replace_stmts(func.body, {id(top): stmt}))
