"""Writes at run-time positions: ``scatter`` / ``scatter_add`` / ``scatter_reduce`` and
``index_put`` (``x[i] = v``, ``x[mask] = v``), all onto the operator library's ``scatter_nd``
(or ``where`` for a boolean mask, whose positions need no count).

``scatter_nd`` takes one full coordinate per update: for ``scatter`` along ``dim`` that is the
update's own position with ``index`` in place of coordinate ``dim``; for ``index_put`` the index
tensors, broadcast together, give the leading coordinates. Duplicate positions combine in order
(``add`` / ``mul`` / ``max`` / ``min``), or the last one wins, as torch does on the CPU.
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Ctx, bind, converter, is_static, ndim, norm_axis, shape
from .errors import Unsupported

# torch's reduce names -> scatter_nd's reduction
_REDUCE = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max", "amin": "min"}


def _coordinates(ctx: Ctx, index, axis: int):
    """(I..., r) coordinates: every element of ``index`` at its own position, ``index`` itself
    along ``axis``."""
    ishape = shape(index)
    r = len(ishape)
    cols = []
    for k in range(r):
        if k == axis:
            c = ctx.cast(index, "int64")
        else:
            c = ctx.op("reshape", ctx.iota(ishape[k]), shape=tuple(-1 if j == k else 1 for j in range(r)))
            c = ctx.op("broadcast_to", c, shape=tuple(ishape))
        cols.append(ctx.op("expand_dims", c, axis=r))
    return ctx.op("concat", *cols, axis=r)


def _identity(reduction: str, dtype: str):
    """The value a reduction starts from (what include_self=False replaces the data with)."""
    if reduction == "add":
        return 0
    if reduction == "mul":
        return 1
    if dt.is_float(dtype):
        return -np.inf if reduction == "max" else np.inf
    info = np.iinfo(dt.to_numpy(dtype))
    return info.min if reduction == "max" else info.max


def _scatter(ctx: Ctx, x, axis, index, src, reduction: str, include_self: bool = True):
    d = x.ty.dtype
    ishape = shape(index)
    if not all(is_static(v) for v in ishape):
        raise Unsupported("scatter needs a static index shape")
    if isinstance(src, (int, float, bool)):
        upd = ctx.op("broadcast_to", ctx.const(src, d), shape=tuple(ishape))
    else:
        upd = ctx.cast(src, d)
        if shape(upd) != ishape:          # torch reads src only where index has elements
            upd = ctx.op("strided_slice", upd, begin=(0,) * len(ishape), end=tuple(ishape),
                         strides=(1,) * len(ishape), axes=tuple(range(len(ishape))))
    coords = _coordinates(ctx, index, axis)
    if not include_self and reduction != "none":
        fill = ctx.op("broadcast_to", ctx.const(_identity(reduction, d), d), shape=tuple(ishape))
        x = ctx.op("scatter_nd", x, coords, fill, reduction="none")
    return ctx.op("scatter_nd", x, coords, upd, reduction=reduction)


@converter("aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce", "aten.scatter.value_reduce")
def scatter(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x = a["self"]
    src = a["src"] if "src" in a else a["value"]
    reduce = a.get("reduce")
    reduction = "none" if reduce is None else _REDUCE.get(reduce)
    if reduction is None:
        raise Unsupported(f"scatter reduce={reduce!r} is not supported (add, multiply are)")
    return _scatter(ctx, x, norm_axis(int(a["dim"]), ndim(x)), a["index"], src, reduction)


@converter("aten.scatter_add")
def scatter_add(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x = a["self"]
    return _scatter(ctx, x, norm_axis(int(a["dim"]), ndim(x)), a["index"], a["src"], "add")


@converter("aten.scatter_reduce.two")
def scatter_reduce(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x = a["self"]
    reduction = _REDUCE.get(a["reduce"])
    if reduction is None:
        raise Unsupported(f"scatter_reduce reduce={a['reduce']!r} is not supported (sum, prod, amax, amin are)")
    return _scatter(ctx, x, norm_axis(int(a["dim"]), ndim(x)), a["index"], a["src"], reduction,
                    include_self=bool(a["include_self"]))


@converter("aten.index_put")
def index_put(ctx: Ctx, node, args, kwargs):
    """``x[i0, i1, ...] = values`` (``+=`` with accumulate) with index tensors on adjacent dims
    (None skips a dim), or ``x[mask] = v`` with a boolean mask and one value."""
    a = bind(node, args, kwargs)
    x, indices, values, acc = a["self"], list(a["indices"]), a["values"], bool(a["accumulate"])
    d = x.ty.dtype
    pos = [i for i, t in enumerate(indices) if t is not None]
    if not pos:
        raise Unsupported("index_put without an index tensor")
    if pos != list(range(pos[0], pos[-1] + 1)):
        raise Unsupported("index tensors on non-adjacent dims are not supported")
    idx = [indices[i] for i in pos]
    values = ctx.cast(values, d)
    if any(i.ty.dtype == "bool" for i in idx):
        return _masked_put(ctx, x, pos[0], idx, values, acc)
    p, k, xs = pos[0], len(idx), shape(x)
    bshape = _broadcast_shape([shape(i) for i in idx])
    rest = xs[:p] + xs[p + k:]
    # x with the indexed dims first: updates are then (B..., rest...)
    perm = list(range(p, p + k)) + list(range(p)) + list(range(p + k, len(xs)))
    xt = ctx.op("permute_dims", x, axes=tuple(perm)) if p else x
    cols = [ctx.op("expand_dims", ctx.op("broadcast_to", ctx.cast(i, "int64"), shape=tuple(bshape)), axis=len(bshape))
            for i in idx]
    coords = cols[0] if k == 1 else ctx.op("concat", *cols, axis=len(bshape))
    nb = len(bshape)
    # torch broadcasts values against x[indices], shaped xs[:p] + B + xs[p + k:]
    upd = ctx.op("broadcast_to", values, shape=tuple(xs[:p]) + tuple(bshape) + tuple(xs[p + k:]))
    if p:
        upd = ctx.op("permute_dims", upd, axes=tuple(range(p, p + nb)) + tuple(range(p))
                     + tuple(range(p + nb, p + nb + len(rest) - p)))
    y = ctx.op("scatter_nd", xt, coords, upd, reduction="add" if acc else "none")
    if p:
        y = ctx.op("permute_dims", y, axes=tuple(int(i) for i in np.argsort(perm)))
    return y


def _masked_put(ctx: Ctx, x, p, idx, values, acc):
    """``x[mask] = v`` as ``where(mask, v, x)``: the mask covers dims p.. of x; v must be one
    value (torch pairs the i-th true position with values[i], a count known only at run time)."""
    if len(idx) != 1:
        raise Unsupported("a boolean mask together with other index tensors is not supported")
    mask = idx[0]
    vs = shape(values)
    if not all(is_static(v) and v == 1 for v in vs):
        raise Unsupported("x[mask] = values with more than one value is not supported (its pairing "
                          "depends on the data); x[mask] = one value is")
    m = ndim(mask)
    mask = ctx.op("reshape", mask, shape=(1,) * p + tuple(shape(mask)) + (1,) * (ndim(x) - p - m)) \
        if ndim(x) != m or p else mask
    v = ctx.op("reshape", values, shape=()) if vs else values
    new = ctx.op("add", x, v) if acc else v
    return ctx.op("where", mask, new, x)


def _broadcast_shape(shapes):
    n = max(len(s) for s in shapes)
    out = []
    for k in range(n):
        dims = [s[k - n + len(s)] for s in shapes if k - n + len(s) >= 0]
        big = [v for v in dims if not (is_static(v) and v == 1)]
        if not big:
            out.append(1)
        elif all(is_static(v) for v in big) and len(set(big)) == 1:
            out.append(big[0])
        elif len({str(v) for v in big}) == 1:
            out.append(big[0])
        else:
            raise Unsupported(f"index tensors of shapes {shapes} do not broadcast")
    return out
