"""Where blocks are, for the block primitives: a block's *scope* (the nearest enclosing block,
usually the function's root block), the blocks of a scope in program order with the loops
around each (``Site``), who reads and writes what, and edits of the statement tree (remove a
block and the loops it leaves empty, insert a statement into a loop body).
"""
from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

from ..ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, IfThenElse,
                  PrimFunc, SeqStmt, Stmt, collect, seq)
from ..ir.functor import children, pre_order_visit


@dataclass(frozen=True, eq=False)
class Site:
    """A block of a scope and the statements between the scope's block and it (loops,
    sequences, ifs), outermost first."""
    realize: BlockRealize
    ancestors: Tuple[Stmt, ...]

    @property
    def block(self) -> Block:
        return self.realize.block

    @property
    def name(self) -> str:
        return self.realize.block.name_hint

    @property
    def loops(self) -> List[For]:
        return [a for a in self.ancestors if isinstance(a, For)]

    def under(self, stmt: Stmt) -> bool:
        return any(a is stmt for a in self.ancestors)

    def reads(self) -> set:
        """Ids of the buffers the block reads: its ``reads`` regions plus every load in it
        (a reduction loads the buffer it accumulates into without listing it as a read)."""
        return {id(r.buffer) for r in self.block.reads} | _accessed(self.block, BufferLoad)

    def writes(self) -> set:
        return {id(r.buffer) for r in self.block.writes} | _accessed(self.block, BufferStore)


# Statement -> (ids of the buffers its loads read, its stores write, and every buffer it
# names): scheduling asks this of the same blocks at every primitive (a bicubic grid sample:
# ~10,000 asks of its 16-tap block), and of whole scope bodies after each inline. Statements
# are immutable and a rewrite shares the unchanged ones, so a summary is made once per
# statement, from its children's; held weakly.
_SUMMARY: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _summary(stmt: Stmt) -> Tuple[frozenset, frozenset, frozenset]:
    got = _SUMMARY.get(stmt)
    if got is not None:
        return got
    loads, stores, named = set(), set(), set()
    if isinstance(stmt, BufferStore):
        stores.add(id(stmt.buffer))

    def visit(n) -> Optional[bool]:
        if isinstance(n, Stmt):
            sub = _summary(n)
            loads.update(sub[0])
            stores.update(sub[1])
            named.update(sub[2])
            return False
        if isinstance(n, Buffer):
            named.add(id(n))
        elif isinstance(n, BufferLoad):
            loads.add(id(n.buffer))
        return None
    for kid in children(stmt):
        pre_order_visit(kid, visit)
    got = _SUMMARY[stmt] = (frozenset(loads), frozenset(stores), frozenset(named))
    return got


def _accessed(block: Block, cls) -> frozenset:
    """Ids of the buffers that ``block``'s loads (``cls`` BufferLoad) or stores (BufferStore)
    touch."""
    return _summary(block)[0 if cls is BufferLoad else 1]


def names_buffer(stmt: Stmt, buf: Buffer) -> bool:
    """Whether ``buf`` appears anywhere in ``stmt`` (a load, a store, a region, an allocation)."""
    return id(buf) in _summary(stmt)[2]


def scope_of(parents: Sequence[Stmt]) -> Tuple[Block, Tuple[Stmt, ...]]:
    """The nearest block among ``parents`` (ancestors from ``ScheduleState._find``) and the
    ancestors below it."""
    for k in range(len(parents) - 1, -1, -1):
        if isinstance(parents[k], Block):
            return parents[k], tuple(parents[k + 1:])
    raise AssertionError("every statement of a PrimFunc lies inside its root block")


def sites(scope: Block) -> List[Site]:
    """The blocks directly in ``scope`` (not inside other blocks), in program order."""
    out: List[Site] = []

    def rec(s: Stmt, path: Tuple[Stmt, ...]) -> None:
        if isinstance(s, BlockRealize):
            out.append(Site(s, path))
        elif isinstance(s, For):
            rec(s.body, path + (s,))
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                rec(x, path + (s,))
        elif isinstance(s, IfThenElse):
            rec(s.then_case, path + (s,))
            if s.else_case is not None:
                rec(s.else_case, path + (s,))
    rec(scope.body, ())
    return out


def site_of(all_sites: Sequence[Site], realize: BlockRealize) -> Site:
    return next(s for s in all_sites if s.realize is realize)


def stmts_of(body: Stmt) -> List[Stmt]:
    """The statements of a body: the elements of a sequence, or the body itself."""
    return list(body.seq) if isinstance(body, SeqStmt) else [body]


def position(body: Stmt, site: Site) -> int:
    """Which statement of ``body`` (see ``stmts_of``) holds ``site``."""
    for k, s in enumerate(stmts_of(body)):
        if s is site.realize or site.under(s):
            return k
    raise AssertionError(f"block {site.name!r} is not in this body")


def insert(body: Stmt, index: int, stmt: Stmt) -> Stmt:
    stmts = stmts_of(body)
    return seq(*stmts[:index], stmt, *stmts[index:])


def remove(node: Stmt, target: Stmt) -> Optional[Stmt]:
    """``node`` without ``target``; loops and ifs left empty disappear too. None if nothing
    is left."""
    if node is target:
        return None
    if isinstance(node, SeqStmt):
        new = [remove(s, target) for s in node.seq]
        if all(a is b for a, b in zip(new, node.seq)):
            return node
        kept = [s for s in new if s is not None]
        return seq(*kept) if kept else None
    if isinstance(node, For):
        body = remove(node.body, target)
        return node if body is node.body else (None if body is None else
                                               dataclasses.replace(node, body=body))
    if isinstance(node, IfThenElse):
        then = remove(node.then_case, target)
        other = remove(node.else_case, target) if node.else_case is not None else None
        if then is node.then_case and other is node.else_case:
            return node
        if then is None and other is None:
            return None
        return IfThenElse(node.condition, then if then is not None else SeqStmt(()), other)
    return node


def unique_name(base: str, taken: Iterable[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ... if that is taken."""
    taken = set(taken)
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def block_names(func: PrimFunc) -> List[str]:
    return [b.name_hint for b in collect(func.body, Block)]


def buffer_names(func: PrimFunc) -> List[str]:
    return [p.name for p in func.params if isinstance(p, Buffer)] + \
        [b.name for b in collect(func.body, Buffer)]


def is_param(func: PrimFunc, buf: Buffer) -> bool:
    return any(p is buf for p in func.params)
