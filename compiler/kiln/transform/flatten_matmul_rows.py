"""``flatten_matmul_rows``: a product of a many-axis activation with a 2-D weight runs over the
activation's rows flattened, as one matmul::

    y = R.matmul(x, W)                           # x [1, 7, 7, 3072], W [3072, 768]
    z = R.gelu(R.add(y, b))                      # b [768]
    t = R.permute_dims(z, axes=(0, 3, 1, 2))
  ->
    x2 = R.reshape(x, shape=(49, 3072))
    y2 = R.matmul(x2, W)                         # [49, 768]
    z2 = R.gelu(R.add(y2, b))
    z = R.reshape(z2, shape=(1, 7, 7, 768))
    t = R.permute_dims(z, axes=(0, 3, 1, 2))

A 1x1 ``conv2d`` of a one-pixel image (a squeeze-and-excitation block's layers after its global
pool, ``x [N, C, 1, 1]``) whose output channels no 8 divides (so that no channel-blocked conv
takes it) runs as ``linear(reshape(x, (N, C)), W[O, C])`` in the same way, its bias and
activation on the ``[N, O]`` rows: left a conv, it was vectorized along a width of one pixel
(RegNetY-400MF's 440 -> 110 squeeze: 52 us a call for 48K multiply-adds).

Unflattened, the matmul schedule takes the leading axes for a batch of products and the
second-to-last for the rows of each: a channels-last model (ConvNeXt's pointwise layers over
a 7 x 7 or 14 x 14 map) made 7 products of 7 rows, each streaming the whole weight (9.4 MB)
past a register tile of at most 7 rows: 68 GFLOP/s, against 140 for the same product over
its 49 rows at once (one AVX-512 core; onnxruntime 146).

The elementwise operators after the product run on the 2-D value too (so that they stay in
its kernel as its epilogue): their other operands are constants or values that broadcast
along the last axis alone (a bias), taken as a row, or values of the product's own shape,
reshaped alike. A layer norm over the last axis that feeds such a product runs on the rows
too, so that the product reads its output as it is (a ``reshape`` is a copy). A value something
else reads in its original shape is reshaped back for it. Only static shapes; ``matmul`` with a
2-D second operand and ``linear``; only products of fewer than ``FEW_ROWS`` rows each (ConvNeXt's
7 and 14; its 56 gain nothing).
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant, GraphExpr, GraphVar, TensorType
from .dead_code_elimination import remove_dead_bindings
from .graph_util import graph_functions, rewrite_function
from .infra import Pass, PassContext, context
from .conv_blocked import conv_groups
from .layout_nchwc import elementwise


def flatten_matmul_rows(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    context(ctx)

    def run(mod: IRModule) -> IRModule:
        out = mod
        for name, func in graph_functions(mod):
            # a many-axis value -> (its 2-D twin, the original shape)
            flat: Dict[GraphVar, Tuple[GraphVar, Tuple[int, ...]]] = {}
            made: Dict[Tuple[GraphExpr, Tuple[int, ...]], GraphExpr] = {}   # reshapes, made once
            feeds = _feeding_products(func)

            def visit(b: Binding, em, _block):
                em.emit(b if not isinstance(b.value, Call) else _flatten(b, em, flat, made, feeds))
            new = rewrite_function(func, visit)
            if flat:
                out = out.with_function(name, remove_dead_bindings(new))
        return out
    return Pass("flatten_matmul_rows", run)


def _flatten(b: Binding, em, flat, made, feeds) -> Binding:
    """Emit the 2-D form of ``b`` when it is a product to flatten, a last-axis layer norm
    that feeds one (so that it hands over its rows as they are, not through a copy), or an
    elementwise call of a flattened value (recording the twin); return the binding of ``b``'s
    own variable."""
    call = b.value
    shape = _static(call)
    if shape is None:
        return b
    if _pixel_conv(call):
        x = call.args[0]
        rows = (shape[0], x.ty.static_shape()[1])
        x = flat[x][0] if x in flat and flat[x][0].ty.static_shape() == rows \
            else _reshaped(x, rows, em, made)
        w = call.args[1]
        y2 = ops.call("linear", x, Constant(w.data.reshape(w.data.shape[:2])))
    elif _product(call) or (b.var in feeds and _last_axis_norm(call)):
        x = call.args[0]
        rows = (math.prod(shape[:-1]), x.ty.static_shape()[-1])
        x = flat[x][0] if x in flat and flat[x][0].ty.static_shape() == rows \
            else _reshaped(x, rows, em, made)
        attrs = dict(call.attrs)
        if call.op == "layer_norm":
            attrs["axes"] = (1,)
        y2 = ops.call(call.op, x, *call.args[1:], **attrs)
    elif elementwise(call) and any(a in flat and flat[a][1] == shape for a in call.args):
        args = [_operand(a, shape, em, flat, made) for a in call.args]
        if any(a is None for a in args):
            return b
        y2 = ops.call(call.op, *args, **dict(call.attrs))
    else:
        return b
    twin = em.emit(Binding(GraphVar(f"{b.var.name}_rows", y2.ty), y2))
    flat[b.var] = (twin, shape)
    return Binding(b.var, ops.call("reshape", twin, shape=shape))


def _operand(e: GraphExpr, shape: Tuple[int, ...], em, flat, made) -> Optional[GraphExpr]:
    """Operand ``e`` of an elementwise call of result ``shape`` as an operand of its 2-D form:
    a flattened value's twin, a scalar as it is, what broadcasts along the last axis alone as
    a row, a value of the full shape reshaped; None for any other broadcast."""
    if e in flat:
        twin, twin_shape = flat[e]
        return twin if twin_shape == shape else None
    ty = getattr(e, "ty", None)
    if not isinstance(ty, TensorType) or ty.static_shape() is None:
        return None
    es = tuple(ty.static_shape())
    if math.prod(es) == 1:
        return e
    if _pixels(shape):
        # the rows of a one-pixel conv, [N, O]: a [1, O, 1, 1] bias or an [N, O, 1, 1] value
        return _reshaped(e, es[:2], em, made) if len(es) == 4 and es[2:] == (1, 1) else None
    if all(d == 1 for d in es[:-1]):
        return e if len(es) == 1 else _reshaped(e, es[-1:], em, made)
    if es == shape:
        return _reshaped(e, (math.prod(shape[:-1]), shape[-1]), em, made)
    return None


def _reshaped(e: GraphExpr, shape: Tuple[int, ...], em, made) -> GraphExpr:
    """``e`` reshaped to ``shape``: a constant's data, else one ``reshape`` call per operand."""
    if isinstance(e, Constant):
        return Constant(e.data.reshape(shape))
    key = (e, shape)
    if key not in made:
        c = ops.call("reshape", e, shape=shape)
        made[key] = em.emit(Binding(GraphVar(f"{getattr(e, 'name', 'x')}_rows", c.ty), c))
    return made[key]


