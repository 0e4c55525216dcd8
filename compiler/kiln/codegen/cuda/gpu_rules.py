"""Which default GPU rule schedules a kernel: ``choose_gpu_rule(func) -> (name, rule)``.

* ``gpu_spatial`` (``schedule.bind_spatial_loops``): one output element per thread, reductions
  serial in each thread. Correct for every kernel of the operator library; the fallback.
"""
from __future__ import annotations

from typing import Callable, Tuple

from ...ir import PrimFunc
from .schedule import bind_spatial_loops

Rule = Callable[[PrimFunc], PrimFunc]


def choose_gpu_rule(func: PrimFunc) -> Tuple[str, Rule]:
    """The rule for ``func`` and its name (recorded as the kernel's ``kiln.schedule``)."""
    return "gpu_spatial", bind_spatial_loops
