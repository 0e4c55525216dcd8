"""``split_as_slices``: a ``split`` whose pieces are only taken out one by one becomes one
``strided_slice`` per piece::

    t = R.split(x, indices_or_sections=3, axis=1)      # x [1, 768]
    r = t[0]; z = t[1]; n = t[2]
  ->
    r = R.strided_slice(x, begin=[0], end=[256], axes=[1])
    z = R.strided_slice(x, begin=[256], end=[512], axes=[1])
    n = R.strided_slice(x, begin=[512], end=[768], axes=[1])

A split is a kernel of its own with several outputs, which ``fuse_ops`` cannot fuse into its
readers: a GRU's gates were split out of each step's product by a kernel that copied them (198
calls, 3% of the model's time), then read by the gates' elementwise kernel. A slice fuses
into the kernel that reads it (the gates read the product's columns in place), and a slice of
a batch-1 tensor's leading run is a view of it (``executable/views.py``), no copy at all.

Only splits of static shape whose result is used by ``TupleGetItem`` bindings alone (not
returned or passed on as a tuple). Runs after the passes that look for a split by its name
(``fuse_attention``'s QKV pattern).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, Call, GraphVar, TensorType, TupleGetItem
from ..ops.common import normalize_axis
from ..ops.transform import _split_bounds
from .graph_util import graph_functions, rewrite_function, use_counts
from .infra import Pass, PassContext, context


def split_as_slices(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    context(ctx)

    def run(mod: IRModule) -> IRModule:
        out = mod
        for name, func in graph_functions(mod):
            taken = _taken_by_items(func)
            if not any(isinstance(b.value, Call) and b.value.op == "split" and b.var in taken
                       for block in func.blocks for b in block.bindings):
                continue
            pieces: Dict[GraphVar, List[Tuple[GraphVar, int, int, int]]] = {}

            def visit(b: Binding, em, _block):
                v = b.value
                if isinstance(v, Call) and v.op == "split" and b.var in taken:
                    bounds = _bounds(v)
                    if bounds is not None:
                        pieces[b.var] = bounds
                        return                      # dropped: its items become slices
                if isinstance(v, TupleGetItem) and v.tuple_value in pieces:
                    x, axis, start, stop = pieces[v.tuple_value][v.index]
                    em.emit(Binding(b.var, ops.call("strided_slice", x, begin=[start],
                                                    end=[stop], axes=[axis])))
                    return
                em.emit(b)
            new = rewrite_function(func, visit)
            if pieces:
                out = out.with_function(name, new)
        return out
    return Pass("split_as_slices", run)


def _taken_by_items(func) -> set:
    """The variables every use of which is a ``TupleGetItem`` binding's value."""
    uses = use_counts(func)
    items: Dict[GraphVar, int] = {}
    for block in func.blocks:
        for b in block.bindings:
            if isinstance(b.value, TupleGetItem) and isinstance(b.value.tuple_value, GraphVar):
                items[b.value.tuple_value] = items.get(b.value.tuple_value, 0) + 1
    return {v for v, n in items.items() if n == uses[v]}


def _bounds(split: Call) -> Optional[List[Tuple[GraphVar, int, int, int]]]:
    """(x, axis, start, stop) of each piece of a static ``split`` (the operator's own bounds,
    ``ops.transform._split_bounds``), or None."""
    x = split.args[0]
    if not isinstance(x.ty, TensorType) or x.ty.static_shape() is None:
        return None
    attrs = dict(split.attrs)
    axis = normalize_axis("split", attrs.get("axis", 0), x.ty.ndim, x.ty.shape)
    return [(x, axis, start.value, start.value + length.value) for start, length in
            _split_bounds("split", x.ty, attrs["indices_or_sections"], axis)]
