"""The script printer: any IR node as TVMScript-like Python text.

Functions and modules print in the syntax ``kiln.script.parse`` reads back to a structurally
equal node (the round trip every test relies on); lone expressions and statements print the
same way, for reading. Conventions (see ``tests/script`` for every form):

- constants carry their dtype unless it is the default: ``1`` (int32), ``T.int64(1)``,
  ``T.float32(0.5)``, ``True``; ``//`` and ``%`` are floor division and modulo;
  ``and``/``or``/``not`` on booleans; minimal parentheses by Python's precedence.
- a node whose dtype the operator syntax would not reproduce prints in constructor form,
  ``T.Add(a, b)``, so that even ill-typed IR round-trips as it is.
- names are made unique among the names visible at each point (``i``, ``i_1``), so variables and
  buffers that share a name print unambiguously; undefined (free) variables of a function are
  declared at its top, ``n = T.int32()``, as the symbolic sizes of its buffers are.
- the root block of a PrimFunc is implicit: its scratch buffers print at the function's top.

Other function kinds (graph functions) register their printer with ``register_function_printer``.
"""
from __future__ import annotations

import keyword
import math
import re
from typing import Callable, Dict, List

from . import dtype as dt
from .analysis import expr_equal
from .expr import (Add, And, Buffer, BufferLoad, Call, Cast, Div, EQ, FloatImm, FloorDiv, FloorMod,
                   GE, GT, IntImm, LE, LT, Max, Min, Mul, NE, Node, Not, Or, PrimExpr, Range,
                   Select, Sub, Var, is_const_int)
from .function import IRModule, PrimFunc
from .stmt import (Block, BlockRealize, BufferRegion, BufferStore, Evaluate, For, IfThenElse,
                   IterVar, SeqStmt)

INDENT = "    "
# Python precedence levels (higher binds tighter).
_OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY, _ATOM = 1, 2, 3, 4, 9, 10, 11, 13
_BINARY = {Add: ("+", _ADD), Sub: ("-", _ADD), Mul: ("*", _MUL), Div: ("/", _MUL),
           FloorDiv: ("//", _MUL), FloorMod: ("%", _MUL), EQ: ("==", _CMP), NE: ("!=", _CMP),
           LT: ("<", _CMP), LE: ("<=", _CMP), GT: (">", _CMP), GE: (">=", _CMP),
           And: ("and", _AND), Or: ("or", _OR)}
_LOOP_FUNCS = {"serial": "T.serial", "parallel": "T.parallel", "vectorized": "T.vectorized",
               "unrolled": "T.unroll", "thread_binding": "T.thread_binding"}
# Names a printed variable does not take: keywords, and names that would read as script syntax.
RESERVED = frozenset(keyword.kwlist) | {"T", "R", "kiln", "range", "min", "max", "float"}


def to_text(node) -> str:
    """The script text of ``node`` (any expression, statement, Buffer, Range, IterVar,
    BufferRegion, PrimFunc or IRModule)."""
    p = _Printer()
    if isinstance(node, IRModule):
        return "\n".join(module_lines(node))
    if isinstance(node, PrimFunc):
        name = dict(node.attrs).get("global_symbol", "main")
        return "\n".join(["# from kiln.script import T", ""] + p.prim_func(node, str(name)))
    if isinstance(node, PrimExpr):
        return p.expr(node)
    if isinstance(node, (SeqStmt, For, BufferStore, IfThenElse, Evaluate, BlockRealize, Block)):
        p.stmt(node, 0)
        return "\n".join(p.lines)
    if isinstance(node, Buffer):
        return f"{p.use(node)}: {p.buffer_type(node)}"
    if isinstance(node, Range):
        return f"Range(min={p.expr(node.min)}, extent={p.expr(node.extent)})"
    if isinstance(node, IterVar):
        return f"{p.use(node.var)} = T.axis.{node.kind}({p.dom(node.dom)})"
    if isinstance(node, BufferRegion):
        return p.region(node)
    for cls, fn in _NODE_PRINTERS.items():  # other IR kinds (graph functions, their exprs)
        if isinstance(node, cls):
            return fn(node)
    raise TypeError(f"the printer does not know {type(node).__name__} nodes")


# ---- modules and function kinds --------------------------------------------------------------
_FUNCTION_PRINTERS: Dict[type, Callable[[Node, str], List[str]]] = {}
_NAMESPACES: Dict[type, str] = {}                       # function kind -> script namespace it uses
_NODE_PRINTERS: Dict[type, Callable[[Node], str]] = {}  # to_text of other node kinds


