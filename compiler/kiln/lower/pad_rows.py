"""Pad the rows of scratch buffers whose row length is known only at run time to whole cache
lines: ``pad_rows``.

A scratch buffer of shape (..., n) with ``n`` symbolic (the scores of a prompt against its
keys: (rows, n); a head's keys transposed: (D, n)) is allocated as (..., ceil(n / L) * L), L
the elements of a 64-byte line. Its indices stay below ``n``; only the stride of its rows
changes, so that a row starts on a line and a vector of the row's tile loads or stores one
line, not two. On the Intel Xeon (AVX-512) this repository is measured on, the fused
attention of a 60-token prompt ran 2.4x slower than that of a 64-token one with 240-byte rows
(bench/RESULTS.md, session 15).

A buffer with constant shape is left as it is: its rows are the tile sizes the schedule chose.
"""
from __future__ import annotations

from typing import Dict

from ..arith import simplify
from ..ir import (Block, Buffer, BufferLoad, BufferRegion, BufferStore, IntImm, PrimFunc, is_const_int,
                  transform)
from ..ir import dtype as dt
from ..ir.functor import pre_order_visit

LINE_BYTES = 64


def padded_row(extent, dtype: str):
    """``extent`` rounded up to whole 64-byte lines of ``dtype`` elements, or None when it is
    constant, already whole lines (``(n + 63) // 64 * 64`` floats), or the elements do not
    divide a line.

    >>> from kiln.ir import Var
    >>> padded_row(Var("n"), "float32")     # doctest: +SKIP   ((n + 15) // 16 * 16)
    """
    if isinstance(extent, IntImm):
        return None
    bits = dt.bits(dtype)
    if bits % 8 or LINE_BYTES % (bits // 8):
        return None
    per_line = LINE_BYTES // (bits // 8)
    if is_const_int(simplify(extent % per_line), 0):
        return None
    return (extent + (per_line - 1)) // per_line * per_line


def pad_rows(func: PrimFunc) -> PrimFunc:
    """Re-allocate every scratch buffer of rank >= 2 whose last extent is symbolic with that
    extent padded to whole cache lines (module docstring)."""
    padded: Dict[int, Buffer] = {}

    def plan(n):
        if isinstance(n, Block):
            for buf in n.alloc_buffers:
                row = padded_row(buf.shape[-1], buf.dtype) if buf.ndim >= 2 else None
                if row is not None:
                    padded[id(buf)] = Buffer(buf.name, buf.shape[:-1] + (row,), buf.dtype, buf.scope)

    pre_order_visit(func.body, plan)
    if not padded:
        return func

    def post(n):
        if isinstance(n, BufferLoad) and id(n.buffer) in padded:
            return BufferLoad(padded[id(n.buffer)], n.indices)
        if isinstance(n, BufferStore) and id(n.buffer) in padded:
            return BufferStore(padded[id(n.buffer)], n.value, n.indices)
        if isinstance(n, BufferRegion) and id(n.buffer) in padded:
            return BufferRegion(padded[id(n.buffer)], n.region)
        if isinstance(n, Block) and any(id(b) in padded for b in n.alloc_buffers):
            bufs = tuple(padded.get(id(b), b) for b in n.alloc_buffers)
            return Block(n.name_hint, n.iter_vars, n.reads, n.writes, n.body, n.init, bufs,
                         n.annotations)
        return None

    return func.with_body(transform(func.body, post))
