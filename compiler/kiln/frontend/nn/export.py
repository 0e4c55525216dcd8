"""``export``: trace a Module's methods into graph functions of one ``IRModule``.

For each ``spec`` entry ``{"forward": {"x": spec.Tensor((1, 784), "float32")}}`` the method
``forward`` is called once with symbolic ``Tensor``s; every operation it performs emits a
binding, and the graph function ``forward`` is

    def forward(x, fc1.weight, fc1.bias, ...):     # spec inputs (spec order), then parameters
        with dataflow():                            # (named_parameters order)
            lv0 = linear(x, fc1.weight) ...
            gv3 = add(lv2, fc2.bias)                # returned values are the block's outputs
        return gv3                                  # a Tuple for several results

Bindings that no result depends on are dropped. Several entries (``prefill``, ``decode``)
give several functions sharing the symbolic dims of the same name and the same parameter
list. The function's ``num_input`` attribute counts the spec inputs, so later passes
(``bind_params``) know where the weights start. ``param_spec`` lists ``(name, spec.Tensor)``
for the weights in argument order.

>>> mod, param_spec = MLP().export({"forward": {"x": spec.Tensor(("n", 784))}})   # doctest: +SKIP
>>> param_spec[0]                                                                   # doctest: +SKIP
('fc1.weight', Tensor((256, 784), 'float32'))
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Tuple

from ...ir.derived_dims import with_bounds
from ...ir.expr import Var
from ...ir.function import IRModule
from ...ir.graph import (Call, Function, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple,
                         TupleGetItem)
from ...ir.graph_builder import FunctionBuilder
from . import spec as spec_mod
from .spec import SpecError
from .tensor import _TRACES, Tensor, Trace


def _signature_inputs(module, name: str, fspec) -> List[Tuple[str, spec_mod.Tensor]]:
    """The spec inputs of method ``name`` in spec order, after checking them against the
    method's signature."""
    cls = type(module).__name__
    method = getattr(module, name, None)
    if not callable(method):
        raise SpecError(f"export: {cls} has no method {name!r}; spec keys name the methods to "
                        "export, e.g. {'forward': {'x': nn.spec.Tensor((1, 784), 'float32')}}")
    if not isinstance(fspec, dict):
        raise SpecError(f"export: spec[{name!r}] must be a dict of argument name -> nn.spec.Tensor, "
                        f"got {type(fspec).__name__}")
    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    shown = f"{cls}.{name}({', '.join(str(p) for p in params)})"
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in params)
    for key, value in fspec.items():
        if not isinstance(key, str):
            raise SpecError(f"export: spec[{name!r}] keys must be argument names, got {key!r}")
        if key not in {p.name for p in named} and not takes_kwargs:
            raise SpecError(f"export: spec[{name!r}] names argument {key!r}, which {shown} does not take")
        if not isinstance(value, spec_mod.Tensor):
            raise SpecError(f"export: spec[{name!r}][{key!r}] must be nn.spec.Tensor(shape, dtype), "
                            f"got {type(value).__name__} {value!r}")
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            raise SpecError(f"export: {shown} takes *{p.name}; export needs named arguments")
        if p in named and p.default is p.empty and p.name not in fspec:
            missing = [q.name for q in named if q.default is q.empty and q.name not in fspec]
            raise SpecError(f"export: spec[{name!r}] is missing argument(s) {', '.join(map(repr, missing))} "
                            f"of {shown}")
    return list(fspec.items())


def _leaves(result, where: str, path: str = "result") -> list:
    """The Tensors of a result (a Tensor, or nested tuples/lists of Tensors)."""
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and result:
        return [t for i, r in enumerate(result) for t in _leaves(r, where, f"{path}[{i}]")]
    raise SpecError(f"export: {where} must return a Tensor or a tuple of Tensors; {path} is "
                    f"{type(result).__name__} {result!r}")


