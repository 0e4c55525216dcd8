"""Constant arguments of ``call_if`` move into the branch functions.

The ONNX importer makes each branch of an ``If`` a private graph function whose parameters
are the outer values it uses, weights included. Once ``bind_params`` has turned those weights
into constants in the caller, they would still reach the branch as run-time arguments, so the
branch could neither fold them nor pre-pack them. This rewrite binds each constant argument
into the branch (a parameter replaced by the ``Constant``) and drops it from the call:

Before::

    main:   lv1 = R.call_if(c, Module.then_f, Module.else_f, (x, R.const(w)), ...)
    then_f(p0, p1):  lv0 = R.matmul(p0, p1)

After::

    main:   lv1 = R.call_if(c, Module.then_f, Module.else_f, (x,), ...)
    then_f(p0):      lv0 = R.matmul(p0, R.const(w))

Only private branches that no other call site uses are rewritten (a shared branch would need
a copy per call site). Nested branches follow, since the rewrite repeats until nothing moves.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, List

from ..ir import IRModule
from ..ir.functor import post_order_visit
from ..ir.graph import Binding, Call, Constant, Function, GlobalVar, Tuple
from .graph_util import graph_functions, rewrite_function


def _reference_counts(mod: IRModule) -> Counter:
    """How many times each function name is referenced (GlobalVar occurrences) in ``mod``."""
    refs: Counter = Counter()
    for _, func in graph_functions(mod):
        post_order_visit(func, lambda n: refs.update([n.name]) if isinstance(n, GlobalVar) else None)
    return refs


def _bind_into(func: Function, consts: Dict[int, Constant]) -> Function:
    """``func`` with parameter ``i`` replaced by ``consts[i]`` for each ``i``."""
    vmap = {func.params[i]: c for i, c in consts.items()}
    params = tuple(p for i, p in enumerate(func.params) if i not in consts)
    return rewrite_function(func, lambda b, em, _blk: em.emit(b), params=params, vmap=vmap)


def _movable(call: Call, mod: IRModule, refs: Counter) -> bool:
    """Both branches are private graph functions referenced only by this call."""
    names = [call.args[1].name, call.args[2].name]
    for name in set(names):
        f = mod.functions.get(name)
        if not isinstance(f, Function) or not f.attr("private") or refs[name] != names.count(name):
            return False
    return True


def bind_constant_arguments(mod: IRModule) -> IRModule:
    """``mod`` with the constant arguments of ``call_if`` bound into their branches (see the
    module docstring). Returns ``mod`` itself when there is nothing to move."""
    while True:
        refs = _reference_counts(mod)
        changed: Dict[str, Function] = {}
        for name, func in graph_functions(mod):
            moved: List[Call] = []

            def visit(b: Binding, em, _blk, moved=moved):
                v = b.value
                if not (isinstance(v, Call) and v.op == "call_if" and _movable(v, mod, refs)):
                    em.emit(b)
                    return
                fields = v.args[3].fields
                consts = {i: a for i, a in enumerate(fields) if isinstance(a, Constant)}
                if not consts:
                    em.emit(b)
                    return
                for gv in {v.args[1].name, v.args[2].name}:
                    changed[gv] = _bind_into(mod[gv], consts)
                rest = Tuple(tuple(a for i, a in enumerate(fields) if i not in consts))
                em.emit_value(b.var, Call("call_if", (*v.args[:3], rest), v.attrs, v.ty))
                moved.append(v)
            new = rewrite_function(func, visit)
            if moved:
                # Apply this caller's moves and start over: a branch just rewritten may itself
                # be a caller whose (now constant) arguments move on into its own branches.
                changed[name] = new
                break
        if not changed:
            return mod
        for name, func in changed.items():
            mod = mod.with_function(name, func)
