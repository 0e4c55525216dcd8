"""Lowering of scheduled tensor programs towards codegen: passes ``PrimFunc -> PrimFunc``.

``lower_prim_func`` runs them in order:

1. ``opaque_blocks``: every block's iterators are replaced by the expressions they are bound to,
   its ``init`` becomes an explicit ``if`` (run when the reduction iterators are at their first
   value), its predicate an ``if``. Blocks remain only where they allocate buffers.
2. ``compact_buffers``: a scratch buffer used only inside some loop is allocated inside that
   loop's body, shrunk to the region one iteration touches (so a matmul's accumulator tile
   becomes a 4 x 16 register-sized buffer instead of a copy of the whole output).
"""
from ..arith import simplify_stmt
from .blocks import opaque_blocks
from .compact import compact_buffers


def lower_prim_func(func):
    """All lowering passes, in order, then one simplification with every loop's bounds known
    (compaction leaves indices like ``(j_0 * 16 + j_1) // 16 - j_0`` that fold to ``0``)."""
    func = compact_buffers(opaque_blocks(func))
    return func.with_body(simplify_stmt(func.body))
