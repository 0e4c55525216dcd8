"""The well-formedness check for tensor programs: run it after every pass in tests.

``verify`` collects every problem it finds and raises one ``VerifyError`` listing them, each
naming the function and block where it is:

    function 'main', block 'C': variable 'i' is used in the block but defined outside it;
    a block may use only its own iterators (bind loop variables to iterators with T.axis)

Rules (the same as TVM's well-formedness check, in Kiln's terms):

- a variable is used only where it is defined: function-level symbolic sizes (Vars in
  parameter shapes, scalar parameters) everywhere; a loop variable inside its loop, but not
  inside a block below it except in that block's bindings and predicate; a block iterator
  inside its block (body, init, regions) and in the bindings of blocks nested in it;
- every variable is bound once (one loop or one block iterator);
- a buffer is a parameter or allocated by an enclosing block, and allocated only once;
- a load, store or region has one index per buffer dimension, indices are integers;
- a store's value has the buffer's dtype; both operands of a binary operation one dtype;
- a block has one binding per iterator; loop bounds are integers; predicates and conditions
  are bool; block names are unique within a function. (A reduction block may lack an init.)

>>> verify(func)    # returns None when well formed  # doctest: +SKIP
"""
from __future__ import annotations

from typing import List, Optional

from . import dtype as dt
from .expr import BinaryOp, Buffer, BufferLoad, PrimExpr, Select, Var
from .function import IRModule, PrimFunc
from .functor import pre_order_visit
from .stmt import (Block, BlockRealize, BufferRegion, BufferStore, Evaluate, For, IfThenElse,
                   SeqStmt, Stmt)


class VerifyError(Exception):
    """A tensor program is malformed; the message lists each problem and where it is."""

    def __init__(self, problems: List[str]):
        self.problems = list(problems)
        head = "malformed tensor program" + (f" ({len(problems)} problems)" if len(problems) > 1 else "")
        super().__init__(head + ":\n  " + "\n  ".join(self.problems))


def verify(func_or_mod, name: Optional[str] = None) -> None:
    """Check a PrimFunc (or every PrimFunc of an IRModule); raise ``VerifyError`` if malformed.

    ``name`` labels a lone PrimFunc in messages (default: its ``global_symbol`` attribute, else
    "<prim_func>"). Functions of other kinds in a module are skipped.

    >>> verify(kiln.ir.IRModule({"main": func}))    # doctest: +SKIP
    """
    if isinstance(func_or_mod, IRModule):
        funcs = [(n, f) for n, f in func_or_mod.items() if isinstance(f, PrimFunc)]
    elif isinstance(func_or_mod, PrimFunc):
        attrs = dict(func_or_mod.attrs)
        funcs = [(name or attrs.get("global_symbol", "<prim_func>"), func_or_mod)]
    else:
        raise TypeError(f"verify takes a PrimFunc or an IRModule, got {type(func_or_mod).__name__}")
    problems: List[str] = []
    for fname, f in funcs:
        problems.extend(_Verifier(fname).run(f))
    if problems:
        raise VerifyError(problems)


class _Scope:
    """What is visible at a point: variables and buffers (by identity)."""
    __slots__ = ("vars", "buffers", "block")

    def __init__(self, vars_: frozenset, buffers: frozenset, block: Optional[str]):
        self.vars, self.buffers, self.block = vars_, buffers, block


