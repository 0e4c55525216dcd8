"""``bind_params``: turn some parameters of a graph function into constants (weights).

    bound = kiln.transform.bind_params("main", {"w0": w0_np, "b0": b0_np})(Net)

Every use of a bound parameter becomes a ``Constant`` holding the array, and the parameter
leaves the signature, so ``vm["main"](x)`` takes only the rest. Later passes see the
constants: ``fold_constant`` evaluates what depends only on them, and ``fuse_ops`` /
``legalize`` pre-pack constant matmul weights.

Arrays must match the parameter's dtype exactly and its shape dimension by dimension; a
symbolic dimension (``n``) takes the array's size, consistently across all bound arrays, and
that value replaces ``n`` throughout the function's types.

Constants the function passes to the branches of a ``call_if`` are then bound into those
branches (``branch_constants``), so they fold and pre-pack there as well.
"""
from __future__ import annotations

from typing import Dict, Mapping

import numpy as np

from ..ir import IRModule
from ..ir import dtype as dt
from ..ir.expr import IntImm, Var
from ..ir.functor import transform
from ..ir.graph import (Binding, BindingBlock, Constant, Function, GraphVar, TensorType)
from .branch_constants import bind_constant_arguments
from .graph_util import rewrite_function, substitute
from .infra import Pass


class BindParamsError(ValueError):
    """A bound array does not fit its parameter, or the parameter does not exist."""


def bind_params(func_name: str, params: Mapping[str, object]) -> Pass:
    """A pass replacing the parameters of graph function ``func_name`` named in ``params``
    (name -> numpy array, or anything with ``.numpy()`` such as a kiln NDArray) by constants.

    Raises ``BindParamsError`` naming the parameter: an unknown name (listing the function's
    parameters), a dtype or shape that differs (expected vs given).
    """
    arrays = {k: _as_array(k, v) for k, v in dict(params).items()}

    def run(mod: IRModule) -> IRModule:
        if func_name not in mod:
            raise BindParamsError(f"bind_params: the module has no function {func_name!r}; "
                                  f"it has {sorted(mod.functions)}")
        func = mod[func_name]
        if not isinstance(func, Function):
            raise BindParamsError(f"bind_params: {func_name!r} is not a graph function")
        # Weights the function passes on to If branches move into those branches too.
        return bind_constant_arguments(mod.with_function(func_name, _bind(func, func_name, arrays)))
    return Pass("bind_params", run)


def _as_array(name: str, value) -> np.ndarray:
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if not isinstance(value, (np.ndarray, np.generic)):
        raise BindParamsError(f"bind_params: parameter {name!r}: expected a numpy array, "
                              f"got {type(value).__name__}")
    return np.asarray(value)


def _shape_text(shape) -> str:
    dims = [str(getattr(d, "value", getattr(d, "name", d))) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _bind(func: Function, func_name: str, arrays: Dict[str, np.ndarray]) -> Function:
    by_name = {p.name: p for p in func.params}
    unknown = [k for k in arrays if k not in by_name]
    if unknown:
        raise BindParamsError(f"bind_params: function {func_name!r} has no parameter "
                              f"{unknown[0]!r}; its parameters are "
                              f"{', '.join(p.name for p in func.params)}")
    sizes: Dict[Var, int] = {}
    consts = {}
    for name, arr in arrays.items():
        param = by_name[name]
        ty = param.ty
        if not isinstance(ty, TensorType) or ty.shape is None:
            raise BindParamsError(f"bind_params: parameter {name!r} of {func_name!r} is not a "
                                  f"tensor of known rank ({ty!r}); it cannot be bound")
        given = f"{arr.dtype}{_shape_text(arr.shape)}"
        expected = f"{ty.dtype}{_shape_text(ty.shape)}"
        if arr.dtype != dt.to_numpy(ty.dtype):
            raise BindParamsError(f"bind_params: parameter {name!r} of {func_name!r} expects "
                                  f"{expected}, got {given} (dtype differs)")
        if arr.ndim != len(ty.shape):
            raise BindParamsError(f"bind_params: parameter {name!r} of {func_name!r} expects "
                                  f"{expected}, got {given} (rank differs)")
        for axis, (d, n) in enumerate(zip(ty.shape, arr.shape)):
            why = None
            if isinstance(d, IntImm):
                why = None if d.value == n else f"dimension {axis} differs"
            elif isinstance(d, Var):
                if sizes.setdefault(d, n) != n:
                    why = (f"dimension {axis} is {d.name}, which an earlier array set to "
                           f"{sizes[d]}")
            else:   # an expression of symbolic dimensions: not solvable here
                why = f"dimension {axis} is an expression of symbolic dimensions"
            if why:
                raise BindParamsError(f"bind_params: parameter {name!r} of {func_name!r} expects "
                                      f"{expected}, got {given} ({why})")
        consts[param] = Constant(arr)
    remaining = tuple(p for p in func.params if p not in consts)
    out = rewrite_function(func, lambda b, em, _block: em.emit(b), params=remaining, vmap=consts)
    return _specialize(out, sizes) if sizes else out


def _specialize(func: Function, sizes: Dict[Var, int]) -> Function:
    """Replace symbolic dimensions fixed by the bound arrays with their values in every type
    (graph variables are identities, so each one whose type changes is replaced)."""
    from ..arith import simplify

    def post(n):
        if isinstance(n, Var) and n in sizes:
            return IntImm(sizes[n], n.dtype)
        if isinstance(n, TensorType) and n.shape is not None:
            shape = tuple(simplify(d) for d in n.shape)
            if any(a is not b for a, b in zip(shape, n.shape)):
                return TensorType(shape, n.dtype)
        return None

    vmap = {}
    for v in list(func.params) + [b.var for b in func.bindings()]:
        vmap[v] = GraphVar(v.name, transform(v.ty, post))

    def fix(e):
        return transform(substitute(e, vmap), post)
    blocks = tuple(BindingBlock(tuple(Binding(vmap[b.var], fix(b.value)) for b in bl.bindings),
                                bl.dataflow, tuple(vmap[v] for v in bl.outputs))
                   for bl in func.blocks)
    return Function(tuple(vmap[p] for p in func.params), blocks, fix(func.body), func.attrs)


# The spelling of the tutorials users bring (a pass class there): the same factory, so
# ``kiln.transform.BindParams("main", params)(mod)`` is ``bind_params("main", params)(mod)``.
BindParams = bind_params
