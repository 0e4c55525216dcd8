"""ONNX ``If``: a branch picked at import time is inlined; one picked at run time becomes
``call_if`` over two private graph functions.

A condition known at import time (a constant, or a shape test that folds because the shapes
are known, as in most exported ``if x.dim() == 3`` code) inlines the taken branch's nodes into
the current function: no control flow is left. Otherwise each branch becomes a private graph
function whose parameters are the outer values it uses (weights included: ``bind_params``
later moves constant arguments into the branches), and the node becomes
``call_if(cond, then_f, else_f, args)``, which the VM runs with its IF instruction. Both
branches must then give outputs of the same dtypes and shapes; when they cannot (e.g. a branch
that only works for other input shapes), the error says which value to pin with
``from_onnx(..., const_inputs=...)``.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from ...ir.graph import (Constant, Function, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple,
                         TupleGetItem, TupleType, call_if)
from ...ir.analysis import expr_equal
from ...ir.graph_builder import FunctionBuilder
from ...transform.graph_util import use_counts
from .common import Ctx, ONNXImportError, Unsupported, converter, fmt_shape


def is_container(e) -> bool:
    from .sequence import is_container as is_seq_or_opt
    return is_seq_or_opt(e)


class _ScopedEnv(dict):
    """A subgraph's names: its own, then (read-only) the enclosing graph's."""

    def __init__(self, parent):
        super().__init__()
        self.parent = parent

    def __contains__(self, name):
        return dict.__contains__(self, name) or name in self.parent

    def __missing__(self, name):
        return self.parent[name]


class _CaptureEnv(_ScopedEnv):
    """A branch function's names: an outer value becomes a parameter of the branch the first
    time the branch uses it (constants stay constants)."""

    def __init__(self, parent, ctx: Ctx, outer: Ctx):
        super().__init__(parent)
        self.ctx, self.outer = ctx, outer
        self.captures: Dict[int, Tuple[GraphVar, GraphExpr]] = {}  # id(outer expr) -> (param, outer)

    def __missing__(self, name):
        return self._capture(name, self.parent[name])

    def _capture(self, name, e):
        from .sequence import OptValue, SeqValue
        if isinstance(e, SeqValue):  # a sequence: each element captured on its own
            return SeqValue([self._capture(f"{name}_{i}", x) for i, x in enumerate(e.items)], e.dtype)
        if isinstance(e, OptValue):
            return OptValue(None if e.value is None else self._capture(name, e.value))
        if isinstance(e, Constant):
            return e
        if id(e) not in self.captures:
            p = GraphVar(name if isinstance(e, GraphVar) else f"{name}_in", e.ty)
            # What is known about the outer value at import time stays known in the branch.
            if isinstance(e, GraphVar) and e in self.outer.known:
                self.ctx.known[p] = self.outer.known[e]
            if isinstance(e, GraphVar) and e in self.outer.sym:
                self.ctx.sym[p] = self.outer.sym[e]
            self.captures[id(e)] = (p, e)
        return self.captures[id(e)][0]


def _subgraph_constants(g, env) -> None:
    """A subgraph's own initializers (rare, but allowed) as constants."""
    from .importer import _to_numpy
    for t in g.initializer:
        env[t.name] = Constant(_to_numpy(t))


def _convert_graph(ctx: Ctx, g, env) -> List[GraphExpr]:
    from .importer import _convert_node
    _subgraph_constants(g, env)
    outer_env, ctx.env = ctx.env, env   # nested Ifs see this subgraph's names
    try:
        for idx, node in enumerate(g.node):
            _convert_node(ctx, node, idx, env, ctx.opset)
        return [env[o.name] for o in g.output]
    finally:
        ctx.env = outer_env


@converter("If", since=11)
def if_(ctx, node, ins, attrs):
    cond = ins[0]
    branches = attrs["then_branch"], attrs["else_branch"]
    value = ctx.value(cond)
    if value is not None:
        if value.size != 1:
            raise Unsupported(f"the condition has {value.size} elements; If needs exactly one")
        return _convert_graph(ctx, branches[0] if bool(value.reshape(-1)[0]) else branches[1],
                              _ScopedEnv(ctx.env))
    return _runtime_if(ctx, node, cond, branches)


def subgraph_context(ctx: Ctx):
    """(builder, context, env) to import an ONNX subgraph (an If branch, a Loop body) into a
    private graph function of its own: the context shares ``ctx``'s known values, opset,
    symbols and function table, and ``env`` reads the outer scope's values as captures."""
    fb = FunctionBuilder((), attrs={"private": True})
    bctx = Ctx(fb, ctx.known, ctx.opset)
    bctx.sym = ctx.sym
    bctx.functions, bctx.func_name = ctx.functions, ctx.func_name
    env = _CaptureEnv(ctx.env, bctx, ctx)
    bctx.env = env
    return fb, bctx, env


