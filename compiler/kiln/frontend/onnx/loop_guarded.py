"""A ``Loop`` whose condition is only known at run time: guarded calls of private body
functions, for as many iterations as can run.

``for i in range(M): if not cond: break; cond, x = body(i, cond, x)`` (a model's ``for step in
range(10)`` with a data-dependent ``break``) becomes one ``call_if`` per iteration::

    cond, x = call_if(cond, main_loop0_body, main_loop0_skip, (i, cond, x, captures...))

where ``main_loop0_body`` is the ONNX body imported as a private graph function (its
parameters: the iteration number, the condition, the loop-carried values, then the outer values
it uses, as an ``If`` branch captures them) and ``main_loop0_skip`` returns ``(false, x...)``
unchanged. The VM runs them with its IF instruction, so the iterations the condition stops are
not computed.

How many iterations: at most M, and fewer when the condition becomes false for a reason known
at import time. Iteration k only runs when every earlier body ran, so a loop-carried value that
the bodies compute from constants (the iteration counter the TorchScript exporter carries, with
M = INT64_MAX and ``cond = keep_going and counter < 10``) is known inside each body: the body
is specialised on it (one function per iteration then; otherwise one function serves them all),
and when the condition it returns is provably false (``x and false``) no further iteration is
emitted. A trip count known only at run time as a symbolic dim (loop.py bounds it) runs one
body for all iterations, BLOCK of them per private block function, so that the iterations past
the end cost one skipped IF per block. Loop-carried values must keep their dtype and shape
from one iteration to the next (both branches return the same types), and the loop has no scan
outputs (their length would be a run-time value).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ...ir.analysis import expr_equal
from ...ir.graph import (Call, Constant, Function, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple,
                         TupleGetItem, TupleType, call_if)
from ...ir.graph_builder import FunctionBuilder
from ...transform.graph_util import use_counts
from .common import Ctx, ONNXImportError, Unsupported, fmt_shape
from .control_flow import _convert_graph, subgraph_context

_BOOL = TensorType((), "bool")
# The most guarded iterations emitted for a loop whose trip count does not bound it (M absent or
# huge): past this the condition must become provably false, or the loop is refused.
MAX_GUARDED = 256


def _scalar_condition(ctx: Ctx, c: GraphExpr) -> GraphExpr:
    """The condition as a 0-d bool tensor (ONNX allows a one-element tensor of any rank)."""
    if c.ty.dtype != "bool":
        raise Unsupported(f"the loop condition must be bool, got {c.ty.dtype}")
    if len(c.ty.shape) == 0:
        return c
    return ctx.op("reshape", c, shape=())


def _same_type(a, b) -> bool:
    return (isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype == b.dtype
            and len(a.shape) == len(b.shape) and all(expr_equal(x, y) for x, y in zip(a.shape, b.shape)))


def known_bool(ctx: Ctx, e: GraphExpr) -> Optional[bool]:
    """``e``'s truth when the import can tell: a constant, or ``a and b`` with one side known
    false, ``a or b`` with one side known true, ``not a``, a reshape of one of them."""
    v = ctx.value(e)
    if v is not None:
        return bool(np.asarray(v).reshape(-1)[0])
    producers = {b.var: b.value for b in ctx.fb._current or ()}  # this dataflow block, so far
    call = producers.get(e) if isinstance(e, GraphVar) else None
    if not isinstance(call, Call):
        return None
    if call.op == "logical_and" and any(known_bool(ctx, a) is False for a in call.args):
        return False
    if call.op == "logical_or" and any(known_bool(ctx, a) is True for a in call.args):
        return True
    if call.op == "logical_not":
        inner = known_bool(ctx, call.args[0])
        return None if inner is None else not inner
    if call.op in ("reshape", "squeeze", "expand_dims"):
        return known_bool(ctx, call.args[0])
    return None


def _body_function(ctx: Ctx, g, types: List[TensorType], known: list, i: Optional[int],
                   bounded: bool = False):
    """ONNX body graph ``g`` as a private function of (iteration, condition, carried...,
    captures...) returning (condition, carried...), with the carried values whose ``known``
    entry is not None (and the iteration number, unless ``i`` is None) fixed to those values.
    With ``bounded``, a run-time trip count follows the carried values as a parameter and the
    returned condition also requires ``i + 1 < trip count``, so that a later iteration is skipped
    by its IF alone. Returns the function, the outer values of its captures, whether the
    condition it returns is known false, and the carried values it returns that are known."""
    from .sequence import is_container
    fb, bctx, env = subgraph_context(ctx)
    formal_types = [TensorType((), "int64"), _BOOL] + list(types)
    formals = [GraphVar(vi.name, t) for vi, t in zip(g.input, formal_types)]
    trip_count = GraphVar("loop_trip_count", TensorType((), "int64")) if bounded else None
    fixed = [None if i is None else np.asarray(i, np.int64), None] + list(known)
    for vi, f, value in zip(g.input, formals, fixed):
        env[vi.name] = f if value is None else Constant(value)
    with fb.dataflow():
        try:
            outs = _convert_graph(bctx, g, env)
        except ONNXImportError as e:
            raise Unsupported(f"loop body: {e}", needs_constant=e.needs_constant) from None
        outs = outs[:1 + len(types)]
        if any(is_container(o) for o in outs):
            raise Unsupported("a loop-carried sequence or optional under a condition known only at "
                              "run time is not supported")
        outs[0] = _scalar_condition(bctx, outs[0])
        if bounded:
            nxt = Constant(np.asarray(i + 1, np.int64)) if i is not None else \
                bctx.op("add", formals[0], Constant(np.asarray(1, np.int64)))
            outs[0] = bctx.op("logical_and", outs[0], bctx.op("less", nxt, trip_count))
        stops = known_bool(bctx, outs[0]) is False
        for k, (o, t) in enumerate(zip(outs[1:], types)):
            if not _same_type(o.ty, t):
                raise Unsupported(
                    f"loop-carried value {k} goes in as {t.dtype}{fmt_shape(t.shape)} and comes out as "
                    f"{o.ty.dtype}{fmt_shape(o.ty.shape)}: under a condition known only at run time, "
                    f"Kiln calls a compiled body per iteration, so the carried values must keep "
                    f"their shapes (or fix the inputs the condition depends on with const_inputs)")
        known_out = [bctx.value(o) for o in outs[1:]]
        final = [o if isinstance(o, Constant) else fb.emit_output(o) for o in outs]
    fb.params = tuple(formals)
    func = fb.finish(GraphTuple(tuple(final)))
    # the outer values the body uses at run time (one used only to fold shapes is not passed)
    uses = use_counts(func)
    captures = [(p, e) for p, e in env.captures.values() if uses[p]]
    func = Function(tuple(formals) + ((trip_count,) if bounded else ()) + tuple(p for p, _ in captures),
                    func.blocks, func.body, func.attrs)
    return func, [e for _, e in captures], stops, known_out


def _skip_function(params, n_carried: int) -> Function:
    """(iteration, condition, carried..., captures...) -> (false, carried...)."""
    fb = FunctionBuilder((), attrs={"private": True})
    ps = [GraphVar(f"p{k}", p.ty) for k, p in enumerate(params)]
    with fb.dataflow():
        outs = [Constant(np.asarray(False))] + [fb.emit_output(p) for p in ps[2:2 + n_carried]]
    fb.params = tuple(ps)
    return fb.finish(GraphTuple(tuple(outs)))


# Iterations per block of a loop bounded at run time: a block is skipped by one IF once the
# condition is false, so a short run of a long bound costs about bound / BLOCK skipped IFs.
BLOCK = 16


def _blocks(ctx: Ctx, base: str, ty: TupleType, args: list, start: int, end: int) -> list:
    """Iterations ``start .. end - 1`` of body ``{base}_body`` (see guarded_iterations), BLOCK
    to a private block function that IF calls while the condition holds; ``args`` are (cond,
    carried..., trip count, captures...). Returns the carried values after them."""
    n = len(ty.fields) - 1
    sig = [TensorType((), "int64")] + [a.ty for a in args]  # (first iteration, cond, carried, ...)
    outer_args = list(args)
    for b0 in range(start, end, BLOCK):
        fb = FunctionBuilder((), attrs={"private": True})
        ps = [GraphVar(f"p{k}", t) for k, t in enumerate(sig)]
        with fb.dataflow():
            c, cs, rest = ps[1], ps[2:2 + n], ps[2 + n:]
            for i in range(b0, min(b0 + BLOCK, end)):
                v = fb.emit(call_if(c, f"{base}_body", f"{base}_body_skip",
                                    [Constant(np.asarray(i, np.int64)), c] + cs + rest, ty))
                c = fb.emit(TupleGetItem(v, 0))
                cs = [fb.emit(TupleGetItem(v, 1 + j)) for j in range(n)]
            outs = [fb.emit_output(x) for x in [c] + cs]
        fb.params = tuple(ps)
        name = f"{base}_block{b0}"
        ctx.functions[name] = fb.finish(GraphTuple(tuple(outs)))
        if f"{base}_block_skip" not in ctx.functions:
            ctx.functions[f"{base}_block_skip"] = _skip_function(tuple(ps), n)
        v = ctx.fb.emit(call_if(outer_args[0], name, f"{base}_block_skip",
                                [Constant(np.asarray(b0, np.int64))] + outer_args, ty))
        outer_args = [ctx.fb.emit(TupleGetItem(v, j)) for j in range(n + 1)] + outer_args[1 + n:]
    return outer_args[1:1 + n]


def guarded_iterations(ctx: Ctx, g, cond: GraphExpr, carried: list, start: int,
                       trip: Optional[int], behind=None, bound: Optional[GraphExpr] = None) -> list:
    """Iterations ``start, start + 1, ...`` (below ``trip``; None: no trip count) of a Loop with
    body ``g``, each run only while the run-time condition ``cond`` holds (and ``i < bound``,
    a run-time trip count, when given); returns the loop-carried values after them. ``behind``
    names the graph input the condition depends on (the one to fix when this cannot work)."""
    types = [c.ty for c in carried]
    cond = _scalar_condition(ctx, cond)
    if bound is not None:
        if len(bound.ty.shape) != 0:
            bound = ctx.op("reshape", bound, shape=())
        # the first iteration's guard; each body returns the next one's (see _body_function)
        cond = ctx.op("logical_and", cond, ctx.op("less", Constant(np.asarray(start, np.int64)), bound))
    known = [ctx.value(c) for c in carried]
    end = start + MAX_GUARDED if trip is None or trip - start > MAX_GUARDED else trip
    k = 0
    while any(n.startswith(f"{ctx.func_name}_loop{k}_") for n in ctx.functions):
        k += 1
    base, shared = f"{ctx.func_name}_loop{k}", None
    ty = TupleType((_BOOL,) + tuple(types))
    if bound is not None:  # bounded at run time: one body for all, iterations in blocks
        try:
            made = _body_function(ctx, g, types, [None] * len(types), None, True)
        except Unsupported as e:
            raise Unsupported(str(e), needs_constant=e.needs_constant or behind) from None
        ctx.functions[f"{base}_body"] = made[0]
        ctx.functions[f"{base}_body_skip"] = _skip_function(made[0].params, len(types))
        args = [cond] + carried + [bound] + made[1]
        for a in args:
            if isinstance(a, GraphVar):
                ctx.used.add(a)
        return _blocks(ctx, base, ty, args, start, end)
    i, stopped = start, False
    while i < end and not stopped:
        specialised = any(v is not None for v in known)
        if specialised or shared is None:
            try:
                # the iteration number is fixed only in a body specialised anyway
                made = _body_function(ctx, g, types, known, i if specialised else None, bound is not None)
            except Unsupported as e:
                raise Unsupported(str(e), needs_constant=e.needs_constant or behind) from None
            name = f"{base}_body{i}" if specialised else f"{base}_body"
            ctx.functions[name] = made[0]
            ctx.functions[f"{name}_skip"] = _skip_function(made[0].params, len(types))
            if not specialised:
                shared = made
        else:
            made, name = shared, f"{base}_body"
        _, outer, stopped, known = made
        for a in [cond] + carried + outer + ([bound] if bound is not None else []):
            if isinstance(a, GraphVar):
                ctx.used.add(a)
        args = [Constant(np.asarray(i, np.int64)), cond] + carried + ([bound] if bound is not None else []) + outer
        v = ctx.fb.emit(call_if(cond, name, f"{name}_skip", args, ty))
        cond = ctx.fb.emit(TupleGetItem(v, 0))
        carried = [ctx.fb.emit(TupleGetItem(v, 1 + j)) for j in range(len(types))]
        i += 1
    if not stopped and bound is None and (trip is None or i < trip):
        raise Unsupported(f"the condition is only known at run time and the loop is not bounded: "
                          f"after {MAX_GUARDED} iterations it is not provably false, and the trip "
                          f"count is {'absent' if trip is None else trip} (fix the graph input the "
                          f"condition depends on with from_onnx(..., const_inputs={{name: value}}))",
                          needs_constant=behind)
    return carried
