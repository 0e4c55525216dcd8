"""ONNX sequences and optionals, resolved at import time.

Kiln's graph IR has tensors and tuples, no list that grows at run time. An ONNX sequence whose
length is known at compile time is therefore a ``SeqValue``: a Python tuple of the graph
expressions of its elements, which the sequence operators (``SequenceConstruct``, ``At``,
``Insert``, ``Erase``, ``Length``, ``SplitToSequence``, ``ConcatFromSequence``,
``SequenceMap``) rearrange at import time; only the tensors flow through the compiled code. An
optional is an ``OptValue``: an element or nothing, known at import time. A graph input of
sequence type becomes one parameter per element (``x_0, x_1, ...``), so its length and the
elements' shapes are part of the compiled signature (``from_onnx(shape_dict={"x": [shape0,
shape1, ...]})``; an empty optional input is ``shape_dict={"opt": None}``); a sequence output
is a tuple of its elements, an optional one its element or an empty tuple.

Positions (``SequenceAt``'s, ``SequenceInsert``'s...) must be known at compile time; one that
is only known at run time is an error naming the graph input to fix (``needs_constant``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence as Seq

import numpy as np

from ...ir.graph import Constant, GraphExpr, GraphVar, TensorType
from .common import Unsupported, converter, kiln_dtype, ndim, norm_axis


class SeqValue:
    """An ONNX sequence known at import time: its elements (graph expressions) and, for an
    empty one, the element dtype it was declared with."""

    def __init__(self, items: Seq[GraphExpr], dtype: Optional[str] = None):
        self.items = tuple(items)
        self.dtype = dtype if dtype is not None or not self.items else self.items[0].ty.dtype

    def __repr__(self):
        return f"SeqValue({len(self.items)} elements of {self.dtype})"


class OptValue:
    """An ONNX optional known at import time: ``value`` (a tensor expression or a SeqValue),
    or None when empty."""

    def __init__(self, value=None):
        self.value = value

    def __repr__(self):
        return f"OptValue({self.value!r})"


def is_container(e) -> bool:
    """Whether ``e`` is a sequence or optional value rather than a graph expression."""
    return isinstance(e, (SeqValue, OptValue))


def _seq(e, what="input 0") -> SeqValue:
    if isinstance(e, OptValue):
        e = e.value
    if not isinstance(e, SeqValue):
        raise Unsupported(f"{what} must be a sequence, got {type(e).__name__}")
    return e


def _position(ctx, e, n: int, what: str, insert=False) -> int:
    v = ctx.value(e)
    if v is None:
        from .loop import _need
        v = _need(ctx, e, what)
    p = int(np.asarray(v).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise Unsupported(f"{what} {p} is out of range for a sequence of {n} elements")
    return p + n if p < 0 else p


# ---- graph inputs and outputs -------------------------------------------------------------
def graph_input(vi, spec, has_spec: bool, symbols):
    """The import-time value of graph input ``vi`` of sequence or optional type, and the graph
    parameters it becomes. ``spec`` is the input's ``shape_dict`` entry (``has_spec`` whether
    there is one): a list of element shapes for a sequence, None for an empty optional, a shape
    (or a list of shapes, for an optional sequence) for a present one; an optional tensor with
    no entry is present, shaped as its type says (``symbols``: the importer's symbolic dims)."""
    t = vi.type
    if t.WhichOneof("value") == "optional_type":
        if has_spec and spec is None:
            return OptValue(None), []
        inner = t.optional_type.elem_type
        if inner.WhichOneof("value") == "tensor_type":
            v = _tensor_input(vi.name, inner.tensor_type, spec if has_spec else None, symbols)
            return OptValue(v), [v]
        seq, params = _sequence_input(vi.name, inner, spec, symbols)
        return OptValue(seq), params
    return _sequence_input(vi.name, t, spec, symbols)


def _sequence_input(name, t, spec, symbols):
    """A sequence-typed graph input as one parameter per element (see ``graph_input``)."""
    from ...ir.expr import Var
    from .common import ONNXImportError
    if t.WhichOneof("value") != "sequence_type":
        raise ONNXImportError(f"graph input {name!r}: a {t.WhichOneof('value')} input is not supported")
    et = t.sequence_type.elem_type
    if et.WhichOneof("value") != "tensor_type":
        raise ONNXImportError(f"graph input {name!r}: a sequence of {et.WhichOneof('value')} is not supported")
    if not isinstance(spec, (list, tuple)) or any(not isinstance(s, (list, tuple)) for s in spec):
        err = ONNXImportError(
            f"graph input {name!r} is a sequence: Kiln compiles for a sequence length known at "
            f"compile time; give the shapes of its elements with shape_dict={{{name!r}: "
            f"[shape0, shape1, ...]}}")
        err.needs_structure = name
        raise err
    try:
        dt = kiln_dtype(et.tensor_type.elem_type, f"graph input {name!r}: ")
    except Unsupported as e:
        raise ONNXImportError(str(e)) from None
    shapes = [[int(d) for d in s] for s in spec]
    declared = et.tensor_type.shape.dim if et.tensor_type.HasField("shape") else ()
    for k, d in enumerate(declared):
        # A named dim that every element shares stays symbolic: the same name on another input
        # (SequenceMap's x0 elements and x1 both of length N) must be the same dim; the run
        # time binds and checks it. One that differs between elements is fixed per element.
        if d.dim_param and all(len(s) == len(declared) for s in shapes) and len({s[k] for s in shapes}) == 1:
            for s in shapes:
                s[k] = symbols.setdefault(d.dim_param, Var(d.dim_param, "int64"))
    params = [GraphVar(f"{name}_{i}", TensorType(tuple(s), dt)) for i, s in enumerate(shapes)]
    return SeqValue(params, dt), params


def _tensor_input(name, tt, spec, symbols) -> GraphVar:
    from ...ir.expr import Var
    from .common import ONNXImportError
    try:
        dt = kiln_dtype(tt.elem_type, f"graph input {name!r}: ")
    except Unsupported as e:
        raise ONNXImportError(str(e)) from None
    if spec is not None:
        shape = tuple(int(d) for d in spec)
    elif tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else
                      symbols.setdefault(d.dim_param or f"{name}_dim{i}", Var(d.dim_param or f"{name}_dim{i}", "int64"))
                      for i, d in enumerate(tt.shape.dim))
    else:
        raise ONNXImportError(f"graph input {name!r} has no shape; pin it with shape_dict")
    return GraphVar(name, TensorType(shape, dt))


