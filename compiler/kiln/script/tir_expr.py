"""Names and expressions of tensor-program script: the half of the ``@T.prim_func`` parser
that turns Python expressions into IR (``tir_parser`` adds statements, blocks and functions).

Literals stay Python values until context types them, as in Python expressions on IR:
``A[vi] + 1.0`` has ``A``'s dtype. Operators promote mixed operand types the way ``PrimExpr``
operators do; ``T.<name>(...)`` calls go to the builders in ``kiln.script.tir``, so script and
Python agree.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional

from ..ir import dtype as dt
from ..ir.analysis import expr_equal
from ..ir.expr import (Add, And, Buffer, BufferLoad, Div, EQ, FloorDiv, FloorMod, GE, GT, IntImm, LE,
                       LT, Mul, NE, Not, Or, PrimExpr, Range, Sub, _promote, convert)
from ..ir.stmt import BufferRegion
from . import tir
from .parser import ScriptError, Source, brief, dotted

LOOP_KINDS = {"range": "serial", "T.serial": "serial", "T.parallel": "parallel",
              "T.vectorized": "vectorized", "T.unroll": "unrolled", "T.thread_binding": "thread_binding"}
HEADER_CALLS = ("T.reads", "T.writes", "T.where", "T.block_attr")
BINOPS = {ast.Add: Add, ast.Sub: Sub, ast.Mult: Mul, ast.Div: Div, ast.FloorDiv: FloorDiv,
          ast.Mod: FloorMod, ast.BitAnd: And, ast.BitOr: Or}
_CMPOPS = {ast.Eq: EQ, ast.NotEq: NE, ast.Lt: LT, ast.LtE: LE, ast.Gt: GT, ast.GtE: GE}


class ExprParser:
    """Lexically scoped names and the expression language."""

    def __init__(self, src: Source):
        self.src = src
        self.scopes: List[Dict[str, object]] = [{}]

    # ---- helpers -------------------------------------------------------------------------
    def err(self, node, msg: str) -> ScriptError:
        return self.src.error(node, msg)

    def lookup(self, name: str, node):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise self.err(node, f"undefined name {name!r}")

    def bind(self, name: str, value, node) -> None:
        if name in self.scopes[-1]:
            raise self.err(node, f"{name!r} is already defined in this scope")
        self.scopes[-1][name] = value

    @staticmethod
    def callee(node) -> Optional[str]:
        return dotted(node.func) if isinstance(node, ast.Call) else None

    def args(self, call: ast.Call, lo: int, hi: int, kw=()) -> dict:
        """Check a call's arity and keyword names; return its keywords' AST by name."""
        fn = dotted(call.func)
        if not lo <= len(call.args) <= hi:
            want = f"{lo}" if lo == hi else f"{lo} to {hi}"
            raise self.err(call, f"{fn}(...) takes {want} positional arguments, got {len(call.args)}")
        kws = {}
        for k in call.keywords:
            if k.arg not in kw:
                raise self.err(k.value, f"{fn}(...) got an unexpected keyword {k.arg!r}"
                               + (f"; it takes {', '.join(kw)}" if kw else ""))
            kws[k.arg] = k.value
        return kws

    def const_str(self, node, what: str) -> str:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            raise self.err(node, f"expected {what} as a string literal, got {brief(node)}")
        return node.value

    def dtype(self, node) -> str:
        text = self.const_str(node, "a dtype")
        try:
            return dt.check(text)
        except ValueError as e:
            raise self.err(node, str(e)) from None

    def min_extent(self, start, stop):
        """``(min, extent)`` of ``[start, stop)``, undoing how the printer writes ``stop``."""
        start, stop = tir._pair(start, stop)
        if isinstance(start, IntImm) and isinstance(stop, IntImm) and start.dtype == stop.dtype:
            return start, IntImm(stop.value - start.value, start.dtype)
        if isinstance(start, IntImm) and start.value == 0 and start.dtype == stop.dtype:
            return start, stop
        if isinstance(stop, Add) and expr_equal(stop.a, start):
            return start, stop.b
        return start, Sub(*_promote(stop, start))

    def regions(self, call: ast.Call) -> tuple:
        items = []
        for a in call.args:
            items.extend(a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a])
        return tuple(self.region(a) for a in items)

    def region(self, node) -> BufferRegion:
        if isinstance(node, ast.Subscript):
            buf = self.expr(node.value)
            if isinstance(buf, Buffer):
                elts = self.index_nodes(node)
                self.check_ndim(buf, elts, node)
                out = []
                for d, e in enumerate(elts):
                    if isinstance(e, ast.Slice):
                        if e.step is not None:
                            raise self.err(e, "a region slice has no step")
                        start = self.expr(e.lower) if e.lower is not None else 0
                        stop = self.expr(e.upper) if e.upper is not None else buf.shape[d]
                        out.append(Range(*self.min_extent(start, stop)))
                    else:
                        i = self.index(e)
                        out.append(Range(i, IntImm(1, i.dtype)))
                return BufferRegion(buf, tuple(out))
        elif isinstance(node, ast.Name) and isinstance(self.lookup(node.id, node), Buffer):
            return BufferRegion.full(self.lookup(node.id, node))
        raise self.err(node, f"expected a buffer region such as A[vi, 0:16], got {brief(node)}")

    # ---- expressions ---------------------------------------------------------------------
    @staticmethod
    def index_nodes(node: ast.Subscript) -> list:
        s = node.slice
        return list(s.elts) if isinstance(s, ast.Tuple) else [s]

    def check_ndim(self, buf: Buffer, elts, node) -> None:
        if len(elts) != buf.ndim:
            raise self.err(node, f"buffer {buf.name!r} has {buf.ndim} dimension(s), "
                           f"got {len(elts)} index(es)")

    def indices(self, buf: Buffer, node: ast.Subscript) -> tuple:
        elts = self.index_nodes(node)
        self.check_ndim(buf, elts, node)
        for e in elts:
            if isinstance(e, ast.Slice):
                raise self.err(e, "slices are only allowed in T.reads/T.writes regions")
        return tuple(self.index(e) for e in elts)

    def index(self, node) -> PrimExpr:
        e = self.prim(node)
        if not dt.is_int(e.dtype):
            raise self.err(node, f"expected an integer expression, got {brief(node)} of type {e.dtype}")
        return e

    def prim(self, node) -> PrimExpr:
        v = self.expr(node)
        if isinstance(v, Buffer):
            raise self.err(node, f"buffer {v.name!r} used as a value; index it: {brief(node)}[...]")
        if isinstance(v, str):
            raise self.err(node, f"expected an expression, got the string {v!r}")
        return convert(v)

    def literal(self, node):
        """Annotation values: Python literals (containers too), or expressions."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.literal(e) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise self.err(node, "** in a dict is not supported")
            return {self.literal(k): self.literal(v) for k, v in zip(node.keys, node.values)}
        return self.expr(node)

    def expr(self, node):
        """A Python value for literals (typed later by context), PrimExpr, Buffer or str."""
        try:
            return self._expr(node)
        except ScriptError:
            raise
        except (TypeError, ValueError, ZeroDivisionError) as e:
            raise self.err(node, str(e)) from None

    def _expr(self, node):
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float, str)):
                return node.value
            raise self.err(node, f"unsupported constant {brief(node)}")
        if isinstance(node, ast.Name):
            return self.lookup(node.id, node)
        if isinstance(node, ast.BinOp):
            cls = BINOPS.get(type(node.op))
            if cls is None:
                raise self.err(node, f"unsupported operator in {brief(node)} (use T.pow for powers)")
            return self.binop(cls, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand)
            if isinstance(node.op, ast.USub):
                if isinstance(v, bool) or not isinstance(v, (int, float, PrimExpr)):
                    raise self.err(node, f"unary minus needs a number, got {brief(node.operand)}")
                return -v
            if isinstance(node.op, ast.UAdd):
                return v
            return Not(self.boolean(v, node))  # not / ~
        if isinstance(node, ast.BoolOp):
            cls = And if isinstance(node.op, ast.And) else Or
            out = self.expr(node.values[0])
            for v in node.values[1:]:
                out = self.binop(cls, out, self.expr(v), node)
            return out
        if isinstance(node, ast.Compare):
            # a < b < c means a < b and b < c, as in Python.
            left, out = self.expr(node.left), None
            for op, comp in zip(node.ops, node.comparators):
                cls = _CMPOPS.get(type(op))
                if cls is None:
                    raise self.err(node, f"unsupported comparison in {brief(node)}")
                right = self.expr(comp)
                term = self.binop(cls, left, right, node)
                out = term if out is None else And(out, term)
                left = right
            return out
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Subscript):
            buf, idx = self.target(node)
            return BufferLoad(buf, idx)
        if isinstance(node, ast.IfExp):
            return tir.Select(self.prim(node.test), self.expr(node.body), self.expr(node.orelse))
        raise self.err(node, f"unsupported expression {brief(node)}")

    def boolean(self, v, node) -> PrimExpr:
        e = convert(v)
        if not dt.is_bool(e.dtype):
            raise self.err(node, f"expected a bool condition or operand, got {brief(node)} of type {e.dtype}")
        return e

    def binop(self, cls, a, b, node) -> PrimExpr:
        for v in (a, b):
            if isinstance(v, (Buffer, str)):
                raise self.err(node, f"{v.name if isinstance(v, Buffer) else repr(v)} cannot be an "
                               f"operand in {brief(node)}")
        a, b = _promote(a, b)
        if cls in (And, Or):
            self.boolean(a, node)
            self.boolean(b, node)
        if cls is Div and not dt.is_float(a.dtype):
            raise self.err(node, f"'/' on integers is ambiguous in {brief(node)}; use '//' (floor "
                           "division) or cast to float")
        return cls(a, b)

    def call(self, node: ast.Call):
        fn = dotted(node.func)
        if fn in ("min", "max"):
            fn = "T." + fn
        if fn == "float":  # float("inf") in annotation values
            self.args(node, 1, 1)
            return float(self.const_str(node.args[0], "a float spelling"))
        builder = tir.EXPR_FUNCS.get(fn[2:]) if fn and fn.startswith("T.") else None
        if builder is None:
            if fn in LOOP_KINDS or fn in ("T.grid", "T.block", "T.init", "T.alloc_buffer") \
                    or fn in HEADER_CALLS or (fn or "").startswith("T.axis"):
                raise self.err(node, f"{fn}(...) is a statement form, not an expression")
            raise self.err(node, f"unknown function {brief(node.func)}; expected an intrinsic "
                           "(T.exp, T.min, ...), T.Select, T.Cast or a typed constant (T.float32(1))")
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.err(node, "* and ** arguments are not supported")
        args = [self.expr(a) for a in node.args]
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
        for a in args:
            if isinstance(a, Buffer):
                raise self.err(node, f"buffer {a.name!r} used as a value; index it")
        return builder(*args, **kwargs)
