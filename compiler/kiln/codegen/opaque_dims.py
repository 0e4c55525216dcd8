"""Kernels whose parameter shapes are expressions of variables no parameter binds.

A kernel's symbolic dimensions are bound from its arguments: ``n`` from the first parameter
whose shape has a plain ``n``. A derived dimension such as ``past + n`` is then computed and
checked by the runtime (``kiln.ir.derived_dims``). But a fused kernel may see ``b * s`` only
as a whole: ``sum(x: (b * s, 8)) -> (b * s, 1)`` after a reshape, with neither ``b`` nor ``s``
in any shape of its own. Such a kernel cannot recover ``b`` and ``s``, and need not: if its
body uses them only inside ``b * s``, the expression is one unknown. ``abstract_unbound_dims``
turns every such expression into a fresh variable (named after the expression, for messages),
everywhere in the function: buffer shapes, loop extents, indices. The runtime then binds it
from the argument like any symbolic dimension and checks it equal across the arguments. If the
body also uses ``b`` on its own, the kernel is refused with a message naming the variable,
unless ``b`` can be solved from a whole: ``b = E - n`` from ``b + n`` with ``n`` bound, or
``h = floor(E / 2)`` from ``h * 2`` (a conv after a symbolic 2x Resize: its schedule writes
``(h * 2 + 2) * 2`` as ``h * 4 + 4``).
"""
from __future__ import annotations

from typing import Dict, List

from ..ir.analysis import expr_equal
from ..ir.expr import Buffer, FloorDiv, IntImm, PrimExpr, Var
from ..ir.function import PrimFunc
from ..ir.functor import collect, substitute, substitute_buffers, transform
from .errors import CodegenError


def _free_vars(e) -> List[Var]:
    return [v for v in collect(e, Var)]


def _solve(exprs, fresh, bound, solvers=None, inexact=None) -> Dict[Var, PrimExpr]:
    """Unbound variables recovered from bound wholes. ``past + n`` bound as ``E`` with ``n``
    bound gives ``past = E - n`` (a window ``mask[past + i]`` of a kernel whose output is
    ``(n, past + n)`` needs ``past`` itself). When a whole leaves its variables underdetermined
    (``past + seq`` with neither bound: a transpose of the KV cache), any split that gives every
    parameter shape its size computes the same, since the kernel then depends on them only
    through those shapes: the first variable takes ``E`` minus the rest, the others 0. Only
    wholes linear in their unbound variables with coefficient 1 are solved, and a whole ``c * v +
    rest`` in one unbound variable (``h * 2``) as ``v = floor((E - rest) / c)``; the caller
    checks that every parameter shape comes out right. ``solvers`` collects the indices of the
    wholes that solved some variable, ``inexact`` those solved by a floor division."""
    out: Dict[Var, PrimExpr] = {}
    for i, (e, whole) in enumerate(zip(exprs, fresh)):
        free = [v for v in _free_vars(e) if v not in bound and v not in out]
        if not free:
            continue
        zero = {v: IntImm(0, v.dtype) for v in free}
        rest = _simplify(substitute(substitute(e, out), zero))
        total = free[0]
        for v in free[1:]:
            total = total + v
        check = _simplify(substitute(e, out) - total - rest)
        if len(free) == 1 and not (isinstance(check, IntImm) and check.value == 0):
            # c * v + rest: the coefficient is e at v = 1 minus rest, which must be a constant
            c = _simplify(substitute(substitute(e, out), {free[0]: IntImm(1, free[0].dtype)}) - rest)
            if isinstance(c, IntImm) and c.value > 1 and _same(substitute(e, out), free[0] * c + rest):
                out[free[0]] = FloorDiv(whole - rest, c)
                if solvers is not None:
                    solvers.add(i)
                    inexact.add(i)
                continue
        if not (isinstance(check, IntImm) and check.value == 0):
            continue  # not linear with coefficient 1: left unbound (an error if used)
        out[free[0]] = whole - rest
        for v in free[1:]:
            out[v] = IntImm(0, v.dtype)
        if solvers is not None:
            solvers.add(i)
    return out