def input_structure(value):
    """What ``shape_dict`` needs for a run-time value ``value`` of a graph input of
    sequence or optional type (see ``graph_input``): element shapes, or None when empty."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [tuple(np.shape(v)) for v in value]
    return tuple(np.shape(value))


def flatten_value(value) -> list:
    """The arrays a run-time sequence/optional value passes, in parameter order."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [np.asarray(v) for v in value]
    return [np.asarray(value)]


def output_expr(e, element=lambda x: x):
    """A graph output's expression: a sequence is a tuple of its elements, an optional its
    element or an empty tuple; ``element`` maps each tensor (e.g. to compute a shape value)."""
    from ...ir.graph import Tuple as GraphTuple
    if isinstance(e, OptValue):
        return GraphTuple(()) if e.value is None else output_expr(e.value, element)
    if isinstance(e, SeqValue):
        return GraphTuple(tuple(element(x) for x in e.items))
    return element(e)


def is_container_type(vi) -> bool:
    """Whether a graph input/output's ONNX type is a sequence or an optional."""
    return vi.type.WhichOneof("value") in ("sequence_type", "optional_type")


# ---- sequence operators ------------------------------------------------------------------
@converter("SequenceConstruct", since=11)
def sequence_construct(ctx, node, ins, attrs):
    dts = {x.ty.dtype for x in ins}
    if len(dts) > 1:
        raise Unsupported(f"the elements have different dtypes {sorted(dts)}")
    return SeqValue(ins)


@converter("SequenceEmpty", since=11)
def sequence_empty(ctx, node, ins, attrs):
    return SeqValue((), kiln_dtype(attrs.get("dtype", 1)))


@converter("SequenceLength", since=11)
def sequence_length(ctx, node, ins, attrs):
    return Constant(np.asarray(len(_seq(ins[0]).items), np.int64))


@converter("SequenceAt", since=11)
def sequence_at(ctx, node, ins, attrs):
    s = _seq(ins[0])
    return s.items[_position(ctx, ins[1], len(s.items), "position")]


