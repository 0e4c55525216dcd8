"""Lowering of scheduled tensor programs towards codegen: passes ``PrimFunc -> PrimFunc``.

``lower_prim_func`` runs them in order:

1. ``opaque_blocks``: every block's iterators are replaced by the expressions they are bound to,
   its ``init`` moves before the reduction loops (so an empty reduction gives its start value;
   an init that cannot be separated becomes an ``if`` run at the first reduction iteration),
   its predicate an ``if``. Blocks remain only where they allocate buffers.
2. ``compact_buffers``: a scratch buffer used only inside some loop is allocated inside that
   loop's body, shrunk to the region one iteration touches (so a matmul's accumulator tile
   becomes a 4 x 16 register-sized buffer instead of a copy of the whole output).
3. ``pad_rows``: a scratch buffer whose last extent is symbolic gets rows padded to whole
   64-byte lines, so vectors of a row never straddle two lines.
4. ``partition_loops``: a loop whose last iterations fail the guards ``split`` left under it
   (``i_0 * 4 + i_1 < n``) becomes a guard-free loop plus a guarded tail.
5. ``partition_selects``: a vectorized loop whose Select conditions hold only in the middle
   of its range (zero padding) is split into border loops and a middle loop without them,
   so the middle reads its input with plain vector loads instead of clamped gathers.
6. ``promote_accumulators``: a reduction loop that reads and writes the same small region of
   a larger scratch buffer on every iteration (a matmul tile's accumulators, K in chunks)
   works on a copy of that region, copied in before and out after.
"""
from ..arith import simplify_stmt
from .blocks import opaque_blocks
from .compact import compact_buffers
from .loop_partition import partition_loops
from .pad_rows import pad_rows
from .promote_accumulators import promote_accumulators
from .select_partition import partition_selects


def lower_prim_func(func):
    """All lowering passes, in order, then one simplification with every loop's bounds known
    (compaction leaves indices like ``(j_0 * 16 + j_1) // 16 - j_0`` that fold to ``0``)."""
    func = promote_accumulators(partition_selects(partition_loops(pad_rows(compact_buffers(
        opaque_blocks(func))))))
    return func.with_body(simplify_stmt(func.body))
