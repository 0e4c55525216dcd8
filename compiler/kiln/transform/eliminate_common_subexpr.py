"""``eliminate_common_subexpr``: compute identical pure calls once.

Two bindings in one block whose values are the same pure call (same operator or same
``call_tir`` target, the same arguments — the same variables, equal constants — the same
attributes and type) are bound once; later uses of the second variable use the first.
Within a block only: a dataflow block's variables are not visible in the next one, and
``call_dps_packed`` is never merged (it may have effects).

Before::

    with R.dataflow():
        lv0 = R.relu(x)
        lv1 = R.relu(x)
        gv = R.add(lv0, lv1)
        R.output(gv)

After::

    with R.dataflow():
        lv0 = R.relu(x)
        gv = R.add(lv0, lv0)
        R.output(gv)
"""
from __future__ import annotations

import hashlib
from typing import Dict

import numpy as np

from ..ir import IRModule
from ..ir.expr import IntImm, PrimExpr, Var
from ..ir.graph import (Call, Constant, ExternFunc, GlobalVar, GraphExpr, GraphVar, TensorType,
                        Tuple, TupleGetItem, TupleType)
from ..ir.structural import structural_hash
from .graph_util import graph_functions, is_pure, rewrite_function
from .infra import Pass


def eliminate_common_subexpr() -> Pass:
    """The pass (see the module docstring)."""
    def run(mod: IRModule) -> IRModule:
        out = mod
        for name, func in graph_functions(mod):
            out = out.with_function(name, rewrite_function(func, _Visitor()))
        return out
    return Pass("eliminate_common_subexpr", run)


class _Visitor:
    def __init__(self):
        self.seen: Dict[object, GraphVar] = {}
        self.block = None

    def __call__(self, b, em, block):
        if block is not self.block:           # a new block: its values are new
            self.block, self.seen = block, {}
        value = b.value
        if not isinstance(value, (Call, Tuple, TupleGetItem)) or not is_pure(value):
            em.emit(b)
            return
        key = expr_key(value)
        first = self.seen.get(key)
        if first is not None:
            em.replace(b.var, first)
        else:
            self.seen[key] = b.var
            em.emit(b)


def expr_key(e: GraphExpr):
    """A hashable key equal for expressions that compute the same value: variables by
    identity, constants by content, calls by operator, arguments, attributes and type."""
    if isinstance(e, GraphVar):
        return ("var", id(e))
    if isinstance(e, Constant):
        # The bytes in C order, hashed in place (tobytes would copy every weight once more).
        digest = hashlib.sha1(np.ascontiguousarray(e.data).reshape(-1).view(np.uint8)).hexdigest()
        return ("const", e.data.dtype.str, e.data.shape, digest)
    if isinstance(e, GlobalVar):
        return ("global", e.name)
    if isinstance(e, ExternFunc):
        return ("extern", e.name)
    if isinstance(e, Tuple):
        return ("tuple",) + tuple(expr_key(f) for f in e.fields)
    if isinstance(e, TupleGetItem):
        return ("item", expr_key(e.tuple_value), e.index)
    if isinstance(e, Call):
        args = tuple(expr_key(a) for a in e.args)
        return ("call", e.op, args, _attrs_key(e.attrs), type_key(e.ty))
    return ("other", id(e))


def _attrs_key(attrs):
    try:
        hash(attrs)
        return attrs
    except TypeError:          # an unhashable attribute value: never merge such calls
        return ("unhashable", id(attrs))


def type_key(ty):
    """A hashable key for a type; symbolic dimensions by identity of their Vars."""
    if isinstance(ty, TensorType):
        if ty.shape is None:
            return ("tensor", None, ty.dtype)
        return ("tensor", tuple(_dim_key(d) for d in ty.shape), ty.dtype)
    if isinstance(ty, TupleType):
        return ("tuple",) + tuple(type_key(f) for f in ty.fields)
    return ("other", structural_hash(ty) if ty is not None else None)


def _dim_key(d: PrimExpr):
    if isinstance(d, IntImm):
        return d.value
    if isinstance(d, Var):
        return ("var", id(d))
    return ("expr", repr(d))
