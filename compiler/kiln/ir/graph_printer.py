"""Graph functions as script text (``@R.function``), registered with the module printer.

The text parses back (``kiln.script.parse``) to a structurally equal function. Conventions:

- types: ``R.Tensor((1, 784), "float32")``, ``R.Tensor(None, "float32")`` (unknown rank),
  ``R.Tuple(R.Tensor(...), ...)``. A symbolic dimension is a *string* holding its tensor-IR
  expression, ``R.Tensor(("n", "n * 2"), "float32")``: the same name means the same variable
  throughout one function (parameters, bindings, attributes), so no declaration is needed and
  Python can evaluate the annotations when it defines a decorated function. A symbolic variable
  whose dtype is not the index dtype (int32) is declared at the top, ``n = T.int64()``; a
  dimension that is not an int32 constant prints as a string too (``"T.int64(4)"``).
- ``with R.dataflow():`` blocks end with ``R.output(...)``; bindings outside them are the
  function's non-dataflow blocks (two such blocks in a row print, and parse back, as one).
- a binding's type is left out when it is the type of its value (what the parser infers); it
  is annotated otherwise: ``lv: R.Tensor((4,), "float32") = ...``. The return annotation
  ``-> type`` is the returned value's type, for the reader.
- calls: operators ``R.add(x, y)``, ``R.conv2d(x, w, strides=(1, 1))`` (attributes as keyword
  arguments; an op name that is not an identifier prints as ``R.call_op("name", ...)``);
  ``R.call_tir(Module.f, (x, w), out_type)`` names module functions by the printed class name;
  ``R.call_dps_packed("env.relu", (x,), out_type)``; ``R.call_packed`` likewise (the function
  returns its result: the string operators).
- tuples ``(a, b)`` and ``t[0]``; constants ``R.const([[1, 2], [3, 4]], "int32")``, values
  inlined up to ``INLINE_LIMIT`` elements. Larger ones print as ``R.const(metadata["key"])``:
  their data is not in the text; ``metadata(node)`` gives the arrays by key, and
  ``kiln.script.parse(text, metadata=...)`` takes them back.
- ``R.func_attr({...})`` holds the function's attributes.
"""
from __future__ import annotations

import hashlib
import keyword
import math
from typing import Dict, List

import numpy as np

from . import dtype as dt
from .analysis import expr_equal
from .expr import IntImm, PrimExpr
from .function import IRModule
from .functor import children
from .graph import (Binding, BindingBlock, Call, Constant, ExternFunc, Function, GlobalVar,
                    GraphExpr, GraphVar, TensorType, Tuple, TupleGetItem, TupleType, Type)
from .printer import (INDENT, _Printer, _float_text, quote, register_function_printer,
                      register_node_printer)

# Function attribute (printed only) mapping printed parameter names to the real ones.
PARAM_NAMES_ATTR = "kiln.param_names"
INLINE_LIMIT = 64           # constants with more elements print as metadata references
MODULE_REF = "Module"       # the class name the module printer writes; Module.f names function f
# R.<name> spellings that are syntax, not operators (an op by one of these names prints with call_op).
R_SYNTAX = frozenset({"function", "Tensor", "Tuple", "dataflow", "output", "func_attr", "const",
                      "call_tir", "call_dps_packed", "call_packed", "call_if", "call_op", "ExternFunc", "GlobalVar"})


def constant_key(data: np.ndarray) -> str:
    """The metadata key of a large constant: dtype, shape and a hash of its bytes, so the same
    array always gets the same key (``"float32[128, 784]#3fa2c1e95b"``)."""
    arr = np.ascontiguousarray(data)
    # A string constant's bytes are its elements' UTF-8 (an object array's are pointers).
    raw = "\0".join(arr.reshape(-1).tolist()).encode() if arr.dtype == object else arr.tobytes()
    h = hashlib.sha1(f"{arr.dtype.str}{arr.shape}".encode() + raw).hexdigest()[:10]
    return f"{dt.from_numpy(arr.dtype)}{list(arr.shape)}#{h}"


def metadata(node) -> Dict[str, np.ndarray]:
    """The constants of ``node`` (IRModule, Function or expression) that print as
    ``R.const(metadata["key"])``, by key: what ``kiln.script.parse(text, metadata=...)`` needs."""
    out: Dict[str, np.ndarray] = {}
    stack = list(node.functions.values()) if isinstance(node, IRModule) else [node]
    seen = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, Constant) and n.data.size > INLINE_LIMIT:
            out[constant_key(n.data)] = n.data
        stack.extend(children(n))
    return out