def _pixels(shape: Tuple[int, ...]) -> bool:
    """An NCHW shape of one pixel, ``[N, C, 1, 1]``."""
    return len(shape) == 4 and shape[2:] == (1, 1)


def _pixel_conv(call: Call) -> bool:
    """A 1x1 ``conv2d`` (no padding, groups 1) of a one-pixel float32 image by a constant weight,
    with output channels that no 8 divides (module docstring)."""
    if call.op != "conv2d" or len(call.args) != 2 or not isinstance(call.args[1], Constant):
        return False
    x, w = call.args
    xs, ws, ys = x.ty.static_shape(), w.ty.static_shape(), _static(call)
    if xs is None or ws is None or ys is None or not (_pixels(tuple(xs)) and _pixels(ys)):
        return False
    padding = dict(call.attrs).get("padding", 0)
    padding = tuple(padding) if isinstance(padding, (list, tuple)) else (padding,)
    return tuple(ws[2:]) == (1, 1) and conv_groups(call) == 1 and not any(padding) \
        and ws[0] % 8 != 0 and x.ty.dtype == "float32"


def _feeding_products(func) -> set:
    """The variables that some product to flatten takes as its activation."""
    return {b.value.args[0] for block in func.blocks for b in block.bindings
            if isinstance(b.value, Call) and _product(b.value)}


def _last_axis_norm(call: Call) -> bool:
    """A ``layer_norm`` over the last axis alone: the same over the rows flattened."""
    if call.op != "layer_norm" or len(call.ty.shape) < 2:
        return False
    axes = tuple(dict(call.attrs).get("axes", (-1,)))
    return axes in ((-1,), (len(call.ty.shape) - 1,))


def _static(call: Call) -> Optional[Tuple[int, ...]]:
    ty = call.ty
    if not isinstance(ty, TensorType) or ty.static_shape() is None:
        return None
    return tuple(ty.static_shape())


# Products of at least this many rows each are left as a batch: a register tile then runs
# several times down each one's rows per pass over the weight, and flattening would cost a
# copy where the activation comes from something a reshape does not fuse into (a graph input).
FEW_ROWS = 32


def _product(call: Call) -> bool:
    """A ``matmul`` of a many-axis activation by a 2-D operand, or a ``linear`` of one, whose
    leading axes hold more than one product, each of fewer than ``FEW_ROWS`` rows."""
    if call.op not in ("matmul", "linear") or len(call.args) != 2:
        return False
    x, w = call.args
    xs, ws = (getattr(a.ty, "static_shape", lambda: None)() for a in (x, w))
    if xs is None or ws is None or len(xs) < 3 or len(ws) != 2:
        return False
    return math.prod(xs[:-2]) > 1 and xs[-2] < FEW_ROWS and x.ty.dtype == w.ty.dtype