def _branch(ctx: Ctx, g, what: str, cond):
    """Import subgraph ``g`` as a private function; returns (function, outputs, env, structure)
    where the function's parameters are every outer value the branch captured, in capture
    order. A sequence output is returned as its elements (``structure``: per output, None for
    a tensor or the sequence's (length, dtype))."""
    fb, bctx, env = subgraph_context(ctx)
    with fb.dataflow():
        try:
            outs = _convert_graph(bctx, g, env)
        except ONNXImportError as e:  # names the inner node; the If converter adds this node
            raise Unsupported(
                f"{what}: {e}. (The condition is only known at run time, so Kiln imports both branches "
                f"for the same input shapes; if this branch does not apply to them, fix the graph inputs "
                f"the condition depends on with from_onnx(..., const_inputs={{name: value}}))",
                needs_constant=e.needs_constant) from None
        from .sequence import SeqValue
        structure = [(len(e.items), e.dtype) if isinstance(e, SeqValue) else None for e in outs]
        outs = [x for e in outs for x in (e.items if isinstance(e, SeqValue) else (e,))]
        for e in outs:
            if is_container(e):
                raise _needs_known_condition(ctx, cond, f"{what} gives an optional")
            if ctx.is_symbolic(e):
                raise Unsupported(f"{what} output is a shape value computed at import time; it "
                                  "cannot cross a run-time If")
        final = [e if isinstance(e, Constant) else fb.emit_output(e) for e in outs]
    if not final:
        raise _needs_known_condition(ctx, cond, f"{what} gives only empty sequences")
    fb.params = tuple(p for p, _ in env.captures.values())
    return fb.finish(final[0] if len(final) == 1 else GraphTuple(tuple(final))), final, env, structure


def _needs_known_condition(ctx: Ctx, cond, why: str) -> Unsupported:
    """The error for a branch Kiln can only import with its condition known."""
    from .loop import _input_behind
    return Unsupported(f"{why}, which Kiln resolves at import time: the condition must be a "
                       "constant (fix the graph input it depends on with from_onnx(..., "
                       "const_inputs={name: value}))", needs_constant=_input_behind(ctx, cond))


def _same_types(node, then_outs, else_outs):
    for k, (a, b) in enumerate(zip(then_outs, else_outs)):
        ta, tb = a.ty, b.ty
        if not (isinstance(ta, TensorType) and isinstance(tb, TensorType)):
            raise Unsupported(f"output {k} is not a tensor in both branches")
        same_shape = ta.shape is not None and tb.shape is not None and len(ta.shape) == len(tb.shape) and \
            all(expr_equal(x, y) for x, y in zip(ta.shape, tb.shape))
        if ta.dtype != tb.dtype or not same_shape:
            raise Unsupported(
                f"the condition {node.input[0]!r} is only known at run time, and output {k} differs between "
                f"the branches (then: {ta.dtype}{fmt_shape(ta.shape)}, else: {tb.dtype}{fmt_shape(tb.shape)}); "
                f"Kiln compiles both branches for the same shapes. Fix the graph inputs the condition "
                f"depends on with from_onnx(..., const_inputs={{name: value}}) to keep one branch")


def _runtime_if(ctx: Ctx, node, cond, branches):
    if len(branches[0].output) != len(branches[1].output):
        raise Unsupported("the branches have different numbers of outputs")
    then_f, then_outs, then_env, structure = _branch(ctx, branches[0], "then branch", cond)
    else_f, else_outs, else_env, else_structure = _branch(ctx, branches[1], "else branch", cond)
    if structure != else_structure:
        raise _needs_known_condition(ctx, cond, "the branches give sequences of different lengths "
                                     f"or dtypes ({structure} and {else_structure})")
    _same_types(node, then_outs, else_outs)
    # Both branches take the same arguments: every outer value either of them uses at run time
    # (a capture used only to fold shapes at import time is not passed).
    outer: Dict[int, GraphExpr] = {}
    for func, env in ((then_f, then_env), (else_f, else_env)):
        uses = use_counts(func)
        for key, (p, e) in env.captures.items():
            if uses[p]:
                outer.setdefault(key, e)
    k = sum(1 for n in ctx.functions if n.endswith("_then"))
    names = [f"{ctx.func_name}_if{k}_then", f"{ctx.func_name}_if{k}_else"]
    for func, env, fname in ((then_f, then_env, names[0]), (else_f, else_env, names[1])):
        params = tuple(env.captures[key][0] if key in env.captures else GraphVar(f"unused{i}", e.ty)
                       for i, (key, e) in enumerate(outer.items()))
        ctx.functions[fname] = Function(params, func.blocks, func.body, func.attrs)
    args = list(outer.values())
    for a in args + [cond]:
        if isinstance(a, GraphVar):
            ctx.used.add(a)
    ty = then_outs[0].ty if len(then_outs) == 1 else TupleType(tuple(o.ty for o in then_outs))
    var = ctx.fb.emit(call_if(cond, names[0], names[1], args, ty))
    flat = [var] if len(then_outs) == 1 else [ctx.fb.emit(TupleGetItem(var, i)) for i in range(len(then_outs))]
    return _regroup(flat, structure)


def _regroup(flat: list, structure: list) -> list:
    """The If's outputs from its flat results: a sequence output's elements become a SeqValue."""
    from .sequence import SeqValue
    out, k = [], 0
    for st in structure:
        if st is None:
            out.append(flat[k])
            k += 1
        else:
            out.append(SeqValue(flat[k:k + st[0]], st[1]))
            k += st[0]
    return out[0] if len(out) == 1 else out