@converter("SequenceInsert", since=11)
def sequence_insert(ctx, node, ins, attrs):
    s, t = _seq(ins[0]), ins[1]
    if s.dtype is not None and t.ty.dtype != s.dtype:
        raise Unsupported(f"inserting a {t.ty.dtype} tensor into a sequence of {s.dtype}")
    n = len(s.items)
    p = n if len(ins) < 3 or ins[2] is None else _position(ctx, ins[2], n, "position", insert=True)
    return SeqValue(s.items[:p] + (t,) + s.items[p:], t.ty.dtype)


@converter("SequenceErase", since=11)
def sequence_erase(ctx, node, ins, attrs):
    s = _seq(ins[0])
    n = len(s.items)
    if n == 0:
        raise Unsupported("erasing from an empty sequence")
    p = n - 1 if len(ins) < 2 or ins[1] is None else _position(ctx, ins[1], n, "position")
    return SeqValue(s.items[:p] + s.items[p + 1:], s.dtype)


@converter("SplitToSequence", since=11)
def split_to_sequence(ctx, node, ins, attrs):
    x = ins[0]
    axis = norm_axis(attrs.get("axis", 0), ndim(x))
    keepdims = attrs.get("keepdims", 1)
    d = x.ty.shape[axis]
    if not hasattr(d, "value"):
        raise Unsupported(f"axis {axis} has a symbolic length; SplitToSequence needs it static")
    n = int(d.value)
    split = None if len(ins) < 2 or ins[1] is None else ctx.need_value(ins[1], "split")
    if split is None:
        sizes = [1] * n
    elif split.ndim == 0:
        k = int(split)
        if k <= 0:
            raise Unsupported(f"split {k} must be positive")
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
    else:
        sizes = [int(s) for s in split.reshape(-1)]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise Unsupported(f"split {sizes} does not add up to the axis length {n}")
    if len(sizes) == 1:
        parts = [x]
    else:
        idx = tuple(int(i) for i in np.cumsum(sizes)[:-1])
        parts = list(ctx.op("split", x, indices_or_sections=idx, axis=axis))
    if split is None and not keepdims:
        parts = [ctx.op("squeeze", p, axis=(axis,)) for p in parts]
    return SeqValue(parts, x.ty.dtype)


@converter("ConcatFromSequence", since=11)
def concat_from_sequence(ctx, node, ins, attrs):
    s = _seq(ins[0])
    if not s.items:
        raise Unsupported("the sequence is empty")
    axis, new_axis = attrs["axis"], attrs.get("new_axis", 0)
    items = list(s.items)
    r = ndim(items[0])
    if new_axis:
        a = norm_axis(axis, r + 1)
        items = [ctx.op("expand_dims", t, axis=(a,)) for t in items]
    else:
        a = norm_axis(axis, r)
    return items[0] if len(items) == 1 else ctx.op("concat", *items, axis=a)


@converter("SequenceMap", since=17)
def sequence_map(ctx, node, ins, attrs):
    from .loop import run_body
    body = attrs["body"]
    seqs = [x for x in ins if isinstance(x, (SeqValue, OptValue))]
    if not seqs or not isinstance(ins[0], (SeqValue, OptValue)):
        raise Unsupported("input 0 must be a sequence")
    n = len(_seq(ins[0]).items)
    for k, x in enumerate(ins):
        if is_container(x) and len(_seq(x, f"input {k}").items) != n:
            raise Unsupported(f"input {k} has {len(_seq(x).items)} elements, input 0 has {n}")
    outs: List[List[GraphExpr]] = [[] for _ in body.output]
    for i in range(n):
        args = [_seq(x).items[i] if is_container(x) else x for x in ins]
        for k, o in enumerate(run_body(ctx, body, args)):
            outs[k].append(o)
    dts = [kiln_dtype(o.type.tensor_type.elem_type) if o.type.HasField("tensor_type") else None
           for o in body.output]
    return [SeqValue(items, dt) for items, dt in zip(outs, dts)]


# ---- optional operators ------------------------------------------------------------------
@converter("Optional", since=15)
def optional(ctx, node, ins, attrs):
    return OptValue(ins[0] if ins and ins[0] is not None else None)


@converter("OptionalHasElement", since=15)
def optional_has_element(ctx, node, ins, attrs):
    x = ins[0] if ins else None
    has = x is not None and not (isinstance(x, OptValue) and x.value is None)
    return Constant(np.asarray(has))


@converter("OptionalGetElement", since=15)
def optional_get_element(ctx, node, ins, attrs):
    x = ins[0]
    if isinstance(x, OptValue):
        if x.value is None:
            raise Unsupported("the optional input is empty")
        return x.value
    return x
