"""The ``@T.prim_func`` function kind: a Python function's AST interpreted as a tensor program.

Names are lexically scoped: a loop body, an if branch, a block and an init each open a scope;
a name may shadow an outer one but not be defined twice in one scope. Literals get their type
from context as in Python expressions on IR (``A[vi] + 1.0`` is float32 when ``A`` is), and
typed constants (``T.int64(3)``) say it outright. A block whose ``T.reads``/``T.writes`` are
left out gets them inferred from its body (``kiln.ir.analysis.infer_access_regions``).
"""
from __future__ import annotations

import ast
from typing import Dict, List

from ..ir import dtype as dt
from ..ir.analysis import infer_access_regions
from ..ir.expr import Buffer, BufferLoad, IntImm, PrimExpr, Range, Var, _literal_like
from ..ir.function import PrimFunc, root_realize
from ..ir.stmt import Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, IterVar, seq
from .parser import ModuleContext, ScriptError, Source, brief, dotted, register_function_kind
from .tir_expr import BINOPS, HEADER_CALLS, LOOP_KINDS, ExprParser

_AXES = {"T.axis.spatial": "spatial", "T.axis.reduce": "reduce"}


def parse_prim_func(ctx: ModuleContext, fdef: ast.FunctionDef, kwargs: dict) -> PrimFunc:
    """Parse one ``@T.prim_func`` function (decorator keyword ``root=False``: no root block)."""
    root = kwargs.pop("root", True)
    if kwargs:
        raise ctx.source.error(fdef, f"@T.prim_func got unknown arguments {sorted(kwargs)}; "
                               "it takes root= and name=")
    return _FuncParser(ctx.source).function(fdef, bool(root))


register_function_kind("T.prim_func", parse_prim_func)


class _BlockFrame:
    """What the header statements of one ``with T.block(...)`` declared."""

    def __init__(self):
        self.iter_vars: List[IterVar] = []
        self.values: List[PrimExpr] = []
        self.allocs: List[Buffer] = []
        self.header: Dict[str, ast.Call] = {}   # T.reads / T.writes / T.where / T.block_attr
        self.init = None
        self.has_init = False


