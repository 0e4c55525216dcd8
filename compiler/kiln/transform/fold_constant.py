"""``fold_constant``: evaluate at compile time what depends only on constants.

A binding whose value is an operator call with only ``Constant`` arguments is computed with
the operator's numpy ``reference``; a ``call_tir`` with only constant arguments runs its
PrimFunc (the reference evaluator, or ``kiln.build`` with ``PassContext(fold_backend="build")``;
the weight pack kernels of ``layout.py`` run as the equivalent numpy, as large weights would
take minutes in the evaluator).
The result replaces every use of the variable, so chains fold in one pass; tuples of
constants and items of them fold too. PrimFuncs no longer called are removed afterwards.
``call_dps_packed`` is never folded (it may have effects).

Before (``w`` bound by ``bind_params``)::

    lv0 = R.call_tir(Module.pack_nk16, (R.const(w),), R.Tensor((16, 784, 16), "float32"))
    gv = R.call_tir(Module.linear, (x, lv0), R.Tensor((1, 256), "float32"))

After (``pack_nk16`` gone from the module)::

    gv = R.call_tir(Module.linear, (x, R.const(w_packed)), R.Tensor((1, 256), "float32"))
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .. import ops
from ..ir import IRModule, PrimFunc
from ..ir import dtype as dt
from ..ir.graph import (Call, Constant, GraphExpr, TensorType, Tuple, TupleGetItem, TupleType)
from .branch_constants import bind_constant_arguments
from .dead_code_elimination import remove_unused_functions
from .graph_util import graph_functions, is_op_call, rewrite_function
from .layout import fold_pack
from .infra import Pass, PassContext, context


def fold_constant(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (see the module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        out = mod
        while True:
            for name, func in graph_functions(out):
                folded = []
                new = rewrite_function(func, _visitor(out, ctx, folded))
                if folded:
                    out = out.with_function(name, new)
            # Constants passed to If branches move into them; then the branches fold again.
            # Each round removes call_if arguments, so this ends.
            moved = bind_constant_arguments(out)
            if moved is out:
                break
            out = moved
        return remove_unused_functions(out) if out is not mod else mod
    return Pass("fold_constant", run)


def _visitor(mod: IRModule, ctx: PassContext, folded: list):
    def visit(b, em, _block):
        value = _fold(b.value, mod, ctx)
        if value is None:
            em.emit(b)
        else:
            em.replace(b.var, value)
            folded.append(b.var)
    return visit


def _fold(value: GraphExpr, mod: IRModule, ctx: PassContext) -> Optional[GraphExpr]:
    """The constant (or tuple of constants) ``value`` evaluates to, or None."""
    if isinstance(value, Constant):
        return value
    if isinstance(value, Tuple) and all(isinstance(f, Constant) for f in value.fields):
        return value
    if isinstance(value, TupleGetItem) and isinstance(value.tuple_value, Tuple) \
            and isinstance(value.tuple_value.fields[value.index], Constant):
        return value.tuple_value.fields[value.index]
    if not isinstance(value, Call) or not _small_enough(value.ty, ctx):
        return None
    if is_op_call(value) and all(isinstance(a, Constant) for a in value.args):
        op = ops.get(value.op)
        result = op.reference(*[a.data for a in value.args], **dict(value.attrs))
        return _as_constants(result, value.ty, value.op)
    if value.op == "call_tir":
        gv, args = value.args
        func = mod.functions.get(gv.name)
        # "kiln.no_fold": the call makes fresh memory each time (a KV cache to update in place)
        if isinstance(func, PrimFunc) and all(isinstance(a, Constant) for a in args.fields) \
                and not value.attr("kiln.no_fold"):
            return _run_prim_func(gv.name, func, [a.data for a in args.fields], value.ty, ctx)
    return None


def _small_enough(ty, ctx: PassContext) -> bool:
    types = ty.fields if isinstance(ty, TupleType) else (ty,)
    for t in types:
        if not isinstance(t, TensorType) or t.static_shape() is None:
            return False   # symbolic or unknown result shape: cannot be a constant
        limit = ctx.fold_max_elements
        if limit is not None and int(np.prod(t.static_shape())) > limit:
            return False
    return True


def _as_constants(result, ty, what: str) -> GraphExpr:
    """Wrap a reference's result as Constant(s) of exactly the call's type."""
    types = list(ty.fields) if isinstance(ty, TupleType) else [ty]
    values = list(result) if isinstance(ty, TupleType) else [result]
    consts: List[Constant] = []
    for t, v in zip(types, values):
        arr = np.asarray(v)
        want = dt.to_numpy(t.dtype)
        if arr.shape != t.static_shape():
            raise ValueError(f"fold_constant: {what} produced shape {arr.shape}, its type says "
                             f"{t.static_shape()}")
        consts.append(Constant(arr.astype(want, copy=False), t))
    return Tuple(tuple(consts)) if isinstance(ty, TupleType) else consts[0]


def _run_prim_func(name: str, func: PrimFunc, inputs, ty, ctx: PassContext) -> GraphExpr:
    packed = fold_pack(func, inputs)
    if packed is not None:      # a weight pack kernel (layout.py): numpy does it at once
        return _as_constants(packed, ty, f"call_tir {name}")
    types = list(ty.fields) if isinstance(ty, TupleType) else [ty]
    outs = [np.zeros(t.static_shape(), dt.to_numpy(t.dtype)) for t in types]
    ins = [np.array(a) for a in inputs]   # writable copies: kernels must not see read-only memory
    if ctx.fold_backend == "build":
        from .. import build, nd
        from ..ir import IRModule as _Mod
        rt = build(_Mod({"main": func}))
        nd_out = [nd.empty(o.shape, str(o.dtype)) for o in outs]
        rt(*[nd.array(a) for a in ins], *nd_out)
        outs = [o.numpy() for o in nd_out]
    else:
        from ..ir.evaluator import evaluate
        evaluate(func, *ins, *outs)
    return _as_constants(tuple(outs) if len(outs) > 1 else outs[0], ty, f"call_tir {name}")
