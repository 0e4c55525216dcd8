"""A reference interpreter for graph functions: runs a ``Function`` on numpy arrays, one
binding at a time, with each operator's numpy ``reference`` from ``kiln.ops`` (the spec
everything compiled is checked against, as ``evaluator`` is for tensor programs).

``call_tir`` runs the module's PrimFunc with the tensor-IR ``evaluator`` (pass ``mod``);
``call_dps_packed`` calls a Python function from ``extern`` (``name -> fn(*inputs, *outputs)``);
``call_if`` interprets the branch function the condition picks.

Every value is checked against its inferred type as it is computed: symbolic dimensions are
bound from the arguments (``n`` is whatever the first tensor with ``n`` says) and every later
shape must agree, so a shape rule and a reference that disagree are caught where they part.

>>> x = GraphVar("x", TensorType((2, 3), "float32"))              # doctest: +SKIP
>>> fb = FunctionBuilder([x])                                       # doctest: +SKIP
>>> with fb.dataflow():                                             # doctest: +SKIP
...     y = fb.emit_output(ops.call("relu", x))
>>> interpret(fb.finish(y), [np.array([[-1, 2, 3], [4, -5, 6]], "float32")])   # doctest: +SKIP
array([[0., 2., 3.], [4., 0., 6.]], dtype=float32)
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from . import dtype as dt
from .expr import (Add, Cast, FloorDiv, FloorMod, IntImm, Max, Min, Mul, PrimExpr, Sub, Var)
from .function import IRModule
from .graph import (Call, Constant, ExternFunc, Function, GlobalVar, GraphExpr, GraphVar,
                    TensorType, Tuple, TupleGetItem, TupleType, Type)


class InterpretError(RuntimeError):
    """A graph function that cannot run on the given arguments, or a value that does not match
    its type. The message names the binding (``lv3 = conv2d(...)``) and both shapes."""


_DIM_OPS = {Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
            FloorDiv: lambda a, b: a // b, FloorMod: lambda a, b: a % b, Min: min, Max: max}


def _dim(e: PrimExpr, env: Dict[Var, int]) -> Optional[int]:
    """The value of a shape expression under ``env``; None if it uses an unbound Var."""
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env.get(e)
    if isinstance(e, Cast):
        return _dim(e.value, env)
    fn = _DIM_OPS.get(type(e))
    if fn is not None:
        a, b = _dim(e.a, env), _dim(e.b, env)
        return None if a is None or b is None else int(fn(a, b))
    raise InterpretError(f"cannot evaluate the shape expression {e!r}")


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(getattr(d, "name", getattr(d, "value", d))) for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"


def _check(value, ty: Optional[Type], env: Dict[Var, int], what: str):
    """Check ``value`` against ``ty``, binding symbolic dims the first time they are seen."""
    if isinstance(ty, TupleType):
        if not isinstance(value, (tuple, list)) or len(value) != len(ty.fields):
            raise InterpretError(f"{what}: expected a tuple of {len(ty.fields)}, got {type(value).__name__}")
        for i, (v, t) in enumerate(zip(value, ty.fields)):
            _check(v, t, env, f"{what}[{i}]")
        return
    if not isinstance(ty, TensorType):
        return
    if not isinstance(value, np.ndarray):
        raise InterpretError(f"{what}: expected a tensor, got {type(value).__name__}")
    if value.dtype != dt.to_numpy(ty.dtype):
        raise InterpretError(f"{what}: expected dtype {ty.dtype}, got {value.dtype}")
    if ty.shape is None:
        return
    if value.ndim != len(ty.shape):
        raise InterpretError(f"{what}: expected shape {_shape_text(ty.shape)}, got {value.shape}")
    # Bind bare Vars first, so that an expression such as ``n * 2`` in an earlier axis can
    # use ``n`` from a later one.
    for d, n in zip(ty.shape, value.shape):
        if isinstance(d, Var) and d not in env:
            env[d] = int(n)
    for d, n in zip(ty.shape, value.shape):
        want = _dim(d, env)
        if want is not None and want != n:
            raise InterpretError(f"{what}: expected shape {_shape_text(ty.shape)} "
                                 f"(= {tuple(_dim(x, env) for x in ty.shape)}), got {value.shape}")


def _as_array(a):
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "numpy"):  # kiln NDArray, torch tensor
        return np.asarray(a.numpy())
    return np.asarray(a)


class _Interp:
    def __init__(self, mod: Optional[IRModule], extern: Mapping[str, Callable], check: bool):
        self.mod, self.extern, self.check = mod, dict(extern or {}), check
        self.values: Dict[GraphVar, object] = {}
        self.env: Dict[Var, int] = {}

    def eval(self, e: GraphExpr):
        if isinstance(e, GraphVar):
            try:
                return self.values[e]
            except KeyError:
                raise InterpretError(f"variable {e.name} is used before it is bound") from None
        if isinstance(e, Constant):
            return e.data
        if isinstance(e, Tuple):
            return tuple(self.eval(f) for f in e.fields)
        if isinstance(e, TupleGetItem):
            return self.eval(e.tuple_value)[e.index]
        if isinstance(e, Call):
            return self.call(e)
        raise InterpretError(f"cannot interpret a {type(e).__name__}: {e!r}")

    def alloc(self, ty: Type):
        if isinstance(ty, TupleType):
            return tuple(self.alloc(t) for t in ty.fields)
        shape = tuple(_dim(d, self.env) for d in ty.shape)
        if any(s is None for s in shape):
            raise InterpretError(f"cannot allocate an output of shape {_shape_text(ty.shape)}: "
                                 "a symbolic dimension is not bound by any input")
        return np.empty(shape, dt.to_numpy(ty.dtype))

    def attr(self, v):
        """An attribute with its symbolic dims (``reshape(x, shape=(n, 4))``) replaced by their
        values: the references take plain numbers."""
        if isinstance(v, tuple):
            return tuple(self.attr(x) for x in v)
        if isinstance(v, PrimExpr):
            value = _dim(v, self.env)
            if value is None:
                raise InterpretError(f"attribute {v!r} uses a symbolic dimension no input binds")
            return value
        return v

    def call_if(self, c: Call):
        cond, then_f, else_f, args = c.args
        flag = np.asarray(self.eval(cond))
        if flag.size != 1:
            raise InterpretError(f"call_if: the condition must have one element, got shape {flag.shape}")
        name = (then_f if flag.reshape(-1)[0] else else_f).name
        if self.mod is None or not isinstance(self.mod.functions.get(name), Function):
            raise InterpretError(f"call_if calls graph function {name!r}: pass the IRModule (mod=mod)")
        return interpret(self.mod[name], [self.eval(a) for a in args.fields], mod=self.mod,
                         extern=self.extern, check=self.check)

    def call(self, c: Call):
        if c.op == "call_if":
            return self.call_if(c)
        if c.op in ("call_tir", "call_dps_packed"):
            callee, args = c.args
            inputs = [self.eval(a) for a in args.fields]
            out = self.alloc(c.ty)
            outs = list(out) if isinstance(out, tuple) else [out]
            if c.op == "call_tir":
                if self.mod is None or not isinstance(callee, GlobalVar):
                    raise InterpretError("call_tir needs the IRModule: interpret(func, args, mod=mod)")
                from .evaluator import evaluate
                evaluate(self.mod[callee.name], *inputs, *outs)
            else:
                name = callee.name if isinstance(callee, ExternFunc) else str(callee)
                if name not in self.extern:
                    raise InterpretError(f"call_dps_packed: no Python function for {name!r}; "
                                         "pass extern={name: fn}")
                self.extern[name](*inputs, *outs)
            return out
        from ..ops import get  # late import: kiln.ops imports the graph IR
        args = [self.eval(a) for a in c.args]
        attrs = {k: self.attr(v) for k, v in c.attrs}
        with np.errstate(all="ignore"):
            out = get(c.op).reference(*args, **attrs)
        if isinstance(out, list):
            out = tuple(out)
        return out


def interpret(func, args: Sequence, *, mod: Optional[IRModule] = None,
              extern: Optional[Mapping[str, Callable]] = None, check: bool = True):
    """Run graph function ``func`` on ``args`` (numpy arrays, or anything with ``.numpy()``) and
    return its result: a numpy array, or a tuple for a tuple-typed result.

    ``func`` may also be an IRModule with one graph function (or a ``main``); then ``mod`` is
    that module. With ``check`` (the default) every bound value must match its inferred type.
    """
    if isinstance(func, IRModule):
        mod = func if mod is None else mod
        graph = {k: f for k, f in func.items() if isinstance(f, Function) and not f.attr("private")}
        name = "main" if "main" in graph else (next(iter(graph)) if len(graph) == 1 else None)
        if name is None:
            raise InterpretError(f"interpret: the module has graph functions {sorted(graph)}; pass one")
        func = graph[name]
    if not isinstance(func, Function):
        raise TypeError(f"interpret: expected a graph Function, got {type(func).__name__}")
    args = list(args)
    if len(args) != len(func.params):
        names = ", ".join(p.name for p in func.params)
        raise InterpretError(f"interpret: the function takes {len(func.params)} argument(s) "
                             f"({names}), got {len(args)}")
    st = _Interp(mod, extern or {}, check)
    for i, (p, a) in enumerate(zip(func.params, args)):
        a = _as_array(a)
        _check(a, p.ty, st.env, f"argument {i} '{p.name}'")
        st.values[p] = a
    for b in func.bindings():
        v = st.eval(b.value)
        if check:
            what = f"{b.var.name} = {b.value.op if isinstance(b.value, Call) else type(b.value).__name__}"
            _check(v, b.var.ty, st.env, what)
        st.values[b.var] = v
    return st.eval(func.body)
