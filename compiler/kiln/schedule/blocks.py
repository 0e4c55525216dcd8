"""Block primitives: ``cache_read``, ``cache_write`` (cache.py), ``compute_at``,
``reverse_compute_at`` (compute_at.py), ``compute_inline``, ``reverse_compute_inline``
(inline.py), ``decompose_reduction`` (reduction.py) and ``rfactor`` (rfactor.py).

They move, split, merge or stage whole blocks, and share two analyses: where blocks sit and
who reads and writes what (scope.py), and which part of a buffer a block touches per
iteration of a loop (regions.py). Each keeps every block's ``reads``/``writes`` and iterator
domains valid and the program's results unchanged under the reference evaluator.
"""
from .cache import CachePrimitives
from .compute_at import ComputeAtPrimitives
from .inline import InlinePrimitives
from .reduction import ReductionPrimitives
from .rfactor import RFactorPrimitives


class BlockPrimitives(CachePrimitives, ComputeAtPrimitives, InlinePrimitives, ReductionPrimitives,
                      RFactorPrimitives):
    """Mixed into ``kiln.Schedule``; relies on the lookup/replace helpers of ``ScheduleState``."""