class _FuncParser(ExprParser):
    """Statements, blocks and the function itself; names and expressions come from ExprParser."""

    def __init__(self, src: Source):
        super().__init__(src)
        self.loops: Dict[int, tuple] = {}   # id(loop var) -> (min, extent), for T.axis.remap

    def scoped(self, nodes, bindings=()):
        """Parse a nested body in a new scope, with ``bindings`` ((name, value, node)) in it."""
        self.scopes.append({})
        try:
            for name, value, node in bindings:
                self.bind(name, value, node)
            return seq(*self.stmts(nodes))
        finally:
            self.scopes.pop()

    def stmts(self, nodes) -> list:
        out = []
        for node in nodes:
            s = self.stmt(node)
            if s is not None:
                out.append(s)
        return out

    # ---- functions -----------------------------------------------------------------------
    @staticmethod
    def symbolic_decl(node):
        """``n = T.int32()``: (name, dtype), else None."""
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and not node.value.args and not node.value.keywords):
            fn = dotted(node.value.func) or ""
            if fn.startswith("T.") and fn[2:] in dt.SCALAR_DTYPES:
                return node.targets[0].id, fn[2:]
        return None

    def function(self, fdef: ast.FunctionDef, root: bool) -> PrimFunc:
        a = fdef.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.err(fdef, "a @T.prim_func takes plain parameters only (no defaults, *args, **kwargs)")
        body = list(fdef.body)
        params: List[object] = [None] * len(a.args)
        # Scalar parameters and declared sizes first: buffer shapes may use them.
        for k, arg in enumerate(a.args):
            fn = dotted(arg.annotation) if arg.annotation is not None else None
            if fn and fn.startswith("T.") and fn[2:] in dt.SCALAR_DTYPES:
                params[k] = Var(arg.arg, fn[2:])
                self.bind(arg.arg, params[k], arg)
        for node in body:
            decl = self.symbolic_decl(node)
            if decl:
                self.bind(decl[0], Var(decl[0], decl[1]), node)
        # `a: T.handle` parameters get their buffer from `A = T.match_buffer(a, ...)` in the body.
        handles = {arg.arg: k for k, arg in enumerate(a.args)
                   if arg.annotation is not None and dotted(arg.annotation) == "T.handle"}
        for k, arg in enumerate(a.args):
            if params[k] is None and arg.arg not in handles:
                ann = self.buffer_call(arg.annotation)
                if self.callee(ann) != "T.Buffer":
                    raise self.err(arg, f"parameter {arg.arg!r}: expected an annotation "
                                   f"T.Buffer(shape, dtype), T.handle or T.int32/T.int64, got "
                                   f"{brief(ann) if ann is not None else 'none'}")
                try:
                    params[k] = self.buffer(arg.arg, ann)
                except ScriptError as e:
                    if not e.message.startswith("undefined name"):
                        raise
                    raise self.err(arg, f"{e.message} in the shape of {arg.arg!r}; declare symbolic "
                                   "sizes at the top of the body: n = T.int32()") from None
                self.bind(arg.arg, params[k], arg)
        attrs, allocs, stmts = {}, [], []
        explicit_root = None
        # A lone `with T.block("root"):` is the root block itself, written out (the printer does
        # that when the root has annotations or regions).
        rest = [n for n in body if not self.symbolic_decl(n) and not self.is_func_attr(n)
                and not self.is_match_buffer(n)]
        lone_root = root and len(rest) == 1 and self.is_root_block(rest[0])
        for node in body:
            if self.symbolic_decl(node):
                continue
            call = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
            if self.is_match_buffer(node):
                k = self.match_buffer(node, handles, params)
                self.bind(node.targets[0].id, params[k], node)
            elif isinstance(node, ast.Expr) and self.callee(call) == "T.func_attr":
                self.args(call, 1, 1)
                if attrs:
                    raise self.err(node, "T.func_attr(...) is given twice")
                attrs = self.literal(call.args[0])
                if not isinstance(attrs, dict):
                    raise self.err(node, "T.func_attr takes a dict")
            elif isinstance(node, ast.Assign) and self.callee(call) == "T.alloc_buffer":
                if not root:
                    raise self.err(node, "T.alloc_buffer at the top of a function needs its root block "
                                   "(drop root=False, or allocate inside a block)")
                allocs.append(self.alloc(node))
            elif lone_root and node is rest[0]:
                explicit_root = self.block(node, is_root=True)
            else:
                s = self.stmt(node)
                if s is not None:
                    stmts.append(s)
        for name, k in handles.items():
            if params[k] is None:
                raise self.err(a.args[k], f"parameter {name!r} is a T.handle without a buffer: "
                               f"declare it at the top of the body, A = T.match_buffer({name}, shape, dtype)")
        if explicit_root is not None:
            func_body = explicit_root
        else:
            func_body = root_realize(seq(*stmts), allocs) if root else seq(*stmts)
        return PrimFunc(tuple(params), func_body, tuple(attrs.items()))

    def is_func_attr(self, node) -> bool:
        return isinstance(node, ast.Expr) and self.callee(node.value) == "T.func_attr"

    def is_root_block(self, node) -> bool:
        if not (isinstance(node, ast.With) and len(node.items) == 1):
            return False
        call = node.items[0].context_expr
        return (self.callee(call) == "T.block" and len(call.args) == 1
                and isinstance(call.args[0], ast.Constant) and call.args[0].value == "root")

    def is_match_buffer(self, node) -> bool:
        return isinstance(node, ast.Assign) and self.callee(node.value) == "T.match_buffer"

    def match_buffer(self, node: ast.Assign, handles: Dict[str, int], params: list) -> int:
        """``A = T.match_buffer(a, shape, dtype)`` for the ``T.handle`` parameter ``a``: the
        parameter becomes buffer ``A``. Returns the parameter's position."""
        call = node.value
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            raise self.err(node, "T.match_buffer(...) is assigned to one name: A = T.match_buffer(a, ...)")
        self.args(call, 2, 3, ("dtype", "scope"))
        h = call.args[0]
        if not isinstance(h, ast.Name) or h.id not in handles:
            names = ", ".join(handles) or "none"
            raise self.err(h, f"T.match_buffer's first argument is a T.handle parameter "
                           f"({names}), got {brief(h)}")
        k = handles[h.id]
        if params[k] is not None:
            raise self.err(node, f"parameter {h.id!r} is matched to a buffer twice")
        params[k] = self.buffer(node.targets[0].id, ast.Call(call.func, call.args[1:], call.keywords))
        return k

    def buffer_call(self, ann):
        """The old subscript spelling ``T.Buffer[shape, dtype]`` as the call ``T.Buffer(shape, dtype)``."""
        if isinstance(ann, ast.Subscript) and dotted(ann.value) == "T.Buffer":
            s = ann.slice
            args = list(s.elts) if isinstance(s, ast.Tuple) and len(s.elts) == 2 \
                and isinstance(s.elts[1], ast.Constant) and isinstance(s.elts[1].value, str) else [s]
            return ast.copy_location(ast.Call(ann.value, args, []), ann)
        return ann

    def buffer(self, name: str, call: ast.Call) -> Buffer:
        """``T.Buffer(shape, dtype, scope=...)`` or ``T.alloc_buffer(...)`` as a Buffer ``name``."""
        kws = self.args(call, 1, 2, ("dtype", "scope"))
        shape_node = call.args[0]
        elts = shape_node.elts if isinstance(shape_node, (ast.Tuple, ast.List)) else [shape_node]
        shape = tuple(self.index(e) for e in elts)
        dtype_node = call.args[1] if len(call.args) > 1 else kws.get("dtype")
        dtype = self.dtype(dtype_node) if dtype_node is not None else "float32"
        scope = self.const_str(kws["scope"], "a scope") if "scope" in kws else "global"
        return Buffer(name, shape, dtype, scope)

    def alloc(self, node: ast.Assign) -> Buffer:
        target = node.targets[0]
        if len(node.targets) != 1 or not isinstance(target, ast.Name):
            raise self.err(node, "T.alloc_buffer(...) is assigned to one name: X = T.alloc_buffer(...)")
        buf = self.buffer(target.id, node.value)
        self.bind(target.id, buf, node)
        return buf

    # ---- statements ----------------------------------------------------------------------
    def stmt(self, node):
        try:
            return self._stmt(node)
        except ScriptError:
            raise
        except (TypeError, ValueError) as e:
            raise self.err(node, str(e)) from None

    def _stmt(self, node):
        if isinstance(node, ast.For):
            return self.loop(node)
        if isinstance(node, ast.With):
            if len(node.items) != 1 or node.items[0].optional_vars is not None:
                raise self.err(node, 'expected with T.block("name"): (one item, no "as")')
            fn = self.callee(node.items[0].context_expr)
            if fn == "T.block":
                return self.block(node)
            if fn == "T.init":
                raise self.err(node, "with T.init(): must be directly inside a with T.block(...)")
            raise self.err(node, f'expected with T.block("name"):, got with {brief(node.items[0].context_expr)}')
        if isinstance(node, ast.If):
            cond = self.boolean(self.prim(node.test), node.test)
            then = self.scoped(node.body)
            other = self.scoped(node.orelse) if node.orelse else None
            return IfThenElse(cond, then, other)
        if isinstance(node, ast.Assign):
            return self.assign(node)
        if isinstance(node, ast.AugAssign):
            cls = BINOPS.get(type(node.op))
            if cls is None or not isinstance(node.target, ast.Subscript):
                raise self.err(node, f"expected a buffer update such as C[i] += x, got {brief(node)}")
            buf, idx = self.target(node.target)
            value = self.binop(cls, BufferLoad(buf, idx), self.expr(node.value), node)
            return BufferStore(buf, value, idx)
        if isinstance(node, ast.Expr):
            v = node.value
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                return None  # docstring
            fn = self.callee(v)
            if fn == "T.evaluate":
                self.args(v, 1, 1)
                return Evaluate(self.prim(v.args[0]))
            if fn in HEADER_CALLS:
                raise self.err(node, f"{fn}(...) must be directly inside a with T.block(...)")
            if fn == "T.func_attr":
                raise self.err(node, "T.func_attr(...) must be at the top of the function body")
            raise self.err(node, f"expected a statement, got the expression {brief(v)} "
                           "(wrap an expression statement in T.evaluate(...))")
        if isinstance(node, ast.Pass):
            return None
        raise self.err(node, f"unsupported statement {brief(node)}; expected a loop, "
                       "with T.block(...), if/else, a buffer store or T.evaluate(...)")

    def target(self, node: ast.Subscript):
        buf = self.expr(node.value)
        if not isinstance(buf, Buffer):
            raise self.err(node, f"{brief(node.value)} is not a buffer")
        return buf, self.indices(buf, node)

    def assign(self, node: ast.Assign):
        if len(node.targets) != 1:
            raise self.err(node, "chained assignment (a = b = ...) is not supported")
        target = node.targets[0]
        if isinstance(target, ast.Subscript):
            buf, idx = self.target(target)
            value = self.expr(node.value)
            if isinstance(value, Buffer):
                raise self.err(node.value, f"buffer {value.name!r} used as a value; index it")
            if not isinstance(value, PrimExpr):
                value = _literal_like(value, buf.dtype)
            return BufferStore(buf, value, idx)
        fn = self.callee(node.value) or ""
        if fn.startswith("T.axis."):
            raise self.err(node, f"{fn}(...) must be directly inside a with T.block(...)")
        if fn == "T.alloc_buffer":
            raise self.err(node, "T.alloc_buffer(...) belongs at the top of a block or of the function")
        if fn == "T.match_buffer":
            raise self.err(node, "T.match_buffer(...) belongs at the top of the function body")
        raise self.err(node, f"cannot assign to {brief(target)} here: expected a buffer store "
                       "B[i] = ...; scalar local variables are not supported (use a local buffer)")

    def loop(self, node: ast.For) -> For:
        if node.orelse:
            raise self.err(node, "for ... else is not supported")
        call, fn = node.iter, self.callee(node.iter)
        if fn == "T.grid":
            self.args(call, 1, 64)
            names = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
            if len(names) != len(call.args) or not all(isinstance(n, ast.Name) for n in names):
                raise self.err(node, f"T.grid with {len(call.args)} extents needs {len(call.args)} "
                               f"loop variable names, got {brief(node.target)}")
            extents = [self.index(a) for a in call.args]
            loops = [(Var(n.id, e.dtype), IntImm(0, e.dtype), e) for n, e in zip(names, extents)]
            for v, lo, e in loops:
                self.loops[id(v)] = (lo, e)
            body = self.scoped(node.body, [(n.id, v, n) for n, (v, _, _) in zip(names, loops)])
            for v, lo, e in reversed(loops):
                body = For(v, lo, e, "serial", body)
            return body
        kind = LOOP_KINDS.get(fn)
        if kind is None:
            raise self.err(node, "expected range(...), T.serial/parallel/vectorized/unroll/"
                           f"thread_binding(...) or T.grid(...) as the loop iterator, got {brief(call)}")
        if not isinstance(node.target, ast.Name):
            raise self.err(node, f"expected one loop variable name, got {brief(node.target)}")
        allowed = () if fn == "range" else ("annotations", "dtype") + (("thread",) if kind == "thread_binding" else ())
        kws = self.args(call, 1, 2, allowed)
        pos = list(call.args)
        if kind == "thread_binding" and "thread" not in kws:
            if len(pos) >= 2 and isinstance(pos[-1], ast.Constant) and isinstance(pos[-1].value, str):
                kws["thread"] = pos.pop()
            else:
                raise self.err(call, 'T.thread_binding needs thread="threadIdx.x" (or another axis)')
        if len(pos) == 1:
            extent = self.index(pos[0])
            lo = IntImm(0, extent.dtype)
        else:
            lo, extent = self.min_extent(self.expr(pos[0]), self.expr(pos[1]))
        thread = self.const_str(kws["thread"], "a thread axis") if "thread" in kws else None
        annotations = self.literal(kws["annotations"]) if "annotations" in kws else {}
        if not isinstance(annotations, dict):
            raise self.err(kws["annotations"], "annotations= takes a dict")
        var = Var(node.target.id, self.dtype(kws["dtype"]) if "dtype" in kws else extent.dtype)
        self.loops[id(var)] = (lo, extent)
        body = self.scoped(node.body, [(node.target.id, var, node.target)])
        return For(var, lo, extent, kind, body, thread, tuple(annotations.items()))

    # ---- blocks --------------------------------------------------------------------------
    def block(self, node: ast.With, is_root: bool = False) -> BlockRealize:
        call = node.items[0].context_expr
        self.args(call, 1, 1)
        name = self.const_str(call.args[0], "the block name")
        frame = _BlockFrame()
        self.scopes.append({})
        try:
            body = []
            for st in node.body:
                if not self.header(st, frame):
                    s = self.stmt(st)
                    if s is not None:
                        body.append(s)
            # Header calls are read last so they may name the block's own scratch buffers.
            h = frame.header
            pred = self.boolean(self.prim(h["T.where"].args[0]), h["T.where"]) if "T.where" in h \
                else IntImm(1, "bool")
            attrs = self.literal(h["T.block_attr"].args[0]) if "T.block_attr" in h else {}
            if not isinstance(attrs, dict):
                raise self.err(h["T.block_attr"], "T.block_attr takes a dict")
            reads = self.regions(h["T.reads"]) if "T.reads" in h else None
            writes = self.regions(h["T.writes"]) if "T.writes" in h else None
            block = Block(name, tuple(frame.iter_vars), (), (), seq(*body), frame.init,
                          tuple(frame.allocs), tuple(attrs.items()))
            if reads is None or writes is None:
                inferred = ((), ()) if is_root else infer_access_regions(block)
                reads = inferred[0] if reads is None else reads
                writes = inferred[1] if writes is None else writes
            block = Block(name, block.iter_vars, reads, writes, block.body, block.init,
                          block.alloc_buffers, block.annotations)
        finally:
            self.scopes.pop()
        return BlockRealize(tuple(frame.values), pred, block)

    def header(self, st, frame: _BlockFrame) -> bool:
        """Handle one block-header statement (iterators, T.reads, ..., T.init); False if ``st``
        belongs to the body."""
        if isinstance(st, ast.Expr) and self.callee(st.value) in HEADER_CALLS:
            fn = self.callee(st.value)
            if fn in frame.header:
                raise self.err(st, f"{fn}(...) is given twice in this block")
            self.args(st.value, 0 if fn in ("T.reads", "T.writes") else 1, 64 if fn in ("T.reads", "T.writes") else 1)
            frame.header[fn] = st.value
            return True
        if isinstance(st, ast.With) and len(st.items) == 1 and self.callee(st.items[0].context_expr) == "T.init":
            if frame.has_init:
                raise self.err(st, "with T.init(): is given twice in this block")
            self.args(st.items[0].context_expr, 0, 0)
            frame.init, frame.has_init = self.scoped(st.body), True
            return True
        if not isinstance(st, ast.Assign) or isinstance(st.targets[0], ast.Subscript):
            return False
        fn = self.callee(st.value)
        if len(st.targets) != 1:
            raise self.err(st, "chained assignment (a = b = ...) is not supported")
        if fn in _AXES:
            self.axis(st, _AXES[fn], frame)
        elif fn == "T.axis.remap":
            self.remap(st, frame)
        elif fn == "T.alloc_buffer":
            frame.allocs.append(self.alloc(st))
        else:
            got = brief(st.value)
            raise self.err(st, f"expected T.axis.spatial/reduce/remap or T.alloc_buffer, got {got}")
        return True

    def axis(self, st: ast.Assign, kind: str, frame: _BlockFrame) -> None:
        target, call = st.targets[0], st.value
        if not isinstance(target, ast.Name):
            raise self.err(st, f"T.axis.{kind} defines one name: vi = T.axis.{kind}(extent, value)")
        kws = self.args(call, 2, 2, ("dtype",))
        dom_node = call.args[0]
        if isinstance(dom_node, ast.Tuple):
            if len(dom_node.elts) != 2:
                raise self.err(dom_node, "an iterator domain is an extent or a (start, stop) pair")
            dom = Range(*self.min_extent(self.expr(dom_node.elts[0]), self.expr(dom_node.elts[1])))
        else:
            extent = self.index(dom_node)
            dom = Range(IntImm(0, extent.dtype), extent)
        value = self.index(call.args[1])
        var = Var(target.id, self.dtype(kws["dtype"]) if "dtype" in kws else dom.extent.dtype)
        self.bind(target.id, var, target)
        frame.iter_vars.append(IterVar(var, dom, kind))
        frame.values.append(value)

    def remap(self, st: ast.Assign, frame: _BlockFrame) -> None:
        target, call = st.targets[0], st.value
        self.args(call, 2, 2)
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        kinds = self.const_str(call.args[0], 'the iterator kinds ("S" spatial, "R" reduce)')
        loops = call.args[1].elts if isinstance(call.args[1], (ast.List, ast.Tuple)) else None
        if loops is None or not (len(names) == len(kinds) == len(loops)):
            raise self.err(st, f'T.axis.remap("{kinds}", [...]) needs one kind letter, one loop '
                           "variable and one name per iterator")
        for name, k, loop in zip(names, kinds, loops):
            if not isinstance(name, ast.Name) or k not in "SR":
                raise self.err(st, f'T.axis.remap kinds are "S" (spatial) or "R" (reduce), '
                               f"assigned to names; got {k!r} for {brief(name)}")
            v = self.expr(loop)
            if not isinstance(v, Var) or id(v) not in self.loops:
                raise self.err(loop, f"T.axis.remap binds loop variables; {brief(loop)} is not one")
            lo, extent = self.loops[id(v)]
            var = Var(name.id, extent.dtype)
            self.bind(name.id, var, name)
            frame.iter_vars.append(IterVar(var, Range(lo, extent), "spatial" if k == "S" else "reduce"))
            frame.values.append(v)