def _is_op_name(op: str) -> bool:
    parts = op.split(".")
    return (all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)
            and parts[0] not in R_SYNTAX and not parts[0].startswith("__"))


def _scalar(x, dtype: str) -> str:
    """One element of a constant, in the shortest spelling that reads back to the same value."""
    if isinstance(x, bool):
        return "True" if x else "False"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, str):  # an element of a string constant (docs/strings.md)
        return repr(x)
    if math.isnan(x) or math.isinf(x):
        return f"float({_float_text(x)})"
    return str(np.dtype(dtype).type(x))  # numpy's shortest round-tripping repr for the dtype


def _nested(v, dtype: str) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_nested(x, dtype) for x in v) + "]"
    return _scalar(v, dtype)


class GraphPrinter:
    """Prints one graph function (or loose graph nodes). Graph variables and symbolic
    dimension variables share one namespace, so every printed name means one thing."""

    def __init__(self):
        self.tp = _Printer()  # names and tensor-IR expressions (symbolic dimensions)
        # Names the printed syntax relies on are never given to variables.
        self.tp.scopes[0].update({"Module": 0, "metadata": 0, "cls": 0})

    # ---- types ---------------------------------------------------------------------------
    def dim(self, e: PrimExpr) -> str:
        if isinstance(e, IntImm) and e.dtype == "int32":
            return str(e.value)
        return quote(self.tp.expr(e))

    def typ(self, t: Type) -> str:
        if isinstance(t, TensorType):
            if t.shape is None:
                return f"R.Tensor(None, {quote(t.dtype)})"
            dims = [self.dim(d) for d in t.shape]
            shape = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
            return f"R.Tensor({shape}, {quote(t.dtype)})"
        if isinstance(t, TupleType):
            return f"R.Tuple({', '.join(self.typ(f) for f in t.fields)})"
        raise TypeError(f"the printer does not know graph type {type(t).__name__}")

    # ---- values --------------------------------------------------------------------------
    def literal(self, v) -> str:
        """Attribute values: Python literals; tensor-IR expressions (symbolic sizes) as in T."""
        if isinstance(v, bool) or v is None:
            return repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({_float_text(v)})"
        if isinstance(v, str):
            return quote(v)
        if isinstance(v, (tuple, list)):
            items = [self.literal(x) for x in v]
            if isinstance(v, list):
                return f"[{', '.join(items)}]"
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.literal(k)}: {self.literal(x)}" for k, x in v.items()) + "}"
        if isinstance(v, PrimExpr):
            return self.tp.literal(v)
        raise TypeError(f"the printer does not know attribute values of type {type(v).__name__}")

    def attrs(self, attrs) -> List[str]:
        out, odd = [], {}
        for k, v in attrs:
            if k.isidentifier() and not keyword.iskeyword(k):
                out.append(f"{k}={self.literal(v)}")
            else:
                odd[k] = v
        if odd:  # names Python cannot spell as keywords
            out.append(f"**{self.literal(odd)}")
        return out

    def const(self, c: Constant) -> str:
        arr = c.data
        if arr.size > INLINE_LIMIT:
            return f'R.const(metadata["{constant_key(arr)}"])'
        dtype = dt.from_numpy(arr.dtype)
        shape = f", shape={self.literal(tuple(arr.shape))}" if arr.size == 0 and arr.ndim != 1 else ""
        return f"R.const({_nested(arr.tolist(), dtype)}, {quote(dtype)}{shape})"

    def expr(self, e: GraphExpr) -> str:
        if isinstance(e, GraphVar):
            return self.tp.use(e)
        if isinstance(e, Constant):
            return self.const(e)
        if isinstance(e, GlobalVar):
            ok = e.name.isidentifier() and not keyword.iskeyword(e.name)
            return f"{MODULE_REF}.{e.name}" if ok else f"R.GlobalVar({quote(e.name)})"
        if isinstance(e, ExternFunc):
            return f"R.ExternFunc({quote(e.name)})"
        if isinstance(e, Tuple):
            items = [self.expr(f) for f in e.fields]
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(e, TupleGetItem):
            return f"{self.expr(e.tuple_value)}[{e.index}]"
        if isinstance(e, Call):
            return self.call(e)
        raise TypeError(f"the printer does not know graph expression {type(e).__name__}")

    def call(self, c: Call) -> str:
        args, kw = c.args, self.attrs(c.attrs)
        if (c.op == "call_tir" and len(args) == 2 and isinstance(args[0], GlobalVar)
                and c.ty is not None):
            parts = [self.expr(args[0]), self.expr(args[1]), self.typ(c.ty)]
            return f"R.call_tir({', '.join(parts + kw)})"
        if (c.op in ("call_dps_packed", "call_packed") and len(args) == 2
                and isinstance(args[0], ExternFunc) and c.ty is not None):
            parts = [quote(args[0].name), self.expr(args[1]), self.typ(c.ty)]
            return f"R.{c.op}({', '.join(parts + kw)})"
        if c.op == "call_if" and len(args) == 4 and c.ty is not None:
            parts = [self.expr(a) for a in args] + [self.typ(c.ty)]
            return f"R.call_if({', '.join(parts + kw)})"
        parts = [self.expr(a) for a in args] + kw
        if _is_op_name(c.op):
            return f"R.{c.op}({', '.join(parts)})"
        return f"R.call_op({', '.join([quote(c.op)] + parts)})"

    # ---- bindings and functions ----------------------------------------------------------
    def binding(self, b: Binding) -> str:
        value = self.expr(b.value)
        name = self.tp.define(b.var)
        # The parser gives a variable its value's type; say the type only when it differs.
        same = b.value.ty is not None and expr_equal(b.var.ty, b.value.ty)
        return f"{name}{'' if same else ': ' + self.typ(b.var.ty)} = {value}"

    def block(self, blk: BindingBlock) -> List[str]:
        if not blk.dataflow:
            return [self.binding(b) for b in blk.bindings]
        lines = ["with R.dataflow():"]
        lines += [INDENT + self.binding(b) for b in blk.bindings]
        lines.append(INDENT + f"R.output({', '.join(self.tp.use(v) for v in blk.outputs)})")
        return lines

    def function(self, f: Function, name: str) -> List[str]:
        """Lines of ``@R.function def name(...)``, decorator first."""
        pyname = name
        if not name.isidentifier() or keyword.iskeyword(name):
            pyname = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name).lstrip("0123456789")
            pyname = (pyname or "func") + ("_" if keyword.iskeyword(pyname) else "")
        deco = "@R.function" if pyname == name else f"@R.function(name={quote(name)})"
        printed = [self.tp.define(p) for p in f.params]
        params = [f"{n}: {self.typ(p.ty)}" for n, p in zip(printed, f.params)]
        # A parameter whose name is not an identifier ("fc1.weight") prints as one (fc1_weight);
        # its real name rides along so that parsing gives it back (bind_params goes by name).
        renamed = {n: p.name for n, p in zip(printed, f.params) if n != p.name}
        attrs = dict(f.attrs, **({PARAM_NAMES_ATTR: renamed} if renamed else {}))
        body = [f"R.func_attr({self.literal(attrs)})"] if attrs else []
        for blk in f.blocks:
            body += self.block(blk)
        body.append(f"return {self.expr(f.body)}")
        ret = f" -> {self.typ(f.body.ty)}" if f.body.ty is not None else ""
        # Symbolic variables are made by name on first use, with the index dtype; others are
        # declared (after everything is printed, so that all are known).
        decls = [f"{self.tp.names[id(v)]} = T.{v.dtype}()" for v in self.tp.free
                 if v.dtype != dt.INDEX_DTYPE]
        head = f"def {pyname}({', '.join(params)}){ret}:"
        return [deco, head] + [INDENT + ln for ln in decls + body]


def _function_text(f: Function) -> str:
    name = str(f.attr("global_symbol", "main"))
    return "\n".join(["# from kiln.script import T, R", ""] + GraphPrinter().function(f, name))


def _node_text(node) -> str:
    p = GraphPrinter()
    if isinstance(node, Type):
        return p.typ(node)
    if isinstance(node, Binding):
        return p.binding(node)
    if isinstance(node, BindingBlock):
        return "\n".join(p.block(node))
    return p.expr(node)


register_function_printer(Function, lambda f, name: GraphPrinter().function(f, name), namespace="R")
register_node_printer(Function, _function_text)
for _cls in (GraphExpr, Type, Binding, BindingBlock):
    register_node_printer(_cls, _node_text)
