"""Software prefetch of the next weight block, for kernels whose outer loop walks weight blocks.

A channel-blocked conv (``schedule_conv``) runs ``for (n, ob, y) in parallel``: per block of
output channels ``ob``, its ``rows`` output rows, each a register tile that reads the block's
whole weight. The first row reads the block from memory; inside a model every layer's weight
is out of the caches by the time the layer runs (the layers before it went through ~50 MB of
others'), and one core streams about 10 bytes/ns from memory (Xeon family 6 model 167): that
row then waits on memory while the others find the block in L1/L2, so the stream and the
multiply-adds never overlap. ResNet-18's 7x7 512-channel 3x3 conv: 1.71 ms with its weight in
cache, 2.2-2.5 ms with it in memory (9.4 MB).

``prefetch_next_block`` makes each row also fetch ``1/rows`` of the *next* block's weight into
L2 (``prefetcht1``), spread over the reduction loop: a few lines per step of the deepest loop
that still takes at least ``MIN_LINES_PER_STEP``, so the fetches never queue up behind each
other. When the next block starts, its weight is in L2. Same conv: 1.8-2.0 ms cold (1.57-1.62 warm);
ResNet-18 in the model 11% faster at one thread, MobileNetV2 3-4% (bench/RESULTS.md,
"Session 18").
"""
from __future__ import annotations

import math
from typing import List, Optional

from ..ir import Buffer, Call, Evaluate, For, IntImm, Min, PrimFunc, Var
from ..ir import BlockRealize, pre_order_visit, replace_stmts
from ..ir.stmt import seq

# Cache lines (16 floats) per prefetch.
LINE_ELEMENTS = 16
# Fetch at least this many lines per step of the loop that holds the fetches (deeper loops give
# fewer): ResNet-18's 7x7 conv fetched 83 lines at once at the top of its reduction (16 steps a
# row) and ran 7% slower with its weight in cache, no faster without; 7 at a time (a kernel row
# per step) made it 6-18% faster.
MIN_LINES_PER_STEP = 4


def prefetch_next_block(func: PrimFunc, block: str, weight: Optional[Buffer],
                        rows: int) -> Optional[PrimFunc]:
    """``func`` with each of its parallel loop's iterations fetching one ``rows``-th of the next
    weight block; None when ``func`` is not in the form this needs.

    The form: one parallel loop ``f`` over (blocks x ``rows``) whose iteration ``f`` works on
    block ``f // rows`` of ``weight`` (its first axis, taken modulo its extent: a batch walks the
    blocks again per image) and computes reduction block ``block`` inside a serial loop nest.
    Iteration ``f`` fetches part ``f % rows`` of block ``f // rows + 1`` (the last block fetches
    itself again, which is harmless).
    """
    pars = _loops(func.body, lambda n: n.kind == "parallel")
    if len(pars) != 1 or weight is None or len(weight.shape) < 2:
        return None
    par = pars[0]
    if not isinstance(par.extent, IntImm) or par.extent.value % rows:
        return None
    chain = _reduction_nest(par, block)
    if not chain:
        return None
    shape = [int(d.value) for d in weight.shape]
    size = math.prod(shape[1:])                       # elements of one block
    lines = -(-size // LINE_ELEMENTS)
    # The deepest loop of the nest that still fetches MIN_LINES_PER_STEP a step (the outermost
    # one at least), and the flat index of its step within one row.
    count, step = 1, IntImm(0, "int32")
    at = None
    for loop in chain:
        count *= int(loop.extent.value)
        step = step * int(loop.extent.value) + loop.loop_var
        if at is None or lines >= MIN_LINES_PER_STEP * rows * count:
            at, at_step, at_count = loop, step, count
    per = -(-lines // (rows * at_count))
    f = par.loop_var
    last = IntImm(par.extent.value // rows - 1, "int32")
    nxt = Min(f // rows + 1, last) % shape[0]
    j = Var("pf", "int32")
    first = (((f % rows) * at_count + at_step) * per + j) * LINE_ELEMENTS
    # The weight is contiguous: element e of a block is index (nxt, 0, ..., 0, e).
    offset = Min(first, IntImm(size - 1, "int32"))
    zeros = [IntImm(0, "int32")] * (len(shape) - 2)
    fetch = For(j, 0, per, "serial",
                Evaluate(Call("prefetch", (weight[(nxt, *zeros, offset)],), "int32")))
    new = For(at.loop_var, at.min, at.extent, at.kind, seq(fetch, at.body),
              at.thread_binding, at.annotations)
    return PrimFunc(func.params, replace_stmts(func.body, {id(at): new}), func.attrs)


def _loops(node, keep) -> List[For]:
    found: List[For] = []
    pre_order_visit(node, lambda n: found.append(n) if isinstance(n, For) and keep(n) else None)
    return found


def _reduction_nest(par: For, block: str) -> List[For]:
    """The perfect nest of serial loops, outermost first, that directly under ``par`` holds the
    reduction block ``block`` (the init and write-back are its siblings)."""
    body = par.body
    for s in (body.seq if hasattr(body, "seq") else (body,)):
        if not isinstance(s, For) or s.kind != "serial" or not _holds(s, block):
            continue
        chain = [s]
        while isinstance(chain[-1].body, For) and chain[-1].body.kind == "serial":
            chain.append(chain[-1].body)
        return chain if all(isinstance(lp.extent, IntImm) for lp in chain) else []
    return []


def _holds(node, block: str) -> bool:
    found = []
    pre_order_visit(node, lambda n: found.append(n) if isinstance(n, BlockRealize)
                    and n.block.name_hint == block else None)
    return bool(found)
