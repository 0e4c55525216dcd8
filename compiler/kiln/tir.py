"""``kiln.tir``: tensor-program names under the spelling users bring from the system Kiln stands
beside (``tir.Schedule``, ``tir.PrimFunc``). They are the very same objects as Kiln's own
spellings; nothing here is a second implementation.

>>> kiln.tir.Schedule is kiln.Schedule          # doctest: +SKIP
True
"""
from .ir.expr import Buffer, Var
from .ir.function import PrimFunc
from .schedule import BlockRV, LoopRV, Schedule, ScheduleError

__all__ = ["BlockRV", "Buffer", "LoopRV", "PrimFunc", "Schedule", "ScheduleError", "Var"]
