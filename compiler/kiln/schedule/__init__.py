"""Schedules: transformations of one tensor program that keep what it computes.

>>> sch = kiln.Schedule(mod)                       # doctest: +SKIP
>>> (i,) = sch.get_loops(sch.get_block("B"))       # doctest: +SKIP
>>> i0, i1 = sch.split(i, factors=[None, 4])       # doctest: +SKIP
"""
from .schedule import Schedule
from .state import BlockRV, LoopRV, ScheduleError
from .trace import Instruction, Trace
