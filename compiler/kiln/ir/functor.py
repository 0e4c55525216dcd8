"""Generic traversal and rewriting of IR nodes, driven by dataclass fields.

``Var`` and ``Buffer`` are leaves here: their identity is what matters, so a rewrite never
rebuilds them unless the callback replaces them on purpose (e.g. ``substitute``).

>>> from .expr import Var
>>> i, j = Var("i"), Var("j")
>>> substitute(i + 1, {i: j * 2}).script()            # doctest: +SKIP
'j * 2 + 1'
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Callable, Dict, Mapping, Optional, Set

from .expr import Buffer, Node, PrimExpr, Range, Var
from .stmt import BufferRegion, BufferStore, Evaluate, IterVar


@lru_cache(maxsize=None)
def node_fields(cls) -> tuple:
    """Names of the dataclass fields of a node class, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls))


_LEAVES: tuple = ()
# class -> the fields that may hold child nodes: () for leaves and non-dataclasses. Traversals
# run over every node of big programs, so the per-node work is one dict lookup.
_CHILD_FIELDS: Dict[type, tuple] = {}


def _child_fields(cls) -> tuple:
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        global _LEAVES
        if not _LEAVES:
            from .graph import GraphVar  # graph variables are identities too (late: import cycle)
            _LEAVES = (Var, Buffer, GraphVar)
        leaf = issubclass(cls, _LEAVES) or not dataclasses.is_dataclass(cls)
        fields = _CHILD_FIELDS[cls] = () if leaf else node_fields(cls)
    return fields


def is_leaf(node) -> bool:
    _child_fields(type(node))
    return isinstance(node, _LEAVES)


def _flatten(value, out: list) -> None:
    for v in value:
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            _flatten(v, out)


# class -> a function listing a node's children, written out field by field for that class
# (made on first use): the traversals below call it once per node of every walk, and a loop
# over field names with getattr cost twice as much.
_CHILDREN_OF: Dict[type, Callable[[Node], list]] = {}


def _no_children(node) -> list:
    return []


def _children_function(cls) -> Callable[[Node], list]:
    fields = _child_fields(cls)
    if not fields:
        fn = _no_children
    else:
        lines = ["def children(n):", "    out = []"]
        for name in fields:
            lines += [f"    v = n.{name}",
                      "    if isinstance(v, Node):",
                      "        out.append(v)",
                      "    elif isinstance(v, (tuple, list)):",
                      "        _flatten(v, out)"]
        lines.append("    return out")
        scope = {"Node": Node, "_flatten": _flatten}
        exec("\n".join(lines), scope)   # noqa: S102 - field names come from dataclass fields
        fn = scope["children"]
    _CHILDREN_OF[cls] = fn
    return fn


def _children(node) -> list:
    fn = _CHILDREN_OF.get(type(node))
    if fn is None:
        fn = _children_function(type(node))
    return fn(node)


def children(node: Node):
    """The direct child nodes of ``node`` (none for leaves)."""
    return iter(_children(node))


