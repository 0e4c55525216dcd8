"""Static memory planning: intermediate tensors whose lifetimes do not overlap share storage.

The input is a list of *allocations* (one per tensor a kernel or external function writes),
each with its size in bytes and its live range ``[first, last]`` in binding positions (an
allocation is live from the binding that writes it to the last binding that reads it, through
any alias, tuple or tuple item). Two allocations may share bytes only if their ranges are
disjoint: an allocation last read by binding ``i`` is free for one defined at ``i + 1``, never
for one defined at ``i`` itself (kernels take inputs and outputs that must not overlap).

The planner walks the allocations in definition order with a free list of *storage tokens*
(greedy best-fit, as TVM's static graph planner does): an allocation takes the smallest free
token that is big enough; if none is, it takes the largest free token and grows it; if no token
is free it opens a new one. At the end the tokens are laid out one after another at 64-byte
aligned offsets; the arena is their total.

>>> plan = plan_memory([Alloc(0, 400, 0, 1), Alloc(1, 400, 1, 2), Alloc(2, 400, 2, 3)])
>>> plan.arena_size, plan.naive_size, plan.offsets
(896, 1344, {0: 0, 1: 448, 2: 0})
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence

from .format import align_up


@dataclass(frozen=True)
class Alloc:
    """One tensor to place: ``key`` names it, ``nbytes`` its size, live over bindings
    ``first..last`` (inclusive)."""
    key: int
    nbytes: int
    first: int
    last: int


@dataclass
class MemoryPlan:
    """Where each allocation lives in the arena (byte offsets, 64-byte aligned)."""
    offsets: Dict[int, int] = field(default_factory=dict)
    arena_size: int = 0
    naive_size: int = 0       # one buffer per allocation, no sharing
    num_tokens: int = 0       # distinct storage blocks after sharing

    def __repr__(self):
        return (f"MemoryPlan({len(self.offsets)} tensors in {self.num_tokens} blocks: arena "
                f"{self.arena_size} bytes, {self.naive_size} without sharing)")


class _Token:
    __slots__ = ("size", "members", "free_after")

    def __init__(self, size: int):
        self.size = size
        self.members: List[int] = []
        self.free_after = -1   # position of the last read of its current member


def plan_memory(allocs: Sequence[Alloc]) -> MemoryPlan:
    """Assign arena offsets to ``allocs`` (see the module docstring)."""
    tokens: List[_Token] = []
    live: List[_Token] = []
    free: List[_Token] = []
    owner: Dict[int, _Token] = {}
    for a in sorted(allocs, key=lambda a: (a.first, -a.nbytes, a.key)):
        # Release tokens whose current tenant was last read strictly before this definition.
        for t in [t for t in live if t.free_after < a.first]:
            live.remove(t)
            free.append(t)
        size = align_up(max(a.nbytes, 1))
        fitting = [t for t in free if t.size >= size]
        if fitting:
            tok = min(fitting, key=lambda t: t.size)
        elif free:
            tok = max(free, key=lambda t: t.size)
            tok.size = size  # grow: offsets are assigned after planning, so this is free to do
        else:
            tok = _Token(size)
            tokens.append(tok)
        if tok in free:
            free.remove(tok)
        tok.members.append(a.key)
        tok.free_after = a.last
        live.append(tok)
        owner[a.key] = tok

    plan = MemoryPlan(num_tokens=len(tokens))
    offset = 0
    base: Dict[int, int] = {}
    for t in tokens:
        base[id(t)] = offset
        offset += t.size
    plan.offsets = {key: base[id(tok)] for key, tok in owner.items()}
    plan.arena_size = offset
    plan.naive_size = sum(align_up(max(a.nbytes, 1)) for a in allocs)
    return plan
