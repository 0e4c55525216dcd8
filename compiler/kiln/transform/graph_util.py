"""Helpers the graph passes share: finding graph functions, substituting variables, counting
uses, and rebuilding a function one binding at a time (``rewrite_function``).

Graph variables are identities (``GraphVar`` compares by ``is``), so a pass that replaces a
value maps the old variable to its replacement and substitutes that map into every later
binding, the block outputs and the returned expression.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from ..ir import IRModule
from ..ir.functor import post_order_visit, transform
from ..ir.graph import (BUILTIN_OPS, Binding, BindingBlock, Call, Function, GlobalVar, GraphExpr, GraphVar)

# Calls without side effects: operators and call_tir (destination-passing into fresh outputs).
# call_dps_packed runs arbitrary registered code, so passes never drop or merge it outside
# dataflow blocks.
IMPURE_OPS = ("call_dps_packed", "call_packed")


def graph_functions(mod: IRModule) -> List[Tuple[str, Function]]:
    """The graph functions of ``mod`` as (name, function), in module order."""
    return [(k, f) for k, f in mod.functions.items() if isinstance(f, Function)]


def substitute(expr: GraphExpr, vmap: Dict[GraphVar, GraphExpr]) -> GraphExpr:
    """``expr`` with graph variables replaced by ``vmap`` (unchanged parts are shared)."""
    if not vmap:
        return expr
    return transform(expr, lambda n: vmap.get(n) if isinstance(n, GraphVar) else None)


def vars_in(expr) -> List[GraphVar]:
    """Every graph variable ``expr`` uses, with repetition, in visiting order."""
    out: List[GraphVar] = []
    post_order_visit(expr, lambda n: out.append(n) if isinstance(n, GraphVar) else None)
    return out


def use_counts(func: Function) -> Counter:
    """How often each variable is used: in binding values, as a block output, in the body."""
    uses: Counter = Counter()
    for block in func.blocks:
        for b in block.bindings:
            uses.update(vars_in(b.value))
        uses.update(block.outputs)
    uses.update(vars_in(func.body))
    return uses


def global_refs(node) -> List[str]:
    """Names of the module functions ``node`` refers to (``GlobalVar``s), in order, unique."""
    names: List[str] = []
    post_order_visit(node, lambda n: names.append(n.name)
                     if isinstance(n, GlobalVar) and n.name not in names else None)
    return names


def is_pure(value: GraphExpr) -> bool:
    """True if evaluating ``value`` has no effect besides its result."""
    found = []
    post_order_visit(value, lambda n: found.append(n)
                     if isinstance(n, Call) and n.op in IMPURE_OPS else None)
    return not found


def is_op_call(value: GraphExpr) -> bool:
    """True for a call of a ``kiln.ops`` operator (not a builtin like call_tir or call_if)."""
    return isinstance(value, Call) and value.op not in BUILTIN_OPS


class Emitter:
    """What ``rewrite_function``'s callback uses to say what becomes of a binding."""

    def __init__(self):
        self.vmap: Dict[GraphVar, GraphExpr] = {}
        self.bindings: List[Binding] = []

    def emit(self, binding: Binding) -> GraphVar:
        """Keep (or insert) ``binding``."""
        self.bindings.append(binding)
        return binding.var

    def emit_value(self, var: GraphVar, value: GraphExpr) -> GraphVar:
        """Bind ``var`` to ``value`` (a new value for an existing variable, or a new variable)."""
        return self.emit(Binding(var, value))

    def replace(self, var: GraphVar, expr: GraphExpr) -> None:
        """Drop ``var``'s binding; every later use of ``var`` becomes ``expr``."""
        self.vmap[var] = expr