def register_function_printer(cls: type, fn: Callable[[Node, str], List[str]],
                              namespace: str = "T") -> None:
    """Teach the module printer a function kind: ``fn(func, name)`` returns its lines
    (decorator first, unindented); the parser side is ``kiln.script.register_function_kind``.
    ``namespace`` is named in the module's ``# from kiln.script import ...`` header."""
    _FUNCTION_PRINTERS[cls] = fn
    _NAMESPACES[cls] = namespace


def register_node_printer(cls: type, fn: Callable[[Node], str]) -> None:
    """Teach ``to_text`` (and so ``repr``) a node kind this module does not know."""
    _NODE_PRINTERS[cls] = fn


register_function_printer(PrimFunc, lambda f, name: _Printer().prim_func(f, name))


def module_lines(mod: IRModule) -> List[str]:
    used = {ns for cls, ns in _NAMESPACES.items() for f in mod.functions.values() if isinstance(f, cls)}
    header = ", ".join(["T"] + sorted(used - {"T"}))
    lines = [f"# from kiln.script import {header}", "", "@kiln.script.ir_module", "class Module:"]
    if mod.attrs:
        lines.append(INDENT + f"kiln.script.module_attrs({_Printer().literal(dict(mod.attrs))})")
    for k, (name, func) in enumerate(mod.functions.items()):
        printer = next((fn for cls, fn in _FUNCTION_PRINTERS.items() if isinstance(func, cls)), None)
        if printer is None:
            raise TypeError(f"the printer does not know functions of kind {type(func).__name__}")
        if k or mod.attrs:
            lines.append("")
        lines.extend(INDENT + ln if ln else ln for ln in printer(func, name))
    if len(lines) == 4:
        lines.append(INDENT + "pass")
    return lines


def quote(s: str) -> str:
    """A Python string literal for ``s``, with double quotes when that is easy."""
    return f'"{s}"' if re.fullmatch(r'[^"\\\x00-\x1f\x7f]*', s) else repr(s)


def _float_text(v) -> str:
    v = float(v)
    if math.isnan(v):
        return '"nan"'
    if math.isinf(v):
        return '"inf"' if v > 0 else '"-inf"'
    if v == 0 and math.copysign(1.0, v) < 0:
        return "-0.0"
    if v.is_integer() and abs(v) < 1e16:
        return str(int(v))
    return repr(v)


def _default_dtype(e: PrimExpr):
    """The dtype the parser gives ``e`` from its operands (its own dtype for leaves)."""
    if isinstance(e, (EQ, NE, LT, LE, GT, GE)):
        return dt.with_lanes("bool", dt.lanes(e.a.dtype))
    if isinstance(e, (Add, Sub, Mul, Div, FloorDiv, FloorMod, Min, Max, And, Or)):
        return e.a.dtype
    if isinstance(e, Select):
        return e.true_value.dtype
    if isinstance(e, Call):
        return e.args[0].dtype
    return e.dtype