def _same(a, b) -> bool:
    d = _simplify(a - b)
    return isinstance(d, IntImm) and d.value == 0


def _simplify(e):
    from ..arith import simplify
    return simplify(e, {v: (0, 2 ** 62) for v in collect(e, Var)})


def abstract_unbound_dims(name: str, func: PrimFunc) -> PrimFunc:
    """``func`` with each parameter-shape expression over unbound variables replaced by a fresh
    variable (see the module docstring); ``func`` itself when there is none."""
    bound = set()
    for p in func.params:
        if isinstance(p, Var):
            bound.add(p)
        for d in p.shape if isinstance(p, Buffer) else ():
            if isinstance(d, Var):
                bound.add(d)
    exprs: List[PrimExpr] = []
    for p in func.params:
        for d in p.shape if isinstance(p, Buffer) else ():
            if isinstance(d, (Var, IntImm)) or all(v in bound for v in _free_vars(d)):
                continue
            if not any(expr_equal(d, e) for e in exprs):
                exprs.append(d)
    if not exprs:
        return func
    fresh: List[Var] = [Var(str(e), e.dtype) for e in exprs]
    unbound = {v for e in exprs for v in _free_vars(e) if v not in bound}
    solvers: set = set()
    inexact: set = set()
    solved = _solve(exprs, fresh, bound, solvers, inexact)
    # A whole whose variables the others solved is an expression of theirs (``seq + 1`` beside
    # ``seq - 1``, which binds seq: ``(seq - 1) + 2``), a derived dimension the runtime computes
    # and checks, not a second unknown that would have to agree with the first.
    wholes = [v if i in solvers or not all(u in bound or u in solved for u in _free_vars(e))
              else _simplify(substitute(e, solved)) for i, (e, v) in enumerate(zip(exprs, fresh))]

    def pre(n):
        if isinstance(n, PrimExpr) and not isinstance(n, (Var, IntImm)):
            for e, v in zip(exprs, wholes):
                if expr_equal(n, e):
                    return v
        return None

    def rewrite(node):
        return transform(node, lambda n: solved.get(n) if isinstance(n, Var) else None, pre)

    # Buffers are leaves to ``transform``: rebuild every buffer whose shape changes.
    bmap: Dict[Buffer, Buffer] = {}
    for b in collect(func, Buffer):
        shape = tuple(rewrite(d) for d in b.shape)
        if any(a is not c for a, c in zip(shape, b.shape)):
            bmap[b] = Buffer(b.name, shape, b.dtype, b.scope)
    params = tuple(bmap.get(p, p) if isinstance(p, Buffer) else p for p in func.params)
    body = substitute_buffers(rewrite(func.body), bmap)
    out = PrimFunc(params, body, func.attrs)
    unbound -= set(solved)
    # Each solving shape must come out as its whole. One solved by a floor division does when the
    # whole is a multiple of c, which the VM guarantees: it computes h * 2 from h and checks every
    # tensor against it before a kernel runs; called on its own with another size, the kernel
    # computes with the smaller h = floor(E / c) (extents increasing in h: nothing past a buffer).
    for i, (e, v) in enumerate(zip(exprs, fresh)):
        if i in solvers and i not in inexact and not _same(substitute(e, solved), v):
            raise CodegenError(f"kernel '{name}': cannot recover the symbolic dimensions of {e} "
                               f"from its arguments")
    left = [v for v in collect(out, Var) if v in unbound]
    for b in collect(out, Buffer):
        left += [v for d in b.shape for v in _free_vars(d) if v in unbound]
    if left:
        raise CodegenError(f"kernel '{name}': symbolic dimension '{left[0].name}' appears in its "
                           f"parameter shapes only inside {', '.join(map(str, exprs))}, but the kernel "
                           "also uses it on its own; no argument can bind it")
    return out
