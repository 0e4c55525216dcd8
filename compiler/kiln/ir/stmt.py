"""Statements of tensor programs: loops, blocks, stores.

A *block* is the unit of computation that schedules name and move: it declares iterators
(spatial or reduction) with their domains, the buffer regions it reads and writes, an optional
``init`` run before the first reduction step, and the buffers it allocates. A ``BlockRealize``
binds the block's iterators to expressions of the surrounding loop variables.

>>> from .expr import Var, Buffer, IntImm, Range
>>> i = Var("i"); vi = Var("vi")
>>> A = Buffer("A", (8,)); B = Buffer("B", (8,))
>>> block = Block("B", (IterVar(vi, Range.from_extent(8), "spatial"),),
...               reads=(BufferRegion.point(A, (vi,)),), writes=(BufferRegion.point(B, (vi,)),),
...               body=BufferStore(B, A[vi] + 1.0, (vi,)))
>>> loop = For(i, IntImm(0), IntImm(8), "serial", BlockRealize((i,), IntImm(1, "bool"), block))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

from .expr import Buffer, IntImm, Node, PrimExpr, Range, Var, convert

FOR_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread")
ITER_KINDS = ("spatial", "reduce")


class Stmt(Node):
    __slots__ = ()


@dataclass(frozen=True, eq=False, repr=False)
class BufferStore(Stmt):
    buffer: Buffer
    value: PrimExpr
    indices: Tuple[PrimExpr, ...]

    def __post_init__(self):
        object.__setattr__(self, "value", convert(self.value))
        object.__setattr__(self, "indices", tuple(convert(i) for i in self.indices))


@dataclass(frozen=True, eq=False, repr=False)
class SeqStmt(Stmt):
    seq: Tuple[Stmt, ...]

    def __post_init__(self):
        object.__setattr__(self, "seq", tuple(self.seq))


def seq(*stmts: Stmt) -> Stmt:
    """Sequence statements, flattening nested sequences; one statement stays itself."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        flat.extend(s.seq if isinstance(s, SeqStmt) else (s,))
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


# A parallel loop with fewer iterations than this annotation runs on the calling thread.
PARALLEL_MIN_EXTENT = "kiln.parallel_min_extent"


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """``for loop_var in range(min, min + extent)``, run as ``kind`` says.

    ``thread_binding`` names a GPU thread axis (``"threadIdx.x"``) when kind is "thread_binding".
    ``annotations`` is a tuple of ``(key, value)`` pairs, sorted by key; ``PARALLEL_MIN_EXTENT``
    (an int) on a parallel loop: run it on the calling thread when it has fewer iterations.
    """
    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: str
    body: Stmt
    thread_binding: Optional[str] = None
    annotations: Tuple[Tuple[str, Any], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "min", convert(self.min))
        object.__setattr__(self, "extent", convert(self.extent))
        if self.kind not in FOR_KINDS:
            raise ValueError(f"unknown loop kind {self.kind!r}; expected one of {FOR_KINDS}")
        if (self.kind == "thread_binding") != (self.thread_binding is not None):
            raise ValueError("a loop has a thread_binding exactly when its kind is 'thread_binding'")
        if self.thread_binding is not None and self.thread_binding not in THREAD_TAGS:
            raise ValueError(f"unknown thread axis {self.thread_binding!r}; expected one of {THREAD_TAGS}")
        object.__setattr__(self, "annotations", tuple(sorted(self.annotations)))


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    condition: PrimExpr
    then_case: Stmt
    else_case: Optional[Stmt] = None


@dataclass(frozen=True, eq=False, repr=False)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (kept for calls to externals in later work)."""
    value: PrimExpr


@dataclass(frozen=True, eq=False, repr=False)
class IterVar(Node):
    """A block iterator: its variable, its domain, and whether it is spatial or a reduction."""
    var: Var
    dom: Range
    kind: str

    def __post_init__(self):
        if self.kind not in ITER_KINDS:
            raise ValueError(f"unknown iterator kind {self.kind!r}; expected one of {ITER_KINDS}")


@dataclass(frozen=True, eq=False, repr=False)
class BufferRegion(Node):
    """A rectangular part of a buffer: one Range per dimension."""
    buffer: Buffer
    region: Tuple[Range, ...]

    @staticmethod
    def point(buffer: Buffer, indices) -> "BufferRegion":
        return BufferRegion(buffer, tuple(Range(convert(i), IntImm(1, convert(i).dtype)) for i in indices))

    @staticmethod
    def full(buffer: Buffer) -> "BufferRegion":
        return BufferRegion(buffer, tuple(Range(IntImm(0, s.dtype), s) for s in buffer.shape))


@dataclass(frozen=True, eq=False, repr=False)
class Block(Stmt):
    name_hint: str
    iter_vars: Tuple[IterVar, ...]
    reads: Tuple[BufferRegion, ...]
    writes: Tuple[BufferRegion, ...]
    body: Stmt
    init: Optional[Stmt] = None
    alloc_buffers: Tuple[Buffer, ...] = ()
    annotations: Tuple[Tuple[str, Any], ...] = ()

    def __post_init__(self):
        for name in ("iter_vars", "reads", "writes", "alloc_buffers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "annotations", tuple(sorted(self.annotations)))

    @property
    def is_reduction(self) -> bool:
        return any(iv.kind == "reduce" for iv in self.iter_vars)


@dataclass(frozen=True, eq=False, repr=False)
class BlockRealize(Stmt):
    """Runs ``block`` with its iterators bound to ``iter_values`` when ``predicate`` holds."""
    iter_values: Tuple[PrimExpr, ...]
    predicate: PrimExpr
    block: Block

    def __post_init__(self):
        object.__setattr__(self, "iter_values", tuple(convert(v) for v in self.iter_values))
        object.__setattr__(self, "predicate", convert(self.predicate) if not isinstance(self.predicate, bool)
                           else IntImm(int(self.predicate), "bool"))
        if len(self.iter_values) != len(self.block.iter_vars):
            raise ValueError(f"block {self.block.name_hint!r} has {len(self.block.iter_vars)} iterators "
                             f"but {len(self.iter_values)} bindings")
