"""ONNX ``Loop`` and ``Scan``, unrolled at import time.

Kiln compiles ahead of time for fixed shapes, and a loop's scan outputs have as many rows as
the loop runs iterations, so the number of iterations must be known when the model is
compiled: ``Loop``'s trip count must fold to a constant (an initializer, a ``Constant``, a
shape computation, or a graph input fixed with ``from_onnx(..., const_inputs=...)``), and so
must its condition while the loop has scan outputs; ``Scan`` iterates over an
axis of its scan inputs, whose length the shapes fix. The body graph is then imported once per
iteration into the enclosing function (its nodes inlined, as a constant-condition ``If`` is),
loop-carried values threaded from one copy to the next and scan outputs stacked. A condition
that becomes a run-time value (a data-dependent ``break``) continues as guarded calls of
private body functions, while the trip count or a provably false condition bounds the loop
(``loop_guarded.py``); so does a trip count that is a symbolic dim (a loop over a dynamic
axis), up to MAX_GUARDED iterations, a limit the runtime checks. A trip count or condition that
must be known but is not is an error naming the graph input to fix (``needs_constant``), so
that the ONNX backend specialises on it.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ...ir.graph import Constant, GraphExpr, GraphVar
from .common import Ctx, Unsupported, converter, ndim, norm_axis
from .control_flow import _ScopedEnv, _convert_graph
from .loop_guarded import MAX_GUARDED, guarded_iterations, known_bool
from .sequence import is_container

# An unrolled loop past this many iterations is refused: each iteration is a copy of the body.
MAX_UNROLL = 4096


def _input_behind(ctx: Ctx, e: GraphExpr) -> Optional[str]:
    """The name of a graph input that ``e`` is computed from (the first one found walking back
    through the bindings emitted so far), or None: the value to fix when ``e`` must be known."""
    inputs = {v for v in getattr(ctx, "inputs", ())}
    if isinstance(e, GraphVar) and e in inputs:
        return e.name
    producers = {}
    for b in ctx.fb._current or ():  # the dataflow block being built
        producers[b.var] = b.value
    seen, todo = set(), [e]
    from ...ir.graph import Call, Tuple as GraphTuple, TupleGetItem
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, GraphVar):
            if x in inputs:
                return x.name
            if x in producers:
                todo.append(producers[x])
        elif isinstance(x, Call):
            todo.extend(a for a in x.args if isinstance(a, (GraphVar, Call, GraphTuple, TupleGetItem)))
        elif isinstance(x, GraphTuple):
            todo.extend(x.fields)
        elif isinstance(x, TupleGetItem):
            todo.append(x.tuple_value)
    return None


def _need(ctx: Ctx, e: GraphExpr, what: str) -> np.ndarray:
    """The value of ``e`` at import time, or an Unsupported naming the graph input behind it."""
    v = ctx.value(e)
    if v is None:
        name = _input_behind(ctx, e)
        fix = (f"fix graph input {name!r} with from_onnx(..., const_inputs={{{name!r}: value}}) or "
               f"kiln compile --const-input {name}=VALUE" if name else
               "fix the graph input it depends on with from_onnx(..., const_inputs={name: value})")
        raise Unsupported(f"{what} must be a constant: Kiln unrolls the loop at compile time, so the "
                          f"number of iterations must be known then ({fix})", needs_constant=name)
    return v


def run_body(ctx: Ctx, g, values: List[object]) -> List[object]:
    """Import body graph ``g`` once, inline, with its inputs bound to ``values``; returns its
    outputs (graph expressions, or sequence/optional values)."""
    env = _ScopedEnv(ctx.env)
    for vi, v in zip(g.input, values):
        env[vi.name] = v
    return _convert_graph(ctx, g, env)


def _stack(ctx: Ctx, rows: List[GraphExpr], axis: int) -> GraphExpr:
    """``rows`` (each of rank r) stacked along a new axis ``axis`` of the result (rank r + 1).

    As one concat along the rows' axis 0 and a reshape that splits it, not one expand_dims
    per row: fusion would put those T expand_dims into the concat's kernel, whose scheduling
    (inlining T blocks) costs O(T^2) (a 256-step Scan took 90 s to compile)."""
    r = ndim(rows[0])
    axis = norm_axis(axis, r + 1)
    if r == 0 or any(not hasattr(d, "value") for d in rows[0].ty.shape[:1]):
        return _concat(ctx, [ctx.op("expand_dims", x, axis=(axis,)) for x in rows], axis)
    shape = [d.value if hasattr(d, "value") else d for d in rows[0].ty.shape]
    flat = _concat(ctx, rows, 0)
    out = ctx.op("reshape", flat, shape=tuple([len(rows)] + shape))
    if axis:
        perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, r + 1))
        out = ctx.op("permute_dims", out, axes=tuple(perm))
    return out


# Most inputs of one concat: the concat kernel selects its input by a chain of conditions, as
# deep as its inputs are many (512 overflowed Python's recursion in structural hashing).
_CONCAT_FAN_IN = 128


def _concat(ctx: Ctx, parts: List[GraphExpr], axis: int) -> GraphExpr:
    """``parts`` concatenated along ``axis``, as a tree of concats of at most _CONCAT_FAN_IN."""
    while len(parts) > 1:
        parts = [p[0] if len(p) == 1 else ctx.op("concat", *p, axis=axis)
                 for p in (parts[k:k + _CONCAT_FAN_IN] for k in range(0, len(parts), _CONCAT_FAN_IN))]
    return parts[0]


def _is_tensor(e) -> bool:
    return isinstance(e, (GraphVar, Constant)) or hasattr(e, "ty")


@converter("Loop", since=11)
def loop(ctx, node, ins, attrs):
    body = attrs["body"]
    m_in = ins[0] if ins else None
    c_in = ins[1] if len(ins) > 1 else None
    carried = list(ins[2:])
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    if n_scan < 0:
        raise Unsupported(f"the body has {len(body.output)} outputs, fewer than 1 + {n_carried} "
                          "loop-carried values")
    if m_in is not None and ctx.value(m_in) is None and ctx.is_symbolic(m_in):
        # a symbolic dim (for t in range(x.size(0))): guarded iterations up to a bound
        return _loop_over_symbolic_dim(ctx, body, m_in, c_in, carried, n_scan)
    trip = None if m_in is None else int(_need(ctx, m_in, "the trip count M").reshape(-1)[0])
    if trip is None and c_in is None:
        raise Unsupported("neither a trip count nor a condition: the loop never ends")
    if trip is not None and trip > MAX_UNROLL and c_in is None:
        raise Unsupported(f"trip count {trip} is past the {MAX_UNROLL} iterations Kiln unrolls")
    limit = MAX_UNROLL if trip is None else min(trip, MAX_UNROLL)
    cond = Constant(np.asarray(True)) if c_in is None else c_in
    scans: List[List[object]] = [[] for _ in range(n_scan)]
    i = 0
    while i < limit and known_bool(ctx, cond):  # None: from here on only known at run time
        outs = run_body(ctx, body, [Constant(np.asarray(i, np.int64)), Constant(np.asarray(True))] + carried)
        cond = outs[0]
        carried = list(outs[1:1 + n_carried])
        for k in range(n_scan):
            scans[k].append(outs[1 + n_carried + k])
        i += 1
    state, more = known_bool(ctx, cond), trip is None or i < trip
    if state is None and more:
        what = "the condition" if i == 0 else f"the condition computed by iteration {i - 1}"
        if n_scan or any(is_container(c) for c in carried):
            # refused: the number of rows (elements) would be a run-time value
            _need(ctx, cond, what)
        carried = guarded_iterations(ctx, body, cond, carried, i, trip, _input_behind(ctx, cond))
    elif state and more:
        raise Unsupported(f"the condition is still true after {MAX_UNROLL} iterations (the most Kiln "
                          "unrolls)")
    stacked = []
    for k, rows in enumerate(scans):
        if not rows:
            raise Unsupported(f"the loop runs no iteration, so scan output {k} is empty; Kiln "
                              "cannot type an empty scan output")
        if not all(_is_tensor(r) for r in rows):
            raise Unsupported(f"scan output {k} is not a tensor")
        stacked.append(_stack(ctx, rows, 0))
    return carried + stacked


def _loop_over_symbolic_dim(ctx: Ctx, body, m_in, c_in, carried: list, n_scan: int) -> list:
    """A Loop whose trip count M is an expression of symbolic dims: MAX_GUARDED guarded
    iterations, each run while ``cond and i < M`` holds at run time, and the limit
    ``M <= MAX_GUARDED`` recorded for the runtime to check (an input past it is refused by name,
    never computed short)."""
    from .materialize import materialize
    m = ctx.sym[m_in].reshape(-1)[0]
    if n_scan or any(is_container(c) for c in carried):
        raise Unsupported(f"the trip count is the symbolic {m}, so the loop's scan outputs (or "
                          "sequences) would have a run-time length; pin the input shapes with "
                          "from_onnx(..., shape_dict=...)")
    if getattr(ctx, "inputs", None) is None:
        raise Unsupported(f"the trip count is the symbolic {m} inside an If branch or a loop body; "
                          "pin the input shapes with from_onnx(..., shape_dict=...)")
    key = str(m)
    old = ctx.limits.get(key)
    ctx.limits[key] = (m, min(old[1], MAX_GUARDED) if old else MAX_GUARDED)
    cond = Constant(np.asarray(True)) if c_in is None else c_in
    return guarded_iterations(ctx, body, cond, carried, 0, MAX_GUARDED, _input_behind(ctx, cond),
                              bound=materialize(ctx, m_in))


def _scan_slices(ctx: Ctx, x: GraphExpr, axis: int, reverse: bool, what: str) -> List[GraphExpr]:
    """The slices of ``x`` along ``axis`` (that axis dropped), in iteration order."""
    d = x.ty.shape[axis]
    if not hasattr(d, "value"):
        raise Unsupported(f"{what} has a symbolic length on its scan axis {axis}; Kiln unrolls "
                          "Scan and needs it static")
    n = int(d.value)
    if n == 0:
        raise Unsupported(f"{what} is empty along its scan axis")
    # One take per row rather than one split into n outputs: a kernel with n outputs costs
    # O(n^2) to schedule, while the n takes are one kernel (the row index is an argument).
    rows = [ctx.op("take", x, Constant(np.asarray(t, np.int64)), axis=axis) for t in range(n)]
    return rows[::-1] if reverse else rows


@converter("Scan", since=9)
def scan(ctx, node, ins, attrs):
    body = attrs["body"]
    m = attrs["num_scan_inputs"]
    states, xs = list(ins[:len(ins) - m]), list(ins[len(ins) - m:])
    n_state = len(states)
    k_out = len(body.output) - n_state
    in_axes = list(attrs.get("scan_input_axes") or [0] * m)
    in_dirs = list(attrs.get("scan_input_directions") or [0] * m)
    out_axes = list(attrs.get("scan_output_axes") or [0] * k_out)
    out_dirs = list(attrs.get("scan_output_directions") or [0] * k_out)
    rows = [_scan_slices(ctx, x, norm_axis(a, ndim(x)), bool(r), f"scan input {j}")
            for j, (x, a, r) in enumerate(zip(xs, in_axes, in_dirs))]
    lengths = {len(r) for r in rows}
    if len(lengths) != 1:
        raise Unsupported(f"the scan inputs have different lengths {sorted(lengths)} on their scan axes")
    steps = lengths.pop()
    if steps > MAX_UNROLL:
        raise Unsupported(f"{steps} iterations is past the {MAX_UNROLL} Kiln unrolls")
    outs_k: List[List[GraphExpr]] = [[] for _ in range(k_out)]
    for t in range(steps):
        outs = run_body(ctx, body, states + [r[t] for r in rows])
        states = list(outs[:n_state])
        for k in range(k_out):
            outs_k[k].append(outs[n_state + k])
    stacked = []
    for k, got in enumerate(outs_k):
        if out_dirs[k]:
            got = got[::-1]  # a reverse scan output: the last iteration's row comes first
        stacked.append(_stack(ctx, got, out_axes[k]))
    return states + stacked
