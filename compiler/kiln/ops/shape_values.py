"""Operators whose values are computed from symbolic dimensions: ``arange`` and ``shape_values``.

A dynamic-shape model computes with its own sizes: position ids ``arange(past, past + n)``, a
``Shape`` that is returned or cast to float. With a symbolic ``past`` those are run-time
tensors, so a kernel must compute them, and a kernel learns a symbolic dimension only from the
shape of an argument. These operators therefore take *witnesses*: tensors whose shapes contain
every symbolic dimension the values use (a graph input of shape ``(1, 4, past, 8)`` gives
``past``). Their data is never read; the kernel binds the dimensions from them (the runtime
checks them like any argument).

- ``arange(*witnesses, start, step, length, dtype)``: ``start + i * step`` for ``i < length``;
  ``start``, ``step`` and ``length`` are ints or int PrimExprs of the witnesses' dims.
- ``shape_values(*witnesses, values, shape, dtype)``: a small tensor of static ``shape`` whose
  elements (row-major) are the PrimExprs ``values``.

>>> from kiln.ir import Var
>>> from kiln.ir.graph import GraphVar, TensorType
>>> past, n = Var("past", "int64"), Var("n", "int64")
>>> kv = GraphVar("kv", TensorType((1, 4, past, 8), "float32"))
>>> from kiln.ops import call
>>> call("arange", kv, start=past, step=1, length=n + 0, dtype="int64").ty.shape[0].name
'n'
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..ir import dtype as dt
from ..ir.expr import Cast, IntImm, PrimExpr, Select, Var, convert
from ..ir.functor import collect
from .common import error, get_attrs, out_type, tensor_args
from .registry import register


def _vars(*exprs):
    return {v for e in exprs if isinstance(e, PrimExpr) for v in collect(e, Var)}


def _check_witnessed(op: str, types, exprs) -> None:
    """Every symbolic dim the values use must be a plain dim of some witness."""
    have = {d for t in types for d in (t.shape or ()) if isinstance(d, Var)}
    missing = sorted(v.name for v in _vars(*exprs) if v not in have)
    if missing:
        raise error(op, f"the values use symbolic dim(s) {', '.join(missing)}, which no witness argument "
                        "has in its shape (pass a tensor whose shape has them)")


def _as_index(v, dtype="int64") -> PrimExpr:
    e = convert(v) if not isinstance(v, PrimExpr) else v
    return e if e.dtype == dtype else Cast(dtype, e)


def _infer_arange(types, attrs):
    a = get_attrs("arange", attrs, start=0, step=1, length=None, dtype="int64")
    if a["length"] is None:
        raise error("arange", "length= is required")
    tensor_args("arange", types)
    _check_witnessed("arange", types, (a["start"], a["step"], a["length"]))
    dt.check(a["dtype"])
    return out_type([a["length"]], a["dtype"])


def _compute_arange(args, attrs):
    start, step, dtype = attrs.get("start", 0), attrs.get("step", 1), attrs.get("dtype", "int64")
    length = attrs["length"]

    def f(i):
        v = _as_index(start) + _as_index(i) * _as_index(step)
        return v if dtype == "int64" else Cast(dtype, v)
    return te.compute([length], f, name="arange")


def _ref_arange(*witnesses, start=0, step=1, length=None, dtype="int64"):
    vals = [start, step, length]
    if any(isinstance(v, PrimExpr) and not isinstance(v, IntImm) for v in vals):
        raise error("arange", "the numpy reference needs constant start, step and length")
    s, d, n = (int(v.value) if isinstance(v, IntImm) else int(v) for v in vals)
    return (s + d * np.arange(n, dtype=np.int64)).astype(dt.to_numpy(dtype))


register("arange", infer=_infer_arange, compute=_compute_arange, reference=_ref_arange,
         pattern="opaque", doc="start + i * step for i < length, from symbolic dims of the witnesses")


def _infer_shape_values(types, attrs):
    a = get_attrs("shape_values", attrs, values=None, shape=None, dtype="int64")
    values, shape = a["values"], a["shape"]
    if values is None or shape is None:
        raise error("shape_values", "values= and shape= are required")
    if int(np.prod(shape, dtype=np.int64)) != len(values):
        raise error("shape_values", f"{len(values)} values for shape {tuple(shape)}")
    tensor_args("shape_values", types)
    _check_witnessed("shape_values", types, values)
    return out_type(list(shape), a["dtype"])


def _compute_shape_values(args, attrs):
    values, shape, dtype = attrs["values"], tuple(attrs["shape"]), attrs.get("dtype", "int64")
    strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]

    def f(*idx):
        flat = _as_index(0)
        for i, s in zip(idx, strides):
            flat = flat + _as_index(i) * s
        out = _as_index(values[-1])
        for k in range(len(values) - 2, -1, -1):  # a Select chain: these tensors are tiny
            out = Select(flat == k, _as_index(values[k]), out)
        return out if dtype == "int64" else Cast(dtype, out)
    return te.compute(list(shape) or [], f, name="shape_values")


def _ref_shape_values(*witnesses, values=None, shape=None, dtype="int64"):
    if any(isinstance(v, PrimExpr) and not isinstance(v, IntImm) for v in values):
        raise error("shape_values", "the numpy reference needs constant values")
    flat = [int(v.value) if isinstance(v, IntImm) else int(v) for v in values]
    return np.asarray(flat, dtype=dt.to_numpy(dtype)).reshape(shape)


register("shape_values", infer=_infer_shape_values, compute=_compute_shape_values,
         reference=_ref_shape_values, pattern="opaque",
         doc="a small tensor of values computed from symbolic dims of the witnesses")
