"""``legalize``: every operator call becomes a ``call_tir`` of a tensor program.

The program comes from the operator library: ``OpDef.compute`` on te placeholders of the
argument types, through ``te.create_prim_func`` (or ``OpDef.tir`` when the operator has one);
see ``kernels.py``. Calls with the same operator, argument types and attributes share one
PrimFunc; names are the operator's, made unique (``add``, ``add1``). Each kernel records the
operators it computes in its ``kiln.ops`` attribute.

Before::

    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            lv0 = R.add(x, y)
            gv = R.relu(lv0)
            R.output(gv)
        return gv

After (the PrimFuncs ``add`` and ``relu`` added to the module)::

    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(Module.add, (x, y), R.Tensor((2, 3), "float32"))
            gv = R.call_tir(Module.relu, (lv0,), R.Tensor((2, 3), "float32"))
            R.output(gv)
        return gv

A ``linear``/``matmul`` whose weight is a constant first gets a ``call_tir`` of a pack kernel
(``pack_nk16``) on that constant, which ``fold_constant`` turns into the packed constant.
"""
from __future__ import annotations

from typing import List, Optional

from ..ir import IRModule
from ..ir.functor import post_order_visit
from ..ir.graph import (Binding, BindingBlock, Call, Function, GraphVar, Tuple,
                        TupleGetItem)
from .graph_util import graph_functions, is_op_call, rewrite_function
from .infra import Pass, PassContext, context
from .kernels import KernelTable, build_kernel


def legalize(ctx: Optional[PassContext] = None) -> Pass:
    """The pass: operator calls -> ``call_tir`` of PrimFuncs added to the module."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        table = KernelTable(mod)
        graph = {name: rewrite_function(_bind_result(f), _legalize_binding(table, ctx))
                 for name, f in graph_functions(mod)}
        return table.module(mod, graph)
    return Pass("legalize", run)


def _legalize_binding(table: KernelTable, ctx: PassContext):
    def visit(b: Binding, em, _block) -> None:
        value = _lower(b.value, True, b, em, [], table, ctx)
        em.emit(b if value is b.value else Binding(b.var, value))
    return visit


def _lower(e, top: bool, b: Binding, em, hoisted: List[GraphVar], table: KernelTable,
           ctx: PassContext):
    """``e`` (the value of binding ``b``, or a part of it) with its operator calls replaced by
    ``call_tir``s of kernels from ``table``; a nested call is bound first (``hoisted``).

    A module-level function rather than a closure that calls itself: such a closure is a
    reference cycle (function -> cell -> function) holding the table, and so the whole module
    before the pass, weights included, until the garbage collector runs."""
    if isinstance(e, Call):
        args = tuple(_lower(a, False, b, em, hoisted, table, ctx) for a in e.args)
        if any(x is not y for x, y in zip(args, e.args)):
            e = Call(e.op, args, e.attrs, e.ty)
        if not is_op_call(e):
            return e
        var = b.var if top else GraphVar(f"{b.var.name}_{len(hoisted)}", e.ty)
        packs, call = table.call(build_kernel([(var, e)], ctx))
        for v, c in packs:
            em.emit(Binding(v, c))
        if top:
            return call
        # A call nested in another value gets its own binding (the executable runs
        # bindings in A-normal form).
        hoisted.append(var)
        em.emit(Binding(var, call))
        return var
    if isinstance(e, Tuple):
        fields = tuple(_lower(f, False, b, em, hoisted, table, ctx) for f in e.fields)
        return e if all(x is y for x, y in zip(fields, e.fields)) else Tuple(fields)
    if isinstance(e, TupleGetItem):
        inner = _lower(e.tuple_value, False, b, em, hoisted, table, ctx)
        return e if inner is e.tuple_value else TupleGetItem(inner, e.index)
    return e


def _bind_result(func: Function) -> Function:
    """``func`` with a returned expression that calls operators bound to a variable first
    (``return R.relu(x)`` -> ``gv = R.relu(x); return gv``), so only bindings hold calls."""
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if is_op_call(n) else None)
    if not found:
        return func
    gv = GraphVar("gv", func.body.ty)
    block = BindingBlock((Binding(gv, func.body),), False, ())
    return Function(func.params, func.blocks + (block,), gv, func.attrs)