class _Verifier:
    def __init__(self, fname: str):
        self.fname = fname
        self.problems: List[str] = []
        self.seen: set = set()
        self.bound: dict = {}          # id(var) -> what binds it ("loop", "block 'B'")
        self.loop_vars: set = set()    # ids of every loop variable, for clearer messages
        self.allocated: set = set()
        self.block_names: set = set()
        self.global_vars: frozenset = frozenset()

    def error(self, scope: Optional[_Scope], msg: str) -> None:
        where = f"function '{self.fname}'" + (f", block '{scope.block}'" if scope and scope.block else "")
        text = f"{where}: {msg}"
        if text not in self.seen:  # one report per problem, even if it recurs
            self.seen.add(text)
            self.problems.append(text)

    def run(self, func: PrimFunc) -> List[str]:
        gvars, bufs = set(), set()
        for p in func.params:
            if isinstance(p, Buffer):
                if id(p) in bufs:
                    self.error(None, f"buffer '{p.name}' is a parameter twice")
                bufs.add(id(p))
                for s in p.shape:
                    pre_order_visit(s, lambda n: gvars.add(id(n)) if isinstance(n, Var) else None)
            elif isinstance(p, Var):
                gvars.add(id(p))
            else:
                self.error(None, f"parameter {p!r} is neither a Buffer nor a Var")
        self.global_vars = frozenset(gvars)
        self.allocated = set(bufs)
        # Loop variables are collected first so an escaped one gets a precise message.
        pre_order_visit(func.body, lambda n: self.loop_vars.add(id(n.loop_var)) if isinstance(n, For) else None)
        self.stmt(func.body, _Scope(self.global_vars, frozenset(bufs), None))
        return self.problems

    # ---- binding ----
    def bind(self, var, scope: _Scope, what: str) -> None:
        if not isinstance(var, Var):
            self.error(scope, f"{what} binds {var!r}, which is not a variable")
            return
        if id(var) in self.global_vars:
            self.error(scope, f"variable '{var.name}' is a function-level variable and is bound "
                       f"again by {what}")
        elif id(var) in self.bound:
            self.error(scope, f"variable '{var.name}' is bound twice: by {self.bound[id(var)]} and by {what}")
        else:
            self.bound[id(var)] = what
        if not dt.is_int(var.dtype):
            self.error(scope, f"variable '{var.name}' bound by {what} has dtype {var.dtype}, not an integer")

    # ---- statements ----
    def stmt(self, s: Stmt, scope: _Scope) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x, scope)
        elif isinstance(s, For):
            for label, e in (("start", s.min), ("extent", s.extent)):
                self.expr(e, scope)
                if not dt.is_int(e.dtype):
                    self.error(scope, f"loop '{s.loop_var.name}': its {label} has dtype {e.dtype}, not an integer")
            self.bind(s.loop_var, scope, f"loop '{s.loop_var.name}'")
            self.stmt(s.body, _Scope(scope.vars | {id(s.loop_var)}, scope.buffers, scope.block))
        elif isinstance(s, BlockRealize):
            self.realize(s, scope)
        elif isinstance(s, Block):
            self.block(s, scope)
        elif isinstance(s, BufferStore):
            self.access(s.buffer, s.indices, scope, "store to")
            self.expr(s.value, scope)
            if s.value.dtype != s.buffer.dtype:
                self.error(scope, f"store to '{s.buffer.name}' (dtype {s.buffer.dtype}) of a value of "
                           f"dtype {s.value.dtype}")
        elif isinstance(s, IfThenElse):
            self.condition(s.condition, scope, "if condition")
            self.stmt(s.then_case, scope)
            if s.else_case is not None:
                self.stmt(s.else_case, scope)
        elif isinstance(s, Evaluate):
            self.expr(s.value, scope)
        else:
            self.error(scope, f"unknown statement {type(s).__name__}")

    def realize(self, r: BlockRealize, scope: _Scope) -> None:
        block = r.block
        inner = _Scope(scope.vars, scope.buffers, block.name_hint)
        if len(r.iter_values) != len(block.iter_vars):
            self.error(inner, f"the block has {len(block.iter_vars)} iterators but "
                       f"{len(r.iter_values)} bindings")
        for iv, value in zip(block.iter_vars, r.iter_values):
            self.expr(value, scope, inner)
            if not dt.is_int(value.dtype):
                self.error(inner, f"iterator '{iv.var.name}' is bound to a value of dtype {value.dtype}")
        self.condition(r.predicate, scope, "predicate (T.where)", inner)
        self.block(block, scope)

    def block(self, b: Block, scope: _Scope) -> None:
        me = _Scope(scope.vars, scope.buffers, b.name_hint)
        if b.name_hint in self.block_names:
            self.error(me, "another block of this function has the same name")
        self.block_names.add(b.name_hint)
        for iv in b.iter_vars:
            self.expr(iv.dom.min, scope, me)
            self.expr(iv.dom.extent, scope, me)
            self.bind(iv.var, me, f"block '{b.name_hint}'")
        allocs = set()
        for buf in b.alloc_buffers:
            if id(buf) in self.allocated:
                self.error(me, f"buffer '{buf.name}' is allocated here but is already a parameter or "
                           "allocated elsewhere")
            self.allocated.add(id(buf))
            allocs.add(id(buf))
            for s in buf.shape:
                self.expr(s, _Scope(self.global_vars, scope.buffers, b.name_hint))
        # A block is isolated: inside it, only function-level variables and its own iterators.
        inner = _Scope(self.global_vars | {id(iv.var) for iv in b.iter_vars},
                       scope.buffers | allocs, b.name_hint)
        for label, regions in (("reads", b.reads), ("writes", b.writes)):
            for br in regions:
                self.region(br, inner, label)
        if b.init is not None:
            self.stmt(b.init, inner)
        self.stmt(b.body, inner)

    def region(self, br: BufferRegion, scope: _Scope, label: str) -> None:
        buf = br.buffer
        if id(buf) not in scope.buffers:
            self.error(scope, f"{label} region names buffer '{buf.name}', which is neither a parameter "
                       "nor allocated by an enclosing block")
        if len(br.region) != buf.ndim:
            self.error(scope, f"{label} region of '{buf.name}' has {len(br.region)} ranges but the "
                       f"buffer has {buf.ndim} dimensions")
        for r in br.region:
            self.expr(r.min, scope)
            self.expr(r.extent, scope)

    # ---- expressions ----
    def condition(self, e: PrimExpr, scope: _Scope, label: str, report: Optional[_Scope] = None) -> None:
        self.expr(e, scope, report)
        if not dt.is_bool(e.dtype):
            self.error(report or scope, f"{label} has dtype {e.dtype}, not bool")

    def access(self, buf: Buffer, indices, scope: _Scope, what: str, report=None) -> None:
        report = report or scope
        if id(buf) not in scope.buffers:
            self.error(report, f"{what} buffer '{buf.name}', which is neither a parameter nor "
                       "allocated by an enclosing block")
        if len(indices) != buf.ndim:
            self.error(report, f"{what} '{buf.name}' with {len(indices)} indices; the buffer has "
                       f"{buf.ndim} dimensions")
        for i in indices:
            self.expr(i, scope, report)
            if not dt.is_int(i.dtype):
                self.error(report, f"{what} '{buf.name}' with an index of dtype {i.dtype}")

    def expr(self, e: PrimExpr, scope: _Scope, report: Optional[_Scope] = None) -> None:
        report = report or scope

        def fn(n):
            if isinstance(n, Var):
                if id(n) not in scope.vars:
                    self.undefined(n, report)
            elif isinstance(n, BufferLoad):
                self.access(n.buffer, n.indices, scope, "load from", report)
                return False
            elif isinstance(n, BinaryOp) and n.a.dtype != n.b.dtype:
                self.error(report, f"operands of {type(n).__name__} have different dtypes "
                           f"{n.a.dtype} and {n.b.dtype}")
            elif isinstance(n, Select):
                if not dt.is_bool(n.condition.dtype):
                    self.error(report, f"Select condition has dtype {n.condition.dtype}, not bool")
                if n.true_value.dtype != n.false_value.dtype:
                    self.error(report, f"Select branches have different dtypes {n.true_value.dtype} "
                               f"and {n.false_value.dtype}")
            return None
        pre_order_visit(e, fn)

    def undefined(self, v: Var, scope: _Scope) -> None:
        if id(v) in self.loop_vars and scope.block:
            self.error(scope, f"variable '{v.name}' is used in the block but defined outside it (by "
                       "a loop); a block may use only its own iterators (bind loop variables to "
                       "iterators with T.axis, in the block's bindings)")
        elif id(v) in self.bound:
            self.error(scope, f"variable '{v.name}' (bound by {self.bound[id(v)]}) is used outside "
                       "its scope")
        else:
            self.error(scope, f"variable '{v.name}' is not defined (not a parameter, a symbolic size "
                       "of a parameter's shape, a loop variable or a block iterator in scope)")
