"""``dead_code_elimination``: drop bindings nobody uses and tensor programs nobody calls.

A binding is dead when its variable is not used by a later live binding, a block output that
is used later, or the returned expression, and computing it has no effect (operators,
``call_tir``, constants, tuples; never ``call_dps_packed``, which may have effects).
A PrimFunc is dead when no graph function refers to it; every graph function is an entry
point (``vm["main"]``, ``vm["prefill"]``), so graph functions are always kept. A module with
no graph function at all (a library of tensor programs) keeps every PrimFunc.

Before::

    with R.dataflow():
        lv0 = R.add(x, x)        # unused
        gv = R.relu(x)
        R.output(gv)
    return gv

After::

    with R.dataflow():
        gv = R.relu(x)
        R.output(gv)
    return gv
"""
from __future__ import annotations

from ..ir import IRModule
from ..ir.graph import Function
from .graph_util import global_refs, graph_functions, is_pure, rewrite_function, vars_in
from .infra import Pass


def dead_code_elimination() -> Pass:
    """The pass (see the module docstring)."""
    def run(mod: IRModule) -> IRModule:
        out = mod
        for name, func in graph_functions(mod):
            out = out.with_function(name, remove_dead_bindings(func))
        return remove_unused_functions(out)
    return Pass("dead_code_elimination", run)


def remove_dead_bindings(func: Function) -> Function:
    """``func`` without its dead bindings (see the module docstring)."""
    live = set(vars_in(func.body))
    keep = set()
    for block in reversed(func.blocks):
        for b in reversed(block.bindings):
            if b.var in live or not is_pure(b.value):
                keep.add(b.var)
                live.update(vars_in(b.value))
    if len(keep) == sum(len(bl.bindings) for bl in func.blocks):
        return func

    def visit(b, em, _block):
        if b.var in keep:
            em.emit(b)
    return rewrite_function(func, visit)


def remove_unused_functions(mod: IRModule) -> IRModule:
    """``mod`` without the non-graph functions that no graph function refers to."""
    graph = graph_functions(mod)
    if not graph:
        return mod
    used = set(name for name, _ in graph)
    todo = [f for _, f in graph]
    while todo:
        for ref in global_refs(todo.pop()):
            if ref not in used and ref in mod:
                used.add(ref)
                if isinstance(mod[ref], Function):   # tensor programs call nothing
                    todo.append(mod[ref])
    if len(used) == len(mod.functions):
        return mod
    return IRModule({k: f for k, f in mod.functions.items() if k in used}, mod.attrs)
