"""The ``@R.function`` function kind: a Python function's AST read as a graph function.

The syntax is the one ``kiln.ir.graph_printer`` writes (see its docstring for every form).
Parameters take their types from their annotations; a binding takes its value's type (an
operator's result type is inferred by ``kiln.ops.call``) unless annotated. Symbolic dimensions
are strings holding tensor-IR expressions, ``R.Tensor(("n", "n * 2"), "float32")``: each name
is one variable per function, made on first use with the index dtype unless declared at the
top of the body (``n = T.int64()``). ``Net.linear0`` / ``cls.linear0`` name a function of the
module being parsed, whether defined before or after. Variables bound in a dataflow block and
not listed in its ``R.output(...)`` are not visible after it.

Errors (unknown operator, shapes an operator does not take, undefined names, misplaced
statements) raise ``ScriptError`` with the line.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import PrimExpr, Var
from ..ir.graph import (Binding, BindingBlock, Call, Constant, ExternFunc, Function, GlobalVar,
                        GraphVar, TensorType, Tuple, TupleGetItem, TupleType)
from ..ir.structural import structural_equal
from ..ir.graph_printer import PARAM_NAMES_ATTR
from .parser import ModuleContext, ScriptError, brief, dotted, register_function_kind
from .tir_expr import ExprParser


def parse_graph_function(ctx: ModuleContext, fdef: ast.FunctionDef, kwargs: dict) -> Function:
    """Parse one ``@R.function`` function (the decorator takes only ``name=``)."""
    if kwargs:
        raise ctx.source.error(fdef, f"@R.function got unknown arguments {sorted(kwargs)}; it takes name=")
    return _GraphParser(ctx).function(fdef)


register_function_kind("R.function", parse_graph_function)

_NOT_VALUES = ("R.Tensor", "R.Tuple", "R.dataflow", "R.output", "R.func_attr", "R.function")


class _SymParser(ExprParser):
    """Tensor-IR expressions over one function's symbolic variables. An unknown name makes a
    new variable of the index dtype: in script, naming a size is what declares it."""

    def __init__(self, src, table: Dict[str, Var]):
        super().__init__(src)
        self.scopes = [table]

    def lookup(self, name: str, node):
        table = self.scopes[0]
        if name not in table:
            table[name] = Var(name, dt.INDEX_DTYPE)
        return table[name]


def _decl(node) -> Optional[tuple]:
    """``n = T.int64()``: (name, dtype), else None."""
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call) and not node.value.args and not node.value.keywords):
        fn = dotted(node.value.func) or ""
        if fn.startswith("T.") and fn[2:] in dt.SCALAR_DTYPES:
            return node.targets[0].id, fn[2:]
    return None


class _GraphParser:
    """One function: graph variables in lexical scopes (function, dataflow block) and the
    function's symbolic sizes by name."""

    def __init__(self, ctx: ModuleContext):
        self.ctx, self.src = ctx, ctx.source
        self.sym: Dict[str, Var] = {}
        self.symp = _SymParser(self.src, self.sym)
        self.scopes: List[Dict[str, GraphVar]] = [{}]
        self.expired: Dict[str, int] = {}   # dataflow-local name -> line of its block
        self.aliases = {"cls"}                # names of the module itself (cls = MyModule)

    def err(self, node, msg: str) -> ScriptError:
        return self.src.error(node, msg)

    @staticmethod
    def callee(node) -> Optional[str]:
        return dotted(node.func) if isinstance(node, ast.Call) else None

    # ---- function ------------------------------------------------------------------------
    def function(self, fdef: ast.FunctionDef) -> Function:
        a = fdef.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.err(fdef, "an @R.function takes plain parameters only (no defaults, *args, **kwargs)")
        body = [n for n in fdef.body if not isinstance(n, ast.Pass) and not (
            isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str))]
        for node in body:  # declared sizes first: parameter types may use them
            d = _decl(node)
            if d:
                if d[0] in self.sym:
                    raise self.err(node, f"symbolic size {d[0]!r} is declared twice")
                self.sym[d[0]] = Var(d[0], d[1])
        real_names = self.param_names(body)
        params = []
        for arg in a.args:
            if arg.annotation is None:
                raise self.err(arg, f"parameter {arg.arg!r} needs a type: {arg.arg}: R.Tensor(shape, dtype)")
            params.append(GraphVar(real_names.get(arg.arg, arg.arg), self.typ(arg.annotation)))
            self.scopes[-1][arg.arg] = params[-1]
        blocks, loose, attrs, ret = [], [], None, None
        for node in body:
            if _decl(node) or self.module_alias(node):
                continue
            if ret is not None:
                raise self.err(node, "statements after return")
            fn = self.callee(node.value) if isinstance(node, ast.Expr) else None
            if fn == "R.func_attr":
                if attrs is not None:
                    raise self.err(node, "R.func_attr(...) is given twice")
                if len(node.value.args) != 1 or node.value.keywords:
                    raise self.err(node, "R.func_attr takes one dict: R.func_attr({\"key\": value})")
                attrs = self.attr_value(node.value.args[0])
                if not isinstance(attrs, dict):
                    raise self.err(node, "R.func_attr takes a dict")
            elif isinstance(node, ast.With):
                if loose:
                    blocks.append(BindingBlock(tuple(loose), False, ()))
                    loose = []
                blocks.append(self.dataflow(node))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                loose.append(self.binding(node))
            elif isinstance(node, ast.Return):
                if node.value is None:
                    raise self.err(node, "an @R.function returns a value: return <value>")
                ret = self.expr(node.value)
            elif fn == "R.output":
                raise self.err(node, "R.output(...) ends a with R.dataflow(): block")
            else:
                raise self.err(node, f"expected a binding (name = value), with R.dataflow(): or "
                               f"return, got {brief(node)}")
        if ret is None:
            raise self.err(fdef, f"@R.function {fdef.name!r} does not end with return <value>")
        if loose:
            blocks.append(BindingBlock(tuple(loose), False, ()))
        if fdef.returns is not None and ret.ty is not None:
            want = self.typ(fdef.returns)
            if not structural_equal(want, ret.ty):
                from ..ir.printer import to_text
                raise self.err(fdef.returns, f"the return annotation {brief(fdef.returns)} does not "
                               f"match the type of the returned value, {to_text(ret.ty)}")
        attrs = {k: v for k, v in (attrs or {}).items() if k != PARAM_NAMES_ATTR}
        return Function(tuple(params), tuple(blocks), ret, tuple(attrs.items()))

    def module_alias(self, node) -> bool:
        """``cls = MyModule`` at the top of a function: ``cls.f`` then names the module's ``f``
        (the spelling of the tutorials; Kiln prints ``MyModule.f``)."""
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Name)
                and self.ctx.name and node.value.id == self.ctx.name):
            return False
        self.aliases.add(node.targets[0].id)
        return True

    def param_names(self, body) -> dict:
        """The printer's ``"kiln.param_names"`` attribute (printed name -> real name), if any."""
        for node in body:
            if (isinstance(node, ast.Expr) and self.callee(node.value) == "R.func_attr"
                    and len(node.value.args) == 1):
                attrs = self.attr_value(node.value.args[0])
                names = attrs.get(PARAM_NAMES_ATTR, {}) if isinstance(attrs, dict) else {}
                if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
                    raise self.err(node, f'R.func_attr "{PARAM_NAMES_ATTR}" maps printed parameter names '
                                   'to real ones: {"fc1_weight": "fc1.weight"}')
                return names
        return {}

    def dataflow(self, node: ast.With) -> BindingBlock:
        item = node.items[0] if len(node.items) == 1 else None
        if (item is None or item.optional_vars is not None or self.callee(item.context_expr) != "R.dataflow"
                or item.context_expr.args or item.context_expr.keywords):
            raise self.err(node, f"expected with R.dataflow():, got with {brief(node.items[0].context_expr)}")
        self.scopes.append({})
        bindings, outputs = [], None
        for k, st in enumerate(node.body):
            if isinstance(st, ast.Expr) and self.callee(st.value) == "R.output":
                if k != len(node.body) - 1:
                    raise self.err(st, "R.output(...) must be the last statement of the dataflow block")
                outputs = [self.output_var(a) for a in st.value.args]
                if st.value.keywords:
                    raise self.err(st, "R.output takes variable names only")
            elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                bindings.append(self.binding(st))
            elif isinstance(st, ast.Pass):
                continue
            else:
                raise self.err(st, f"expected a binding (name = value) or R.output(...) in a dataflow "
                               f"block, got {brief(st)}")
        local = self.scopes.pop()
        outputs = outputs or []
        for name, var in local.items():
            if any(var is o for o in outputs):
                self.scopes[-1][name] = var
                self.expired.pop(name, None)
            else:
                self.expired[name] = node.lineno
        return BindingBlock(tuple(bindings), True, tuple(outputs))

    def output_var(self, node) -> GraphVar:
        if not isinstance(node, ast.Name) or node.id not in self.scopes[-1]:
            raise self.err(node, f"R.output takes variables bound in this dataflow block, got {brief(node)}")
        return self.scopes[-1][node.id]

    def binding(self, node) -> Binding:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if len(node.targets) == 1 else None)
        if not isinstance(target, ast.Name) or node.value is None:
            raise self.err(node, f"expected a binding name = value, got {brief(node)}")
        value = self.expr(node.value)
        ty = self.typ(node.annotation) if isinstance(node, ast.AnnAssign) else value.ty
        if ty is None:
            raise self.err(node, f"cannot bind {brief(node.value)}: it has no type")
        var = GraphVar(target.id, ty)
        self.scopes[-1][target.id] = var
        return Binding(var, value)

    # ---- types ---------------------------------------------------------------------------
    def typ(self, node):
        fn = self.callee(node)
        if fn == "R.Tuple":
            if node.keywords:
                raise self.err(node, "R.Tuple takes field types only")
            return TupleType(tuple(self.typ(a) for a in node.args))
        if fn != "R.Tensor":
            raise self.err(node, f"expected a type R.Tensor(shape, dtype) or R.Tuple(...), got {brief(node)}")
        kws = self.symp.args(node, 0, 2, ("shape", "dtype"))
        shape_node = node.args[0] if node.args else kws.get("shape")
        dtype_node = node.args[1] if len(node.args) > 1 else kws.get("dtype")
        dtype = self.symp.dtype(dtype_node) if dtype_node is not None else "float32"
        if shape_node is None or (isinstance(shape_node, ast.Constant) and shape_node.value is None):
            return TensorType(None, dtype)
        elts = shape_node.elts if isinstance(shape_node, (ast.Tuple, ast.List)) else [shape_node]
        return TensorType(tuple(self.dim(e) for e in elts), dtype)

    def dim(self, node) -> PrimExpr:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                tree = ast.parse(node.value.strip(), mode="eval").body
            except SyntaxError:
                raise self.err(node, f"symbolic size {node.value!r} is not an expression") from None
            for n in ast.walk(tree):  # errors point at the annotation
                n.lineno, n.end_lineno = node.lineno, node.end_lineno
            node = tree
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            raise self.err(node, f"a dimension is an int or a symbolic size, got {node.value}")
        return self.symp.index(node)

    # ---- values --------------------------------------------------------------------------
    def lookup(self, node: ast.Name) -> GraphVar:
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        if node.id in self.expired:
            line = self.expired[node.id] + self.src.line_offset
            raise self.err(node, f"{node.id!r} is local to the dataflow block at line {line}; "
                           "list it in that block's R.output(...)")
        if node.id in self.sym:
            raise self.err(node, f"symbolic size {node.id!r} used as a graph value")
        raise self.err(node, f"undefined name {node.id!r}")

    def expr(self, node):
        try:
            return self._expr(node)
        except ScriptError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as e:
            raise self.err(node, str(e)) from None

    def _expr(self, node):
        if isinstance(node, ast.Name):
            return self.lookup(node)
        if isinstance(node, ast.Tuple):
            return Tuple(tuple(self.expr(e) for e in node.elts))
        if isinstance(node, ast.Subscript):
            idx = node.slice
            if not (isinstance(idx, ast.Constant) and type(idx.value) is int):
                raise self.err(node, f"a tuple item is t[<int literal>], got {brief(node)}")
            return TupleGetItem(self.expr(node.value), idx.value)
        if isinstance(node, ast.Attribute):
            return self.global_ref(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Constant, ast.UnaryOp, ast.List)):
            raise self.err(node, f"expected a graph value, got the literal {brief(node)}; operator "
                           "attributes are keyword arguments (R.sum(x, axis=1)) and constants are "
                           'R.const(value, "float32")')
        raise self.err(node, f"unsupported expression {brief(node)}")

    def global_ref(self, node) -> GlobalVar:
        name = dotted(node)
        parts = (name or "").split(".")
        if len(parts) != 2:
            raise self.err(node, f"expected a module function such as {self.ctx.name or 'Module'}.main, "
                           f"got {brief(node)}")
        if self.ctx.name:  # inside a module: its own functions, by its class name or cls
            if parts[0] != self.ctx.name and parts[0] not in self.aliases:
                raise self.err(node, f"{brief(node)}: module functions are named "
                               f"{self.ctx.name}.<function> (or cls.<function>)")
            if parts[1] not in self.ctx.function_names:
                raise self.err(node, f"module {self.ctx.name!r} has no function {parts[1]!r}; it has "
                               f"{', '.join(self.ctx.function_names)}")
        return GlobalVar(parts[1])

    def string(self, node, what: str) -> str:
        return self.symp.const_str(node, what)

    def call(self, node: ast.Call):
        fn = self.callee(node)
        if fn is None or not fn.startswith("R."):
            raise self.err(node, f"unknown function {brief(node.func)}; expected R.<operator>(...), "
                           "R.call_tir, R.call_dps_packed or R.const")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.err(node, "* arguments are not supported")
        if fn == "R.const":
            return self.const(node)
        if fn in ("R.ExternFunc", "R.GlobalVar"):
            self.symp.args(node, 1, 1)
            name = self.string(node.args[0], "a function name")
            return ExternFunc(name) if fn == "R.ExternFunc" else GlobalVar(name)
        if fn in _NOT_VALUES:
            raise self.err(node, f"{fn}(...) is not a value here")
        if fn in ("R.call_tir", "R.call_dps_packed", "R.call_packed"):
            return self.call_dps(node, fn)
        attrs = self.kwargs(node)
        if fn == "R.call_if":
            return self.call_if(node, attrs)
        args = list(node.args)
        if fn == "R.call_op":
            if not args:
                raise self.err(node, 'R.call_op("name", args...) needs the operator name')
            op = self.string(args.pop(0), "an operator name")
        else:
            op = fn[2:]
        values = [self.expr(a) for a in args]
        from .. import ops  # late: the operator families import much of kiln
        try:
            return ops.call(op, *values, **attrs)
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise self.err(node, str(e)) from None

    def call_dps(self, node: ast.Call, fn: str) -> Call:
        """``R.call_tir(Module.f, (args...), out_type)`` / ``R.call_dps_packed("name", (args...),
        out_type)``; the output type may also be given as ``out_sinfo=``, and as a list of
        tensor types (one output for a one-item list, else a tuple of outputs)."""
        sinfo = [k for k in node.keywords if k.arg == "out_sinfo"]
        rest = [k for k in node.keywords if k.arg != "out_sinfo"]
        positional = list(node.args) + [k.value for k in sinfo]
        if len(positional) != 3:
            raise self.err(node, f"{fn}(func, (args...), out_sinfo) takes the function, its argument "
                           f"tuple and the output type (positional or out_sinfo=), got "
                           f"{len(positional)} of them")
        f, args_node, ty_node = positional
        attrs = self.kwargs(ast.Call(node.func, [], rest))
        if fn == "R.call_tir":
            target = self.expr(f)
            if not isinstance(target, GlobalVar):
                raise self.err(f, f"R.call_tir calls a tensor program of the module, such as "
                               f"{self.ctx.name or 'Module'}.f; got {brief(f)}")
        elif isinstance(f, ast.Call):
            target = self.expr(f)
        else:
            target = ExternFunc(self.string(f, "an external function name"))
        args = self.expr(args_node)
        if not isinstance(args.ty, TupleType):
            raise self.err(args_node, f"the arguments of {fn} are a tuple: ({brief(args_node)},)")
        if isinstance(ty_node, ast.List):
            if not ty_node.elts:
                raise self.err(ty_node, f"{fn}: out_sinfo lists at least one output type")
            types = [self.typ(e) for e in ty_node.elts]
            ty = types[0] if len(types) == 1 else TupleType(tuple(types))
        else:
            ty = self.typ(ty_node)
        return Call(fn[2:], (target, args), tuple(attrs.items()), ty)

    def call_if(self, node: ast.Call, attrs: dict):
        """``R.call_if(cond, Module.then_f, Module.else_f, (args...), out_type)``."""
        if len(node.args) != 5:
            raise self.err(node, "R.call_if(cond, Module.then_f, Module.else_f, (args...), out_type) takes "
                           f"5 positional arguments, got {len(node.args)}")
        cond = self.expr(node.args[0])
        branches = []
        for f in node.args[1:3]:
            target = self.expr(f)
            if not isinstance(target, GlobalVar):
                raise self.err(f, f"R.call_if branches are graph functions of the module, such as "
                               f"{self.ctx.name or 'Module'}.f; got {brief(f)}")
            branches.append(target)
        args = self.expr(node.args[3])
        if not isinstance(args.ty, TupleType):
            raise self.err(node.args[3], f"the arguments of R.call_if are a tuple: ({brief(node.args[3])},)")
        return Call("call_if", (cond, *branches, args), tuple(attrs.items()), self.typ(node.args[4]))

    def kwargs(self, node: ast.Call) -> dict:
        out = {}
        for k in node.keywords:
            if k.arg is None:
                value = self.attr_value(k.value)
                if not isinstance(value, dict):
                    raise self.err(k.value, "** takes a dict of attributes")
                out.update(value)
            else:
                out[k.arg] = self.attr_value(k.value)
        return out

    def attr_value(self, node):
        """Attribute values: Python literals (containers too), or tensor-IR expressions over the
        function's symbolic sizes (``T.int64(3)``, ``n * 2``)."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.attr_value(e) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise self.err(node, "** inside an attribute dict is not supported")
            return {self.attr_value(k): self.attr_value(v) for k, v in zip(node.keys, node.values)}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and any(n.id in s for s in self.scopes):
                raise self.err(n, f"graph value {n.id!r} cannot be an attribute; pass it as an argument")
        return self.symp.expr(node)

    def const(self, node: ast.Call) -> Constant:
        kws = self.symp.args(node, 1, 2, ("dtype", "shape"))
        value_node = node.args[0]
        dtype = self.symp.dtype(node.args[1] if len(node.args) > 1 else kws["dtype"]) \
            if len(node.args) > 1 or "dtype" in kws else None
        if (isinstance(value_node, ast.Subscript) and isinstance(value_node.value, ast.Name)
                and value_node.value.id == "metadata"):
            key = self.string(value_node.slice, "a metadata key")
            table = getattr(self.src, "metadata", None) or {}
            if key not in table:
                raise self.err(node, f"large constant {key!r} is not in the text; parse with "
                               "kiln.script.parse(text, metadata=kiln.script.metadata(original))")
            arr = np.asarray(table[key])
            return Constant(arr if dtype is None else arr.astype(dtype))
        value = self.attr_value(value_node)
        if dtype is None:  # as for T constants: bool, int32 or float32 by the literal
            flat = np.asarray(value)
            dtype = {"b": "bool", "i": "int32", "u": "int32"}.get(flat.dtype.kind, "float32")
        try:
            arr = np.array(value, dtype=object if dtype == "string" else dtype)
            if "shape" in kws:
                arr = arr.reshape(tuple(self.attr_value(kws["shape"])))
        except (ValueError, TypeError, OverflowError) as e:
            raise self.err(node, f"bad constant value: {e}") from None
        return Constant(arr)
