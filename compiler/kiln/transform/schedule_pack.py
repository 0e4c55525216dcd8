"""The schedule of a pack kernel run at run time (anchor ``layout_pack``; ``layout.packs_ahead``):
a ``matmul`` B ``[K, N]`` given at run time, packed into panels ``Bp[N/P, K, P]`` before the
product reads it.

In the pack's own loop order, ``for o, k, i: Bp[o, k, i] = B[k, o*P + i]``, each panel walks
all K rows of B: a few cache lines of each row, ``4N`` bytes apart, a new page per row, which
the hardware prefetchers do not follow. So the rows go in blocks, outside the panels::

    for k0 in T.parallel(K / rows):        # a block of rows of B: read once, in order
        for o in range(N / P):             # every panel's part of the block
            for k1 in range(rows):
                for i in T.vectorized(P):  # P floats of a row of B, contiguous
                    Bp[o, k0*rows + k1, i] = B[k0*rows + k1, o*P + i]

A block of rows (``rows`` x 4N bytes) stays in cache while the panels take their parts of
it, each part ``rows`` x P floats written contiguously; the pages in use at once are about
``rows`` + N/P. Decisions: ``rows`` (rows of B per block, 0: no blocks) and ``parallel``.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..ir import IRModule, PrimFunc
from ..schedule import Schedule
from ..schedule.decisions import Decisions
from .infra import PassContext
from .schedule_rules import find, static_extent

ANCHOR = "layout_pack"
BLOCK = "pack_weight"
# Rows of B per block by default. Each row is a page of its own once N >= 1024, and the
# panels' parts are a page each: 16 rows kept the pages in use at once within the TLB's
# reach (1024^3 packed in 16-wide panels: blocks of 16 rows 0.42-0.54 ms, of 64 0.98 ms).
BLOCK_ROWS = 16


def row_options(k: Optional[int]) -> List[int]:
    """Rows per block that divide ``k``: powers of two from 4 to 64."""
    return [r for r in (4, 8, 16, 32, 64) if k and k % r == 0]


def block_rows(k: Optional[int]) -> int:
    """The default rows per block: ``BLOCK_ROWS`` or the most of ``row_options`` below it; 0
    (no blocks) when none divides K."""
    return max((r for r in row_options(k) if r <= BLOCK_ROWS), default=0)


def schedule_pack(func: PrimFunc, ctx: PassContext, decide: Decisions) -> Tuple[PrimFunc, str]:
    """The rule (module docstring); returns the scheduled function and its description."""
    sch = Schedule(IRModule({"main": func}), "main")
    block = sch.get_block(BLOCK)
    loops = sch.get_loops(block)
    if len(loops) != 3:
        raise ValueError(f"{ANCHOR}: a 2-D weight's pack has 3 loops, this one {len(loops)}")
    o, k, i = loops
    panels, k_ext, lanes = (static_extent(f) for f in find(sch.func, BLOCK).loops)
    rows = decide.choose("rows", [0] + row_options(k_ext), default=block_rows(k_ext))
    parts = []
    if rows:
        k0, k1 = sch.split(k, [None, rows])
        sch.reorder(k0, o, k1, i)
        outer = k0
        parts.append(f"rows in blocks of {rows}")
    else:
        outer = sch.fuse(o, k)
    sch.vectorize(i)
    work = (panels or 1) * (k_ext or 1) * (lanes or 1)
    if decide.choose("parallel", [False, True], default=work >= ctx.parallel_min_elements):
        sch.parallel(outer)
        parts.append("parallel")
    return sch.func, "pack: " + ", ".join(parts + [f"vectorize {lanes}"])


RULES = {ANCHOR: schedule_pack}