def rewrite_function(func: Function, visit: Callable[[Binding, Emitter, BindingBlock], None],
                     params=None, vmap: Optional[Dict[GraphVar, GraphExpr]] = None) -> Function:
    """Rebuild ``func`` binding by binding.

    ``visit(binding, emitter, block)`` sees each binding with the replacements made so far
    already substituted into its value, and calls ``emitter.emit`` / ``emit_value`` /
    ``replace``. A binding it says nothing about disappears. Dataflow block outputs follow:
    a replaced output is replaced by its replacement when that is a variable of the same
    block, and any variable of a block used after it becomes an output. ``params`` replaces
    the parameter list; ``vmap`` seeds the replacements (e.g. parameters -> constants).
    """
    em = Emitter()
    em.vmap.update(vmap or {})
    new_blocks: List[Tuple[BindingBlock, List[Binding]]] = []
    for block in func.blocks:
        em.bindings = []
        for b in block.bindings:
            value = substitute(b.value, em.vmap)
            visit(b if value is b.value else Binding(b.var, value), em, block)
        new_blocks.append((block, em.bindings))
    body = substitute(func.body, em.vmap)
    blocks = _with_outputs(new_blocks, body, em.vmap)
    return Function(func.params if params is None else params, blocks, body, func.attrs)


def rewrite_calls(mod: IRModule,
                  replace: Callable[[Binding, Emitter], Optional[GraphExpr]]) -> IRModule:
    """``mod`` with each call binding of its graph functions given to ``replace(binding,
    emitter)``, which returns the variable's new value (emitting any parts it needs first with
    ``emitter.emit``) or None to keep the binding. A function nothing replaced in is kept as
    it was, and so is ``mod`` when nothing changed (``simplify_power``, ``conv_live_taps``)."""
    out = mod
    for name, func in graph_functions(mod):
        changed = []

        def visit(b: Binding, em: Emitter, _block):
            value = replace(b, em) if isinstance(b.value, Call) else None
            if value is None:
                em.emit(b)
                return
            em.emit(Binding(b.var, value))
            changed.append(b.var)
        new = rewrite_function(func, visit)
        if changed:
            out = out.with_function(name, new)
    return out


def _with_outputs(new_blocks, body, vmap) -> Tuple[BindingBlock, ...]:
    # Variables used after each block (later blocks and the body), computed back to front.
    later_uses = [set() for _ in new_blocks]
    seen = set(vars_in(body))
    for k in range(len(new_blocks) - 1, -1, -1):
        later_uses[k] = set(seen)
        for b in new_blocks[k][1]:
            seen.update(vars_in(b.value))
    out = []
    for k, (old, bindings) in enumerate(new_blocks):
        if not old.dataflow:
            out.append(BindingBlock(tuple(bindings), False, ()))
            continue
        bound = [b.var for b in bindings]
        bound_set = set(bound)
        outputs: List[GraphVar] = []
        for v in old.outputs:
            v = _resolve(v, vmap)
            if isinstance(v, GraphVar) and v in bound_set and v not in outputs:
                outputs.append(v)
        for v in bound:
            if v in later_uses[k] and v not in outputs:
                outputs.append(v)
        out.append(BindingBlock(tuple(bindings), True, tuple(outputs)))
    return tuple(b for b in out if b.bindings)


def _resolve(v: GraphExpr, vmap) -> GraphExpr:
    while isinstance(v, GraphVar) and v in vmap:
        v = vmap[v]
    return v


def unique_name(base: str, taken) -> str:
    """``base`` if free, else ``base1``, ``base2``, ... (``matmul``, ``matmul1``); a base that
    ends in a digit gets ``_1``, ``_2`` (``pack_nk16_1``) so the count stays readable."""
    if base not in taken:
        return base
    sep = "_" if base[-1:].isdigit() else ""
    n = 1
    while f"{base}{sep}{n}" in taken:
        n += 1
    return f"{base}{sep}{n}"


def iter_calls(func: Function) -> Iterator[Call]:
    """Every Call in the function's bindings and body (nested ones included)."""
    found: List[Call] = []
    for b in func.bindings():
        post_order_visit(b.value, lambda n: found.append(n) if isinstance(n, Call) else None)
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, Call) else None)
    return iter(found)