def _subst(e: GraphExpr, m: Dict[GraphVar, GraphVar]) -> GraphExpr:
    # The trace emits only operator Calls over vars/constants and TupleGetItems of vars.
    if isinstance(e, GraphVar):
        return m.get(e, e)
    if isinstance(e, Call):
        return Call(e.op, tuple(_subst(a, m) for a in e.args), e.attrs, e.ty)
    if isinstance(e, TupleGetItem):
        return TupleGetItem(_subst(e.tuple_value, m), e.index, e.ty)
    if isinstance(e, GraphTuple):
        return GraphTuple(tuple(_subst(f, m) for f in e.fields))
    return e


def _uses(e: GraphExpr):
    if isinstance(e, GraphVar):
        yield e
    elif isinstance(e, Call):
        for a in e.args:
            yield from _uses(a)
    elif isinstance(e, TupleGetItem):
        yield from _uses(e.tuple_value)
    elif isinstance(e, GraphTuple):
        for f in e.fields:
            yield from _uses(f)


def _build(params, num_input: int, trace: Trace, result) -> Function:
    """Replay the live bindings of ``trace`` through a FunctionBuilder, making the returned
    values the dataflow block's outputs."""
    leaves = [t.expr for t in _leaves(result, trace.root)]
    live = {v for e in leaves for v in _uses(e)}
    for b in reversed(trace.bindings):  # dead-code elimination: keep what a result needs
        if b.var in live:
            live.update(_uses(b.value))
    outputs = {e for e in leaves if isinstance(e, GraphVar)}
    fb = FunctionBuilder(params, attrs={"num_input": num_input})
    m: Dict[GraphVar, GraphVar] = {}
    kept = [b for b in trace.bindings if b.var in live]
    if kept:
        with fb.dataflow():
            for b in kept:
                value = _subst(b.value, m)
                m[b.var] = fb.emit_output(value) if b.var in outputs else fb.emit(value)

    def rebuild(r):
        if isinstance(r, Tensor):
            return _subst(r.expr, m)
        return GraphTuple(tuple(rebuild(x) for x in r))
    return fb.finish(rebuild(result))


def export(module, spec, bounds=None) -> Tuple[IRModule, List[Tuple[str, spec_mod.Tensor]]]:
    """Trace ``module``'s methods named by ``spec`` into an IRModule; see the module docstring.
    ``bounds`` (``{"n": 64}``) gives symbolic dims upper bounds, so that compiling plans their
    intermediates in the arena (``kiln.ir.derived_dims.with_bounds``).

    Errors: ``SpecError`` for a spec that does not fit the methods (missing or unknown
    argument, a value that is not ``nn.spec.Tensor``); ``OpError`` naming the layer for
    shapes that do not fit (``fc2 (Linear): linear: ...``).
    """
    cls = type(module).__name__
    if not isinstance(spec, dict) or not spec:
        raise SpecError(f"export: spec must be a non-empty dict of method name -> argument specs, "
                        f"e.g. {{'forward': {{'x': nn.spec.Tensor((1, 784), 'float32')}}}}; got {spec!r}")
    weights = list(module.named_parameters())
    module_names = {id(m): name for name, m in module.named_modules()}
    symbols: Dict[str, Var] = {}  # one Var per dim name across the whole export
    functions = {}
    prim_funcs = {}  # tensor programs called directly (an in-place KV cache write)
    for fname, fspec in spec.items():
        inputs = _signature_inputs(module, fname, fspec)
        in_vars = [GraphVar(arg, s.to_type(symbols)) for arg, s in inputs]
        w_vars = [GraphVar(name, TensorType(p.shape, p.dtype)) for name, p in weights]
        trace = Trace(f"{cls}.{fname}", {id(p): v for (_, p), v in zip(weights, w_vars)}, module_names)
        _TRACES.append(trace)
        try:
            result = getattr(module, fname)(**{arg: Tensor(v) for (arg, _), v in zip(inputs, in_vars)})
        finally:
            _TRACES.pop()
        functions[fname] = _build(in_vars + w_vars, len(in_vars), trace, result)
        prim_funcs.update(trace.prim_funcs)
    param_spec = [(name, spec_mod.Tensor(p.shape, p.dtype)) for name, p in weights]
    try:
        mod = with_bounds(IRModule({**functions, **prim_funcs}), bounds or {})
    except ValueError as e:
        raise SpecError(f"export: {e}") from None
    return mod, param_spec


__all__ = ["export", "SpecError"]
