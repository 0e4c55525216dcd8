"""The operator checker shared by every ``tests/ops`` test (fixtures ``check_op``,
``check_op_symbolic``, ``rand``).

``check_op(name, inputs, attrs)`` checks one operator end to end against its numpy
``reference``:

1. shape rule: ``ops.call`` on GraphVars of the inputs' types infers the type the reference
   produces (shape and dtype);
2. definition: placeholders of those types -> ``compute`` (or ``tir``) -> ``te.create_prim_func``;
3. the reference evaluator runs the PrimFunc (when the arrays are small; it is slow);
4. ``kiln.build`` compiles it, the runtime runs it;

and (3) and (4) must match the reference within ``rtol``/``atol`` (per-dtype defaults).
It returns the PrimFunc so a test can look at it.

``check_op_symbolic(name, shapes, dtypes, attrs, sizes)`` does the same with symbolic dims:
shape entries that are strings (``("n", 4)``) become shared tensor-IR Vars, the inferred type
must contain them, and one compiled PrimFunc runs at every binding in ``sizes``.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest

import kiln
from kiln import ops, te
from kiln.arith import simplify
from kiln.ir import IntImm, Var, substitute
from kiln.ir.evaluator import evaluate
from kiln.ir.graph import GraphVar, TensorType, TupleType
from kiln.ops import common

# Arrays whose total size is above this skip the (pure Python) reference evaluator.
EVAL_LIMIT = 3000

TOLERANCE = {"float16": (1e-2, 1e-2), "float32": (1e-5, 1e-5), "float64": (1e-10, 1e-12)}


def tolerance(dtype, rtol=None, atol=None):
    rt, at = TOLERANCE.get(np.dtype(dtype).name, (0, 0))
    return (rt if rtol is None else rtol), (at if atol is None else atol)


def rand(shape, dtype="float32", low=-2.0, high=2.0, seed=0):
    """Seeded test data: uniform floats in [low, high), ints in [low, high], random bools."""
    rng = np.random.default_rng(seed + 7919 * len(shape) + sum(int(s) for s in shape))
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        lo = max(int(low), np.iinfo(dtype).min)
        return rng.integers(lo, int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _type_of(arr: np.ndarray) -> TensorType:
    return TensorType(arr.shape, str(arr.dtype))


def _out_types(ty) -> List[TensorType]:
    return list(ty.fields) if isinstance(ty, TupleType) else [ty]


def _prim_func(op, arg_types, attrs, out_types):
    """Placeholders of ``arg_types`` -> compute (or tir) -> PrimFunc (inputs..., outputs...)."""
    if op.tir is not None:
        out = out_types[0] if len(out_types) == 1 else TupleType(tuple(out_types))
        return op.tir(list(arg_types), dict(attrs), out)
    phs = common.placeholders(arg_types)
    outs = _as_tuple(op.compute(phs, dict(attrs)))
    assert len(outs) == len(out_types), f"{op.name}: compute gave {len(outs)} outputs, type says {len(out_types)}"
    return te.create_prim_func(phs + list(outs))


def _compare(name, what, got, ref, rtol, atol):
    rt, at = tolerance(ref.dtype, rtol, atol)
    assert got.shape == ref.shape, f"{name}: {what} shape {got.shape}, reference {ref.shape}"
    if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
        np.testing.assert_array_equal(got, ref, err_msg=f"{name}: {what} vs reference")
    else:
        np.testing.assert_allclose(got.astype("float64"), ref.astype("float64"), rtol=rt, atol=at,
                                   err_msg=f"{name}: {what} vs reference")


def _run_both(name, func, rt, inputs, refs, rtol, atol, use_evaluator):
    if use_evaluator:
        outs = [np.zeros_like(r) for r in refs]
        evaluate(func, *[np.array(a) for a in inputs], *outs)
        for k, (o, r) in enumerate(zip(outs, refs)):
            _compare(name, f"evaluator output {k}", o, r, rtol, atol)
    nd_in = [kiln.nd.array(np.array(a, order="C")) for a in inputs]
    nd_out = [kiln.nd.empty(r.shape, str(r.dtype)) for r in refs]
    rt(*nd_in, *nd_out)
    for k, (o, r) in enumerate(zip(nd_out, refs)):
        _compare(name, f"compiled output {k}", o.numpy(), r, rtol, atol)


def _check_op(name: str, inputs: Sequence[np.ndarray], attrs: Optional[dict] = None,
              rtol: Optional[float] = None, atol: Optional[float] = None,
              evaluator: Optional[bool] = None, build: bool = True):
    attrs = dict(attrs or {})
    inputs = [np.asarray(a) for a in inputs]
    op = ops.get(name)
    assert op.doc, f"{name}: operator has no doc"
    refs = _as_tuple(op.reference(*inputs, **attrs))
    refs = [np.asarray(r) for r in refs]
    # (1) shape rule
    args = [GraphVar(f"x{i}", _type_of(a)) for i, a in enumerate(inputs)]
    call = ops.call(name, *args, **attrs)
    out_types = _out_types(call.ty)
    assert len(out_types) == len(refs), f"{name}: type has {len(out_types)} outputs, reference {len(refs)}"
    for k, (t, r) in enumerate(zip(out_types, refs)):
        assert t.static_shape() == r.shape and t.dtype == str(r.dtype), \
            f"{name}: inferred output {k} {common.type_str(t)}, reference gives {r.dtype}{r.shape}"
    # (2) definition
    func = _prim_func(op, [a.ty for a in args], call.attrs, out_types)
    # (3) + (4)
    if evaluator is None:
        evaluator = sum(a.size for a in inputs) + sum(r.size for r in refs) <= EVAL_LIMIT
    rt = kiln.build(func) if build else None
    if rt is None:
        outs = [np.zeros_like(r) for r in refs]
        evaluate(func, *inputs, *outs)
        for k, (o, r) in enumerate(zip(outs, refs)):
            _compare(name, f"evaluator output {k}", o, r, rtol, atol)
    else:
        _run_both(name, func, rt, inputs, refs, rtol, atol, evaluator)
    return func


def _dim_value(d, binding: Dict[Var, int]) -> int:
    e = simplify(substitute(d, {v: IntImm(n, v.dtype) for v, n in binding.items()}))
    assert isinstance(e, IntImm), f"dimension {d!r} is not constant under {binding}"
    return e.value


def _check_op_symbolic(name: str, shapes: Sequence[Sequence], dtypes="float32",
                       attrs: Optional[dict] = None, sizes: Sequence[Dict[str, int]] = ({"n": 2}, {"n": 5}),
                       expect_shape: Optional[Sequence] = None, rtol=None, atol=None, make_input=None):
    """``shapes``: one per input, entries ints or names of symbolic dims (shared by name).
    ``expect_shape``: the output shape the rule must infer, in the same spelling."""
    attrs = dict(attrs or {})
    op = ops.get(name)
    dtypes = [dtypes] * len(shapes) if isinstance(dtypes, str) else list(dtypes)
    syms: Dict[str, Var] = {}

    def dim(d):
        if isinstance(d, str):
            return syms.setdefault(d, Var(d, "int64"))
        return d
    types = [TensorType(tuple(dim(d) for d in s), dt) for s, dt in zip(shapes, dtypes)]
    call = ops.call(name, *[GraphVar(f"x{i}", t) for i, t in enumerate(types)], **attrs)
    out_types = _out_types(call.ty)
    if expect_shape is not None:
        got = out_types[0].shape
        want = tuple(dim(d) for d in expect_shape)
        assert len(got) == len(want) and all(common.dims_equal(g, w) is True for g, w in zip(got, want)), \
            f"{name}: inferred shape {common.shape_str(got)}, expected {common.shape_str(want)}"
    func = _prim_func(op, types, call.attrs, out_types)
    rt = kiln.build(func)
    make_input = make_input or rand
    for size in sizes:
        binding = {syms[k]: v for k, v in size.items()}
        inputs = [make_input(tuple(_dim_value(common.as_dim(d), binding) for d in t.shape), t.dtype)
                  for t in types]
        refs = [np.asarray(r) for r in _as_tuple(op.reference(*inputs, **attrs))]
        for t, r in zip(out_types, refs):
            assert tuple(_dim_value(d, binding) for d in t.shape) == r.shape, \
                f"{name}: inferred {common.shape_str(t.shape)} at {size} != reference {r.shape}"
        small = sum(a.size for a in inputs) + sum(r.size for r in refs) <= EVAL_LIMIT
        _run_both(name, func, rt, inputs, refs, rtol, atol, small)
    return func, call.ty


@pytest.fixture
def check_op():
    """``check_op(name, inputs, attrs=None, rtol=None, atol=None, evaluator=None)``."""
    return _check_op


@pytest.fixture
def check_op_symbolic():
    """``check_op_symbolic(name, shapes, dtypes, attrs, sizes, expect_shape, rtol, atol)``."""
    return _check_op_symbolic


@pytest.fixture(name="rand")
def rand_fixture():
    """``rand(shape, dtype="float32", low=-2, high=2, seed=0)``: seeded test data."""
    return rand


@pytest.fixture
def op_error():
    """``with op_error("add: shapes (2, 3) and (4,) do not broadcast"): ops.call(...)``."""
    def _expect(match):
        import re
        return pytest.raises(ops.OpError, match=re.escape(match))
    return _expect


def typed(shape, dtype="float32", name="x"):
    return GraphVar(name, TensorType(tuple(shape), dtype))


@pytest.fixture(name="typed")
def typed_fixture():
    """``typed(shape, dtype="float32", name="x")``: a GraphVar of that TensorType."""
    return typed