def post_order_visit(node: Node, fn: Callable[[Node], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""
    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        if done:
            fn(n)
            continue
        stack.append((n, True))
        kids = _children(n)
        for k in reversed(kids):
            stack.append((k, False))


def pre_order_visit(node: Node, fn: Callable[[Node], Optional[bool]]) -> None:
    """Call ``fn`` on every node, parents first; if it returns False, skip that node's children."""
    stack = [node]
    while stack:
        n = stack.pop()
        if fn(n) is False:
            continue
        kids = _children(n)
        if kids:
            kids.reverse()
            stack.extend(kids)


def _rewrite_value(value, rec):
    if isinstance(value, Node):
        return rec(value)
    if isinstance(value, tuple):
        new = tuple(_rewrite_value(v, rec) for v in value)
        return value if all(a is b for a, b in zip(new, value)) else new
    return value


# Nodes that hold no statement (expressions, buffers, regions, leaf statements): replace_stmts
# does not enter them.
_NO_STMT_INSIDE = (PrimExpr, Buffer, BufferRegion, IterVar, Range, BufferStore, Evaluate)


def replace_stmts(node: Node, replacements: Mapping[int, Node],
                  within: Optional[Set[int]] = None) -> Node:
    """``node`` with each statement whose ``id`` is a key of ``replacements`` replaced by its
    value (not visited further); unchanged parts are shared. Expressions, buffers, regions and
    leaf statements are not entered (no statement lies inside them), so this walks the loop and
    block skeleton only, not every index expression as ``transform`` with a ``pre`` would.
    ``within``, when the caller knows it, is the ids of the statements that hold the replaced
    ones (their ancestors, e.g. a schedule ``Site``'s): only those are entered, so the cost is
    the paths to the replaced statements, not the whole tree.

    >>> body = replace_stmts(body, {id(old_loop): new_loop})    # doctest: +SKIP
    """
    def pre(n: Node) -> Optional[Node]:
        r = replacements.get(id(n))
        if r is not None:
            return r
        if within is not None:
            return None if id(n) in within else n
        return n if isinstance(n, _NO_STMT_INSIDE) else None
    return transform(node, post=lambda n: None, pre=pre)


def transform(node: Node, post: Callable[[Node], Optional[Node]],
              pre: Callable[[Node], Optional[Node]] | None = None) -> Node:
    """Rebuild ``node`` bottom-up. ``post(n)`` sees each node after its children were rewritten
    and returns a replacement or None (keep). ``pre(n)``, if given, may return a replacement
    before descending; the replacement is not visited further. Unchanged subtrees are shared.
    """
    def rec(n: Node) -> Node:
        if pre is not None:
            r = pre(n)
            if r is not None:
                return r
        fields = _CHILD_FIELDS.get(type(n))
        if fields is None:
            fields = _child_fields(type(n))
        if fields:
            changes = {}
            for name in fields:
                old = getattr(n, name)
                if isinstance(old, Node):
                    new = rec(old)
                elif isinstance(old, tuple):
                    new = _rewrite_value(old, rec)
                else:
                    continue
                if new is not old:
                    changes[name] = new
            if changes:
                n = _replace(n, changes)
        r = post(n)
        return n if r is None else r
    try:
        return rec(node)
    finally:
        # ``rec`` reaches itself through its closure cell: a reference cycle that would keep
        # ``post`` and ``pre``, and what they hold (a pass's map to the weights it replaces),
        # alive until the garbage collector runs. Emptying the cell breaks it.
        rec = None  # noqa: F841


def _replace(n: Node, changes: dict) -> Node:
    # Derived dtypes (BinaryOp, BufferLoad, ...) are recomputed when their inputs change type.
    kwargs = {name: changes.get(name, getattr(n, name)) for name in node_fields(type(n))}
    if "dtype" in kwargs and "dtype" not in changes and _dtype_is_derived(n) \
            and not getattr(n, "own_dtype", False):
        kwargs["dtype"] = None
    return type(n)(**kwargs)


def _dtype_is_derived(n: Node) -> bool:
    for f in dataclasses.fields(type(n)):
        if f.name == "dtype":
            return f.default is None
    return False


def substitute(node: Node, vmap: Mapping[Var, Node]) -> Node:
    """Replace variables by expressions everywhere in ``node`` (also inside buffer shapes are
    NOT touched: buffers are leaves)."""
    if not vmap:
        return node
    return transform(node, lambda n: vmap.get(n) if isinstance(n, Var) else None)


def substitute_buffers(node: Node, bmap: Mapping[Buffer, Buffer]) -> Node:
    """Replace buffers (in loads, stores, regions, allocations) by others."""
    if not bmap:
        return node
    return transform(node, lambda n: bmap.get(n) if isinstance(n, Buffer) else None)


def collect(node: Node, cls) -> list:
    """All nodes of type ``cls`` below ``node``, in pre-order, without duplicates."""
    seen: Dict[int, Node] = {}

    def fn(n):
        if isinstance(n, cls) and id(n) not in seen:
            seen[id(n)] = n
    pre_order_visit(node, fn)
    return list(seen.values())


def uses_var(node: Node, var: Var) -> bool:
    found = []

    def fn(n):
        if found:
            return False
        if n is var:
            found.append(n)
        return None
    pre_order_visit(node, fn)
    return bool(found)
