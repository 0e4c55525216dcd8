"""A ``Loop`` whose condition is only known at run time, under a trip count known at compile
time: guarded calls of one private body function.

``for i in range(M): if not cond: break; cond, x = body(i, cond, x)`` with M fixed (a model's
``for step in range(10)`` with a data-dependent ``break``) becomes M ``call_if`` instructions::

    cond, x = call_if(cond, main_loop0_body, main_loop0_skip, (i, cond, x, captures...))

where ``main_loop0_body`` is the ONNX body imported once as a private graph function (its
parameters: the iteration number, the condition, the loop-carried values, then the outer values
it uses, as an ``If`` branch captures them) and ``main_loop0_skip`` returns ``(false, x...)``
unchanged. The VM runs them with its IF instruction, so the iterations the condition stops are
not computed. Loop-carried values must keep their dtype and shape from one iteration to the
next (both branches return the same types), and the loop has no scan outputs (their length
would be a run-time value).
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from ...ir.analysis import expr_equal
from ...ir.graph import (Constant, Function, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple,
                         TupleGetItem, TupleType, call_if)
from ...ir.graph_builder import FunctionBuilder
from ...transform.graph_util import use_counts
from .common import Ctx, ONNXImportError, Unsupported, fmt_shape
from .control_flow import _CaptureEnv, _convert_graph

_BOOL = TensorType((), "bool")


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


def _body_function(ctx: Ctx, g, types: List[TensorType]) -> Tuple[Function, list]:
    """ONNX body graph ``g`` as a private function of (iteration, condition, carried...,
    captures...) returning (condition, carried...); also the outer values of the captures."""
    from .sequence import is_container
    fb = FunctionBuilder((), attrs={"private": True})
    bctx = Ctx(fb, ctx.known, ctx.opset)
    bctx.sym = ctx.sym
    bctx.functions, bctx.func_name = ctx.functions, ctx.func_name
    env = _CaptureEnv(ctx.env, bctx, ctx)
    bctx.env = env
    formal_types = [TensorType((), "int64"), _BOOL] + list(types)
    formals = [GraphVar(vi.name, t) for vi, t in zip(g.input, formal_types)]
    for vi, f in zip(g.input, formals):
        env[vi.name] = f
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
        for k, (o, t) in enumerate(zip(outs[1:], types)):
            if not _same_type(o.ty, t):
                raise Unsupported(
                    f"loop-carried value {k} goes in as {t.dtype}{fmt_shape(t.shape)} and comes out as "
                    f"{o.ty.dtype}{fmt_shape(o.ty.shape)}: under a condition known only at run time, "
                    f"Kiln calls one compiled body per iteration, so the carried values must keep "
                    f"their shapes (or fix the inputs the condition depends on with const_inputs)")
        final = [o if isinstance(o, Constant) else fb.emit_output(o) for o in outs]
    fb.params = tuple(formals)
    func = fb.finish(GraphTuple(tuple(final)))
    # the outer values the body uses at run time (one used only to fold shapes is not passed)
    uses = use_counts(func)
    captures = [(p, e) for p, e in env.captures.values() if uses[p]]
    func = Function(tuple(formals) + tuple(p for p, _ in captures), func.blocks, func.body, func.attrs)
    return func, [e for _, e in captures]


def _skip_function(params, n_carried: int) -> Function:
    """(iteration, condition, carried..., captures...) -> (false, carried...)."""
    fb = FunctionBuilder((), attrs={"private": True})
    ps = [GraphVar(f"p{k}", p.ty) for k, p in enumerate(params)]
    with fb.dataflow():
        outs = [Constant(np.asarray(False))] + [fb.emit_output(p) for p in ps[2:2 + n_carried]]
    fb.params = tuple(ps)
    return fb.finish(GraphTuple(tuple(outs)))


def guarded_iterations(ctx: Ctx, g, cond: GraphExpr, carried: list, start: int, trip: int,
                       behind=None) -> list:
    """Iterations ``start .. trip - 1`` of a Loop with body ``g``, each run only while the
    run-time condition ``cond`` holds; returns the loop-carried values after them. ``behind``
    names the graph input the condition depends on (the one to fix when this cannot work)."""
    types = [c.ty for c in carried]
    cond = _scalar_condition(ctx, cond)
    try:
        body_f, outer = _body_function(ctx, g, types)
    except Unsupported as e:
        raise Unsupported(str(e), needs_constant=e.needs_constant or behind) from None
    skip_f = _skip_function(body_f.params, len(types))
    k = sum(1 for n in ctx.functions if n.startswith(f"{ctx.func_name}_loop") and n.endswith("_body"))
    names = f"{ctx.func_name}_loop{k}_body", f"{ctx.func_name}_loop{k}_skip"
    ctx.functions[names[0]], ctx.functions[names[1]] = body_f, skip_f
    for a in outer:
        if isinstance(a, GraphVar):
            ctx.used.add(a)
    ty = TupleType((_BOOL,) + tuple(types))
    for i in range(start, trip):
        for a in [cond] + carried:
            if isinstance(a, GraphVar):
                ctx.used.add(a)
        args = [Constant(np.asarray(i, np.int64)), cond] + carried + outer
        v = ctx.fb.emit(call_if(cond, names[0], names[1], args, ty))
        cond = ctx.fb.emit(TupleGetItem(v, 0))
        carried = [ctx.fb.emit(TupleGetItem(v, 1 + j)) for j in range(len(types))]
    return carried
