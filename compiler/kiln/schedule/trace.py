"""The trace: every schedule primitive applied, with its arguments, replayable.

Printed, a trace reads like the code that made it::

    b0 = sch.get_block("B")
    (l1,) = sch.get_loops(b0)
    l2, l3, l4 = sch.split(l1, factors=[2, 2, 2])
    sch.reorder(l2, l4, l3)

``trace.apply_to(Schedule(original_mod))`` replays it on a fresh schedule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple


@dataclass(frozen=True)
class Instruction:
    """One primitive call. Handles in ``args``/``kwargs``/``outputs`` are kept as the objects
    of the schedule that recorded them; ``Trace`` names them when printing and maps them when
    replaying."""
    kind: str
    args: Tuple[Any, ...]
    kwargs: Tuple[Tuple[str, Any], ...]
    outputs: Any


def _is_rv(x) -> bool:
    from .state import BlockRV, LoopRV
    return isinstance(x, (BlockRV, LoopRV))


def _rvs_of(x) -> List[Any]:
    if _is_rv(x):
        return [x]
    if isinstance(x, (list, tuple)):
        return [r for v in x for r in _rvs_of(v)]
    return []


class Trace:
    def __init__(self):
        self.insts: List[Instruction] = []

    def append(self, kind: str, args, kwargs: Dict[str, Any], outputs) -> None:
        self.insts.append(Instruction(kind, tuple(args), tuple(sorted(kwargs.items())), outputs))

    def __len__(self):
        return len(self.insts)

    def __iter__(self):
        return iter(self.insts)

    # ---- printing ------------------------------------------------------------------------
    def as_python(self) -> List[str]:
        names: Dict[int, str] = {}

        def name_of(rv) -> str:
            if id(rv) not in names:
                prefix = "b" if type(rv).__name__ == "BlockRV" else "l"
                names[id(rv)] = f"{prefix}{len(names)}"
            return names[id(rv)]

        def show(v) -> str:
            if _is_rv(v):
                return names.get(id(v)) or name_of(v)
            if isinstance(v, list):
                return "[" + ", ".join(show(x) for x in v) + "]"
            if isinstance(v, tuple):
                return "(" + ", ".join(show(x) for x in v) + ("," if len(v) == 1 else "") + ")"
            return repr(v)

        lines = []
        for inst in self.insts:
            call_args = [show(a) for a in inst.args] + [f"{k}={show(v)}" for k, v in inst.kwargs]
            call = f"sch.{inst.kind}({', '.join(call_args)})"
            outs = inst.outputs
            if _is_rv(outs):
                lines.append(f"{name_of(outs)} = {call}")
            elif isinstance(outs, (list, tuple)) and outs and all(_is_rv(o) for o in outs):
                targets = ", ".join(name_of(o) for o in outs)
                lines.append(f"({targets},) = {call}" if len(outs) == 1 else f"{targets} = {call}")
            else:
                lines.append(call)
        return lines

    def __str__(self) -> str:
        return "\n".join(self.as_python())

    __repr__ = __str__

    # ---- replay --------------------------------------------------------------------------
    def apply_to(self, sch) -> None:
        """Replay every instruction on ``sch`` (a Schedule of an equal module)."""
        mapping: Dict[int, Any] = {}

        def remap(v):
            if _is_rv(v):
                if id(v) not in mapping:
                    raise ValueError(f"trace replay: handle {v!r} is used before it is made")
                return mapping[id(v)]
            if isinstance(v, list):
                return [remap(x) for x in v]
            if isinstance(v, tuple):
                return tuple(remap(x) for x in v)
            return v

        for inst in self.insts:
            result = getattr(sch, inst.kind)(*remap(inst.args), **{k: remap(v) for k, v in inst.kwargs})
            old, new = _rvs_of(inst.outputs), _rvs_of(result)
            if len(old) != len(new):
                raise ValueError(f"trace replay: {inst.kind} made {len(new)} handles, the trace has {len(old)}")
            for o, n in zip(old, new):
                mapping[id(o)] = n
