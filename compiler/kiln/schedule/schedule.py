"""``kiln.Schedule``: the state plus every primitive, each in a module of its family."""
from .loops import LoopPrimitives
from .blocks import BlockPrimitives
from .state import ScheduleState


class Schedule(LoopPrimitives, BlockPrimitives, ScheduleState):
    """Transforms one tensor program of a module; ``sch.mod`` is the result so far and
    ``sch.trace`` the primitives applied.

    >>> sch = kiln.Schedule(MyModule)                                  # doctest: +SKIP
    >>> (i,) = sch.get_loops(sch.get_block("B"))                       # doctest: +SKIP
    >>> i0, i1, i2 = sch.split(i, factors=[2, 2, 2])                   # doctest: +SKIP
    >>> sch.reorder(i0, i2, i1)                                        # doctest: +SKIP
    """

    def copy(self) -> "Schedule":
        """A schedule of the current module with an empty trace (used by the tuner)."""
        return Schedule(self.mod, self.func_name)
