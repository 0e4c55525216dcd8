"""The schedule's state: the module being transformed, handles to blocks and loops, and the trace.

Handles survive transformations because they name things that primitives keep stable: a
``BlockRV`` is a block's name (unique within a function), a ``LoopRV`` is a loop's variable
(a primitive that keeps a loop keeps its ``Var`` object; one that makes new loops hands out new
handles). Primitives are methods of ``Schedule`` decorated with ``@traced``, so every call is
appended to ``sch.trace`` and can be replayed on the original module.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, Union

from ..ir import (Block, BlockRealize, For, IRModule, Node, PrimFunc, Stmt, Var, transform)
from .trace import Trace


class ScheduleError(ValueError):
    """Raised when a schedule primitive is used illegally. The message says what is illegal
    and shows the IR involved."""

    def __init__(self, message: str, ir: Node | None = None):
        self.ir = ir
        text = message
        if ir is not None:
            try:
                text += "\nThe IR involved:\n" + _indent(ir.script())
            except Exception:  # never hide the real error behind a printing failure
                pass
        super().__init__(text)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


@dataclass(frozen=True, eq=False)
class BlockRV:
    """A handle to a block, by name."""
    name: str

    def __repr__(self):
        return f"BlockRV({self.name!r})"


@dataclass(frozen=True, eq=False)
class LoopRV:
    """A handle to a loop, by its loop variable."""
    var: Var

    def __repr__(self):
        return f"LoopRV({self.var.name!r})"


def traced(method: Callable) -> Callable:
    """Record a call of a schedule primitive in ``self.trace`` (after it succeeded)."""
    @functools.wraps(method)
    def wrapper(self: "Schedule", *args, **kwargs):
        if self._recording:
            self._recording = False
            try:
                result = method(self, *args, **kwargs)
            finally:
                self._recording = True
            self.trace.append(method.__name__, args, kwargs, result)
            return result
        return method(self, *args, **kwargs)
    return wrapper


class ScheduleState:
    """Finding and replacing statements in the function being scheduled. The primitives
    (mixed into ``Schedule``) are written on top of these helpers."""

    def __init__(self, mod: Union[IRModule, PrimFunc], func_name: Optional[str] = None):
        if isinstance(mod, PrimFunc):
            mod = IRModule({"main": mod})
        if not isinstance(mod, IRModule):
            raise TypeError(f"Schedule takes an IRModule or PrimFunc, got {type(mod).__name__}")
        prims = [k for k, f in mod.functions.items() if isinstance(f, PrimFunc)]
        if func_name is None:
            if "main" in prims:
                func_name = "main"
            elif len(prims) == 1:
                func_name = prims[0]
            else:
                raise ScheduleError(f"the module has tensor programs {prims}; name the one to "
                                    "schedule with Schedule(mod, func_name=...)")
        if func_name not in prims:
            raise ScheduleError(f"the module has no tensor program named {func_name!r}; it has {prims}")
        self.original = mod
        self.mod = mod
        self.func_name = func_name
        self.trace = Trace()
        self._recording = True

    # ---- the function --------------------------------------------------------------------
    @property
    def func(self) -> PrimFunc:
        return self.mod[self.func_name]

    def _set_body(self, body: Stmt) -> None:
        self.mod = self.mod.with_function(self.func_name, self.func.with_body(body))

    def work_on(self, func_name: str) -> None:
        """Schedule another tensor program of the same module from now on."""
        if func_name not in self.mod or not isinstance(self.mod[func_name], PrimFunc):
            raise ScheduleError(f"the module has no tensor program named {func_name!r}")
        self.func_name = func_name

    # ---- lookup --------------------------------------------------------------------------
    def _find(self, pred: Callable[[Node], bool]) -> Tuple[Optional[Stmt], List[Stmt]]:
        """The first statement satisfying ``pred`` (pre-order) and its ancestors, outermost first."""
        stack = [(self.func.body, [])]
        while stack:
            node, parents = stack.pop()
            if pred(node):
                return node, parents
            kids = _stmt_children(node)
            for k in reversed(kids):
                stack.append((k, parents + [node]))
        return None, []

    def _realize(self, block: BlockRV) -> Tuple[BlockRealize, List[Stmt]]:
        """The BlockRealize of ``block`` and its ancestors; ScheduleError if there is none."""
        if not isinstance(block, BlockRV):
            raise ScheduleError(f"expected a block handle (from get_block), got {block!r}")
        r, parents = self._find(lambda n: isinstance(n, BlockRealize) and n.block.name_hint == block.name)
        if r is None:
            raise ScheduleError(f"no block named {block.name!r} in function {self.func_name!r} "
                                f"(blocks: {self._block_names()})", self.func)
        return r, parents

    def _loop(self, loop: LoopRV) -> Tuple[For, List[Stmt]]:
        """The For of ``loop`` and its ancestors; ScheduleError if it no longer exists."""
        if not isinstance(loop, LoopRV):
            raise ScheduleError(f"expected a loop handle (from get_loops or split), got {loop!r}")
        f, parents = self._find(lambda n: isinstance(n, For) and n.loop_var is loop.var)
        if f is None:
            raise ScheduleError(f"loop {loop.var.name!r} does not exist in function "
                                f"{self.func_name!r} (a primitive replaced it)", self.func)
        return f, parents

    def _block_names(self) -> List[str]:
        names = []
        self._find(lambda n: isinstance(n, BlockRealize) and names.append(n.block.name_hint) and False)
        return [n for n in names if n != "root"]

    # ---- replacement ---------------------------------------------------------------------
    def _replace(self, old: Stmt, new: Stmt) -> None:
        """Replace the statement ``old`` (by identity) with ``new`` in the function body."""
        hit = []

        def pre(n):
            if n is old:
                hit.append(n)
                return new
            return None
        body = transform(self.func.body, post=lambda n: None, pre=pre)
        if not hit:
            raise ScheduleError("internal error: the statement to replace is not in the function", old)
        self._set_body(body)

    # ---- handles -------------------------------------------------------------------------
    @traced
    def get_block(self, name: str, func_name: Optional[str] = None) -> BlockRV:
        """The block called ``name``.

        >>> sch.get_block("B")       # doctest: +SKIP
        BlockRV('B')
        """
        if func_name is not None:
            self.work_on(func_name)
        rv = BlockRV(name)
        self._realize(rv)
        return rv

    @traced
    def get_loops(self, block: BlockRV) -> List[LoopRV]:
        """The loops around ``block`` up to the enclosing block, outermost first."""
        _, parents = self._realize(block)
        loops = []
        for p in parents:
            if isinstance(p, Block):
                loops = []  # loops outside the enclosing block belong to that block
            elif isinstance(p, For):
                loops.append(LoopRV(p.loop_var))
        return loops

    @traced
    def get_child_blocks(self, parent: Union[BlockRV, LoopRV]) -> List[BlockRV]:
        """The blocks directly inside ``parent`` (a block or a loop), in program order."""
        if isinstance(parent, BlockRV):
            node = self._realize(parent)[0].block.body
        else:
            node = self._loop(parent)[0].body
        out: List[BlockRV] = []
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, BlockRealize):
                out.append(BlockRV(n.block.name_hint))
                continue
            stack.extend(reversed(_stmt_children(n)))
        return out


def _stmt_children(node: Node) -> List[Stmt]:
    """Statement children only (no expressions), in program order."""
    from ..ir import IfThenElse, SeqStmt
    if isinstance(node, SeqStmt):
        return list(node.seq)
    if isinstance(node, For):
        return [node.body]
    if isinstance(node, BlockRealize):
        return [node.block]
    if isinstance(node, Block):
        return ([node.init] if node.init is not None else []) + [node.body]
    if isinstance(node, IfThenElse):
        return [node.then_case] + ([node.else_case] if node.else_case is not None else [])
    return []