class _Printer:
    def __init__(self):
        self.names: Dict[int, str] = {}          # id(Var or Buffer) -> printed name
        self.scopes: List[Dict[str, int]] = [{}]  # visible names, innermost last
        self.free: List[Var] = []                 # variables used before any definition
        self.loops: Dict[int, For] = {}           # enclosing loops by id(loop var), for remap
        self.lines: List[str] = []

    # ---- names ---------------------------------------------------------------------------
    def define(self, node, scope: int = -1) -> str:
        """Give ``node`` a name that no visible name shadows or is shadowed by, in ``scope``."""
        base = re.sub(r"\W", "_", node.name or "") or ("v" if isinstance(node, Var) else "buf")
        if base[0].isdigit():
            base = "_" + base
        if base in RESERVED:
            base += "_1"
        name, k = base, 0
        while any(name in s for s in self.scopes):
            k += 1
            name = f"{base}_{k}"
        self.scopes[scope][name] = id(node)
        self.names[id(node)] = name
        return name

    def use(self, node) -> str:
        name = self.names.get(id(node))
        if name is None:  # free: named at the outermost scope (prim_func declares it there)
            name = self.define(node, 0)
            if isinstance(node, Var):
                self.free.append(node)
        return name

    def push(self) -> None:
        self.scopes.append({})

    def pop(self) -> None:
        for ident in self.scopes.pop().values():
            self.names.pop(ident, None)

    # ---- expressions ---------------------------------------------------------------------
    def expr(self, e) -> str:
        return self._expr(e)[0]

    def _expr(self, e):
        """``(text, precedence)`` of an expression."""
        if isinstance(e, Var):
            return self.use(e), _ATOM
        if isinstance(e, IntImm):
            if dt.is_bool(e.dtype):
                return ("True" if e.value else "False"), _ATOM
            if e.dtype == "int32":
                return str(e.value), (_ATOM if e.value >= 0 else _UNARY)
            return f"T.{e.dtype}({e.value})", _ATOM
        if isinstance(e, FloatImm):
            return f"T.{e.dtype}({_float_text(e.value)})", _ATOM
        if isinstance(e, BufferLoad):
            return f"{self.use(e.buffer)}[{self.indices(e.indices)}]", _ATOM
        generic = _default_dtype(e) != e.dtype
        if type(e) in _BINARY:
            if generic or e.a.dtype != e.b.dtype:
                return self.call(f"T.{type(e).__name__}", [e.a, e.b], e, generic), _ATOM
            op, prec = _BINARY[type(e)]
            a, pa = self._expr(e.a)
            b, pb = self._expr(e.b)
            # Left-associative; comparisons do not chain, so parenthesise them on both sides.
            if pa < prec or (prec == _CMP and pa == _CMP):
                a = f"({a})"
            if pb <= prec:
                b = f"({b})"
            return f"{a} {op} {b}", prec
        if isinstance(e, (Min, Max)):
            name = type(e).__name__
            if generic or e.a.dtype != e.b.dtype:
                return self.call(f"T.{name}", [e.a, e.b], e, generic), _ATOM
            return self.call(f"T.{name.lower()}", [e.a, e.b], e, False), _ATOM
        if isinstance(e, Not):
            a, pa = self._expr(e.a)
            return f"not {a if pa >= _NOT else f'({a})'}", _NOT
        if isinstance(e, Select):
            return self.call("T.Select", [e.condition, e.true_value, e.false_value], e, generic), _ATOM
        if isinstance(e, Cast):
            return f"T.Cast({quote(e.dtype)}, {self.expr(e.value)})", _ATOM
        if isinstance(e, Call):
            return self.call(f"T.{e.op}", list(e.args), e, generic), _ATOM
        raise TypeError(f"the printer does not know expression {type(e).__name__}")

    def call(self, fn: str, args, e, with_dtype: bool) -> str:
        # T.Select and two-operand intrinsics give a literal the other operand's type; when the
        # operands' types differ, constants must say their type to come back as they are.
        pair = args[-2:] if isinstance(e, Select) or len(args) == 2 else []
        typed = len(pair) == 2 and pair[0].dtype != pair[1].dtype
        parts = [self.literal(a) if typed and isinstance(a, IntImm) and any(a is p for p in pair)
                 else self.expr(a)
                 for a in args]
        if with_dtype:
            parts.append(f"dtype={quote(e.dtype)}")
        return f"{fn}({', '.join(parts)})"

    def indices(self, idx) -> str:
        return ", ".join(self.expr(i) for i in idx) if idx else "()"

    def literal(self, v) -> str:
        """Annotation and attribute values: Python literals, or expressions with typed constants."""
        if isinstance(v, IntImm) and not dt.is_bool(v.dtype) and v.dtype == "int32":
            return f"T.int32({v.value})"
        if isinstance(v, IntImm) and dt.is_bool(v.dtype):
            return f"T.bool({bool(v.value)})"
        if isinstance(v, PrimExpr):
            return self.expr(v)
        if isinstance(v, Buffer):
            return self.use(v)
        if isinstance(v, str):
            return quote(v)
        if isinstance(v, float) and not math.isfinite(v):
            return f"float({_float_text(v)})"
        if isinstance(v, (tuple, list)):
            items = ", ".join(self.literal(x) for x in v)
            if isinstance(v, list):
                return f"[{items}]"
            return f"({items},)" if len(v) == 1 else f"({items})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.literal(k)}: {self.literal(x)}" for k, x in v.items()) + "}"
        return repr(v)

    def stop(self, lo: PrimExpr, extent: PrimExpr) -> str:
        """The end of ``[lo, lo + extent)`` as the parser reads it back (``_min_extent``)."""
        if isinstance(lo, IntImm) and isinstance(extent, IntImm) and lo.dtype == extent.dtype:
            return self.expr(IntImm(lo.value + extent.value, lo.dtype))
        if is_const_int(lo, 0) and lo.dtype == extent.dtype:
            return self.expr(extent)
        return self.expr(Add(lo, extent))

    def range_args(self, lo: PrimExpr, extent: PrimExpr) -> str:
        if is_const_int(lo, 0) and lo.dtype == extent.dtype:
            return self.expr(extent)
        return f"{self.expr(lo)}, {self.stop(lo, extent)}"

    def dom(self, r: Range) -> str:
        if is_const_int(r.min, 0) and r.min.dtype == r.extent.dtype:
            return self.expr(r.extent)
        return f"({self.expr(r.min)}, {self.stop(r.min, r.extent)})"

    def region(self, br: BufferRegion) -> str:
        parts = []
        for r in br.region:
            if is_const_int(r.extent, 1) and r.extent.dtype == r.min.dtype:
                parts.append(self.expr(r.min))
            else:
                parts.append(f"{self.expr(r.min)}:{self.stop(r.min, r.extent)}")
        return f"{self.use(br.buffer)}[{', '.join(parts) if parts else '()'}]"

    def shape(self, shape) -> str:
        items = [self.expr(s) for s in shape]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"

    def buffer_type(self, b: Buffer, fn: str = "T.Buffer") -> str:
        scope = "" if b.scope == "global" else f", scope={quote(b.scope)}"
        return f"{fn}({self.shape(b.shape)}, {quote(b.dtype)}{scope})"

    # ---- statements ----------------------------------------------------------------------
    def line(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def body(self, s, depth: int) -> None:
        """A nested body in its own scope (loop, if, init)."""
        self.push()
        self.stmt(s, depth)
        self.pop()

    def stmt(self, s, d: int) -> None:
        if isinstance(s, SeqStmt):
            if not s.seq:
                self.line(d, "pass")
            for x in s.seq:
                self.stmt(x, d)
        elif isinstance(s, BufferStore):
            self.line(d, f"{self.use(s.buffer)}[{self.indices(s.indices)}] = {self.expr(s.value)}")
        elif isinstance(s, For):
            self.loop(s, d)
        elif isinstance(s, BlockRealize):
            self.block(s.block, d, s)
        elif isinstance(s, Block):
            self.block(s, d, None)
        elif isinstance(s, IfThenElse):
            self.line(d, f"if {self.expr(s.condition)}:")
            self.body(s.then_case, d + 1)
            while isinstance(s.else_case, IfThenElse):
                s = s.else_case
                self.line(d, f"elif {self.expr(s.condition)}:")
                self.body(s.then_case, d + 1)
            if s.else_case is not None:
                self.line(d, "else:")
                self.body(s.else_case, d + 1)
        elif isinstance(s, Evaluate):
            self.line(d, f"T.evaluate({self.expr(s.value)})")
        else:
            raise TypeError(f"the printer does not know statement {type(s).__name__}")

    @staticmethod
    def _plain(f: For) -> bool:
        """A loop that prints as ``range(extent)`` and may join a ``T.grid``."""
        return (f.kind == "serial" and not f.annotations and is_const_int(f.min, 0)
                and f.min.dtype == f.extent.dtype == f.loop_var.dtype)

    def loop(self, f: For, d: int) -> None:
        nest = [f]
        while self._plain(nest[-1]) and isinstance(nest[-1].body, For) and self._plain(nest[-1].body):
            inner = nest[-1].body
            # T.grid evaluates every extent before binding any loop variable.
            from .functor import uses_var
            if any(uses_var(inner.extent, o.loop_var) for o in nest):
                break
            nest.append(inner)
        if len(nest) > 1:
            extents = ", ".join(self.expr(x.extent) for x in nest)
            self.push()
            names = ", ".join(self.define(x.loop_var) for x in nest)
            self.line(d, f"for {names} in T.grid({extents}):")
        else:
            args = self.range_args(f.min, f.extent)
            if self._plain(f):
                head = f"range({args})"
            else:
                kw = []
                if f.thread_binding is not None:
                    kw.append(f"thread={quote(f.thread_binding)}")
                if f.annotations:
                    kw.append(f"annotations={self.literal(dict(f.annotations))}")
                if f.loop_var.dtype != f.extent.dtype:
                    kw.append(f"dtype={quote(f.loop_var.dtype)}")
                head = f"{_LOOP_FUNCS[f.kind]}({', '.join([args] + kw)})"
            self.push()
            self.line(d, f"for {self.define(f.loop_var)} in {head}:")
        for x in nest:
            self.loops[id(x.loop_var)] = x
        self.stmt(nest[-1].body, d + 1)
        for x in nest:
            del self.loops[id(x.loop_var)]
        self.pop()

    def _remap(self, block: Block, values) -> bool:
        if len(block.iter_vars) < 2:  # one iterator reads better as T.axis.spatial(n, i)
            return False
        for iv, v in zip(block.iter_vars, values):
            loop = self.loops.get(id(v)) if isinstance(v, Var) else None
            if (loop is None or not expr_equal(iv.dom.min, loop.min)
                    or not expr_equal(iv.dom.extent, loop.extent) or iv.var.dtype != loop.extent.dtype):
                return False
        return True

    def block(self, b: Block, d: int, realize) -> None:
        self.line(d, f"with T.block({quote(b.name_hint)}):")
        d += 1
        values = [self.expr(v) for v in realize.iter_values] if realize is not None else None
        remap = realize is not None and self._remap(b, realize.iter_values)
        self.push()
        names = [self.define(iv.var) for iv in b.iter_vars]
        if remap:
            kinds = "".join("S" if iv.kind == "spatial" else "R" for iv in b.iter_vars)
            self.line(d, f"{', '.join(names)} = T.axis.remap({quote(kinds)}, [{', '.join(values)}])")
        else:
            for k, (iv, name) in enumerate(zip(b.iter_vars, names)):
                args = [self.dom(iv.dom)] + ([] if values is None else [values[k]])
                if iv.var.dtype != iv.dom.extent.dtype:
                    args.append(f"dtype={quote(iv.var.dtype)}")
                self.line(d, f"{name} = T.axis.{iv.kind}({', '.join(args)})")
        allocs = [(self.buffer_type(buf, "T.alloc_buffer"), self.define(buf)) for buf in b.alloc_buffers]
        if realize is not None and not (is_const_int(realize.predicate, 1)
                                        and realize.predicate.dtype == "bool"):
            self.line(d, f"T.where({self.expr(realize.predicate)})")
        self.line(d, f"T.reads({', '.join(self.region(r) for r in b.reads)})")
        self.line(d, f"T.writes({', '.join(self.region(r) for r in b.writes)})")
        if b.annotations:
            self.line(d, f"T.block_attr({self.literal(dict(b.annotations))})")
        for text, name in allocs:
            self.line(d, f"{name} = {text}")
        if b.init is not None:
            self.line(d, "with T.init():")
            self.body(b.init, d + 1)
        self.stmt(b.body, d)
        self.pop()

    # ---- functions -----------------------------------------------------------------------
    def prim_func(self, f: PrimFunc, name: str) -> List[str]:
        """Lines of ``@T.prim_func def name(...)``, decorator first."""
        root = f.body.block if isinstance(f.body, BlockRealize) else None
        implicit = (root is not None and root.name_hint == "root" and not f.body.iter_values
                    and is_const_int(f.body.predicate, 1) and f.body.predicate.dtype == "bool"
                    and not root.iter_vars and not root.reads and not root.writes
                    and root.init is None and not root.annotations
                    and not (isinstance(root.body, BlockRealize)
                             and root.body.block.name_hint == "root"))
        has_root = root is not None and root.name_hint == "root"
        deco = []
        if not has_root:
            deco.append("root=False")
        pyname = name
        if not name.isidentifier() or keyword.iskeyword(name):
            pyname = re.sub(r"\W", "_", name).lstrip("0123456789") or "func"
            pyname += "_" if keyword.iskeyword(pyname) else ""
        if pyname != name:
            deco.append(f"name={quote(name)}")
        for p in f.params:
            self.define(p)
        params = [f"{self.use(p)}: {self.buffer_type(p)}" if isinstance(p, Buffer)
                  else f"{self.use(p)}: T.{p.dtype}" for p in f.params]
        allocs = []
        if implicit:
            allocs = [f"{self.define(b)} = {self.buffer_type(b, 'T.alloc_buffer')}"
                      for b in root.alloc_buffers]
            self.stmt(root.body, 1)
        else:
            self.stmt(f.body, 1)
        lines = [f"@T.prim_func({', '.join(deco)})" if deco else "@T.prim_func",
                 f"def {pyname}({', '.join(params)}):"]
        lines += [INDENT + f"{self.names[id(v)]} = T.{v.dtype}()" for v in self.free]
        if f.attrs:
            lines.append(INDENT + f"T.func_attr({self.literal(dict(f.attrs))})")
        lines += [INDENT + a for a in allocs]
        return lines + self.lines


from . import graph_printer  # noqa: E402,F401  (registers graph functions; needs the names above)
