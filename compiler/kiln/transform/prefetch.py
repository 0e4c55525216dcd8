"""Software prefetch of the next weight block, for kernels whose outer loop walks weight blocks:
channel-blocked convs (``schedule_conv``) and matmuls over packed panels (``schedule_tile``);
and of the next input row, for 1x1 convs whose outer loop walks output rows.

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

The same holds for a matmul split by column panels, ``for panel in parallel: for row tile:
reduction``: the first row tile of each packed panel (``K x 64`` floats) reads it from memory.
There the row tiles split each part again (a serial *part loop* between the parallel loop and
the reduction), as a flat conv's pixel tiles do under its channel block. The GPT-style decoder's
projections with their weight in memory: 10-17% faster each at one thread, the model 4-5% at
one and two threads; ResNet-18 for AVX2 (flat tiles at 7x7) 4-8% (bench/RESULTS.md,
"Session 19").

A 1x1 conv with its rows outer (``for (n, y, ob) in parallel``) reads a row of its input per
output row, and a large input (ResNet-50's 56 x 56 x 256, 3.2 MB) arrives from memory: each
channel block of a row fetches part of the next input row, in every input channel block. That
"block" is not one contiguous run: the input channel blocks are axes the iteration walks whole
between the fixed batch and row (``_next_block``'s gaps), so it is one run of ``W x b`` per
channel block. ResNet-50's 256 -> 64 conv at 56 x 56: 840 -> 739 us cold; the model 4-6%
faster at one thread.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ..arith.analyzer import simplify
from ..ir import Buffer, BufferLoad, Call, Evaluate, For, IntImm, Min, PrimFunc, Var
from ..ir import BlockRealize, collect, pre_order_visit, replace_stmts, substitute, uses_var
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
    block ``f // rows``, and computes reduction block ``block`` inside a serial loop nest,
    directly or under one serial part loop (``_reduction_nest``). A block is the run of
    ``weight`` that one iteration reads (``_next_block``): its leading axes fixed by ``f``,
    all of its trailing axes (a conv's ``[O/b, KH, KW, I, b]``: one channel block; a packed
    matmul weight ``[N/P, K, P]``: one panel; a Winograd GEMM's ``[N/P, 6, 6, K, P]``: one
    product's panel). Iteration ``f`` fetches part ``f % rows`` of the next iteration's block
    (``f // rows + 1``), split again into the part loop's iterations (the last block fetches
    itself again, which is harmless).
    """
    pars = _loops(func.body, lambda n: n.kind == "parallel")
    if len(pars) != 1 or weight is None or len(weight.shape) < 2:
        return None
    par = pars[0]
    if not isinstance(par.extent, IntImm) or par.extent.value % rows:
        return None
    part, chain = _reduction_nest(par, block)
    if not chain:
        return None
    f = par.loop_var
    nxt = Min((f // rows + 1) * rows, IntImm(par.extent.value - 1, "int32"))
    found = _next_block(par, block, weight, nxt)
    if found is None:
        return None
    prefix, gaps = found
    # A serial loop between the parallel loop and the reduction (a matmul's row tiles under a
    # column panel, a flat conv's pixel tiles under a channel block) splits each part again.
    inner = int(part.extent.value) if part is not None else 1
    inner_index = part.loop_var if part is not None else IntImm(0, "int32")
    shape = [int(d.value) for d in weight.shape]
    run = math.prod(shape[len(prefix):])              # contiguous elements of a run
    size = run * math.prod(shape[a] for a in gaps)    # elements of one block
    lines = -(-size // LINE_ELEMENTS)
    # The deepest loop of the nest that still fetches MIN_LINES_PER_STEP a step (the outermost
    # one at least), and the flat index of its step within one row.
    count, step = 1, IntImm(0, "int32")
    at = None
    for loop in chain:
        count *= int(loop.extent.value)
        step = step * int(loop.extent.value) + loop.loop_var
        if at is None or lines >= MIN_LINES_PER_STEP * rows * inner * count:
            at, at_step, at_count = loop, step, count
    per = -(-lines // (rows * inner * at_count))
    j = Var("pf", "int32")
    slot = ((f % rows) * inner + inner_index) * at_count + at_step
    first = (slot * per + j) * LINE_ELEMENTS
    # Element e of the block: run e // run (the gap axes, last fastest), at e % run of it,
    # index (prefix with the gaps filled in..., 0, ..., 0, e % run).
    offset = Min(first, IntImm(size - 1, "int32"))
    index = list(prefix)
    rest = offset // run if gaps else None
    for a in reversed(gaps):
        index[a] = rest % shape[a]
        rest = rest // shape[a]
    zeros = [IntImm(0, "int32")] * (len(shape) - len(prefix) - 1)
    tail = offset % run if gaps else offset
    fetch = For(j, 0, per, "serial",
                Evaluate(Call("prefetch", (weight[(*index, *zeros, tail)],), "int32")))
    new = For(at.loop_var, at.min, at.extent, at.kind, seq(fetch, at.body),
              at.thread_binding, at.annotations)
    return PrimFunc(func.params, replace_stmts(func.body, {id(at): new}), func.attrs)


def _next_block(par: For, block: str, weight: Buffer, nxt) -> Optional[Tuple[List, List[int]]]:
    """(prefix, gaps): the leading indices of ``weight`` that iteration ``nxt`` of ``par`` reads
    in block ``block``: the indices of its load (in loop variables), every loop but ``par``'s
    at 0, cut after the last axis that depends on ``par``'s variable, then ``nxt`` put in for
    it; and the axes of the prefix that do not depend on it and start at 0 there, which the
    iteration walks whole (a rows-outer conv's input ``[N, C/b, H, W, b]``: the channel blocks
    of the next row, each a run of ``W x b``). None when the load is not found, no axis
    depends on it, or all do (no block to fetch)."""
    realizes = []
    pre_order_visit(par, lambda n: realizes.append(n) if isinstance(n, BlockRealize)
                    and n.block.name_hint == block else None)
    if len(realizes) != 1:
        return None
    realize = realizes[0]
    loads = [ld for ld in collect(realize.block.body, BufferLoad) if ld.buffer is weight]
    if len(loads) != 1:
        return None
    bound = {iv.var: value for iv, value in zip(realize.block.iter_vars, realize.iter_values)}
    f = par.loop_var
    indices = []
    for index in loads[0].indices:
        index = substitute(index, bound)
        others = {v: IntImm(0, "int32") for v in collect(index, Var) if v is not f}
        # (simplified: a panel's lane index ``(f % 16 * 64 + lane) % 64`` does not depend on f)
        indices.append(simplify(substitute(index, others), {f: (0, int(par.extent.value))}))
    dependent = [a for a, index in enumerate(indices) if uses_var(index, f)]
    if not dependent or dependent[-1] == len(indices) - 1:
        return None
    prefix = indices[:dependent[-1] + 1]
    gaps = [a for a, index in enumerate(prefix) if a not in dependent
            and isinstance(index, IntImm) and index.value == 0 and int(weight.shape[a].value) > 1]
    return [substitute(index, {f: nxt}) for index in prefix], gaps


def _loops(node, keep) -> List[For]:
    found: List[For] = []
    pre_order_visit(node, lambda n: found.append(n) if isinstance(n, For) and keep(n) else None)
    return found


def _reduction_nest(par: For, block: str) -> Tuple[Optional[For], List[For]]:
    """(part loop, nest): the perfect nest of serial loops, outermost first, that holds the
    reduction block ``block`` directly under ``par`` (the init and write-back are its siblings),
    or under one serial loop of ``par``'s (the part loop: its body holds the nest beside the
    init and write-back). (None, []) when there is no such nest."""
    body = par.body
    for s in (body.seq if hasattr(body, "seq") else (body,)):
        if not isinstance(s, For) or s.kind != "serial" or not _holds(s, block):
            continue
        chain = [s]
        while isinstance(chain[-1].body, For) and chain[-1].body.kind == "serial":
            chain.append(chain[-1].body)
        if not all(isinstance(lp.extent, IntImm) for lp in chain):
            return None, []
        if len(chain) == 1 and hasattr(s.body, "seq"):
            deeper = _reduction_nest(s, block)[1]
            if deeper:
                return s, deeper
        return None, chain
    return None, []


def _holds(node, block: str) -> bool:
    found = []
    pre_order_visit(node, lambda n: found.append(n) if isinstance(n, BlockRealize)
                    and n.block.name_hint == block else None)
    return bool(found)
