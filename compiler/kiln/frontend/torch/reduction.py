"""Reductions: sum, mean, amax/amin, max/min along a dim, argmax/argmin, any/all, var, prod."""
from __future__ import annotations

from .common import Ctx, bind, converter, ndim, norm_axis, shape
from .errors import Unsupported


def _axes(x, dims):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    dims = [dims] if isinstance(dims, int) else dims
    return tuple(sorted(norm_axis(int(d), ndim(x)) for d in dims))


def _reduce(kop):
    def conv(ctx: Ctx, node, args, kwargs):
        a = bind(node, args, kwargs)
        x = ctx.cast(a["self"], ctx.out_dtype())
        axes = _axes(x, a.get("dim"))
        return ctx.op(kop, x, axis=axes, keepdims=bool(a.get("keepdim") or False))
    return conv


converter("aten.sum")(_reduce("sum"))
converter("aten.mean")(_reduce("mean"))
converter("aten.amax")(_reduce("max"))
converter("aten.amin")(_reduce("min"))
converter("aten.prod")(_reduce("prod"))


@converter("aten.max.dim", "aten.min.dim")
def max_dim(ctx: Ctx, node, args, kwargs):
    x, axis = args[0], norm_axis(int(args[1]), ndim(args[0]))
    keep = bool(args[2]) if len(args) > 2 else bool(kwargs.get("keepdim", False))
    big = str(node.target).startswith("aten.max")
    v = ctx.op("max" if big else "min", x, axis=axis, keepdims=keep)
    i = ctx.op("argmax" if big else "argmin", x, axis=axis, keepdims=keep)
    return v, i


@converter("aten.max.default", "aten.min.default")
def max_all(ctx: Ctx, node, args, kwargs):
    return ctx.op("max" if str(node.target).startswith("aten.max") else "min", args[0])


@converter("aten.argmax", "aten.argmin")
def argmax(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    op = "argmax" if str(node.target).startswith("aten.argmax") else "argmin"
    x, axis = a["self"], a["dim"]
    if axis is None:
        y = ctx.op(op, x, axis=None)
        return ctx.op("reshape", y, shape=(1,) * ndim(x)) if a["keepdim"] else y
    return ctx.op(op, x, axis=norm_axis(int(axis), ndim(x)), keepdims=bool(a["keepdim"]))


def _logical(kop):
    def conv(ctx: Ctx, node, args, kwargs):
        a = bind(node, args, kwargs)
        x = a["self"]
        axes = _axes(x, a.get("dim"))
        # bool -> 0/1, then max (any) or min (all) and back to bool
        b = ctx.op("not_equal", x, ctx.const(0, x.ty.dtype)) if x.ty.dtype != "bool" else x
        r = ctx.op(kop, ctx.cast(b, "int32"), axis=axes, keepdims=bool(a.get("keepdim") or False))
        return ctx.cast(r, "bool")
    return conv


converter("aten.any")(_logical("max"))
converter("aten.all")(_logical("min"))


@converter("aten.var", "aten.std")
def var(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x = a["self"]
    axes = _axes(x, a.get("dim"))
    corr = a.get("correction")
    if corr is None:
        corr = 1 if a.get("unbiased", True) is not False else 0
    keep = bool(a.get("keepdim") or False)
    xs = shape(x)
    n = 1
    for i in (axes if axes is not None else range(ndim(x))):
        if not isinstance(xs[i], int):
            raise Unsupported("var over a symbolic dim is not supported")
        n *= xs[i]
    d = x.ty.dtype
    m = ctx.op("mean", x, axis=axes, keepdims=True)
    dev = ctx.op("subtract", x, m)
    v = ctx.op("mean", ctx.op("multiply", dev, dev), axis=axes, keepdims=keep)
    if corr:
        v = ctx.op("multiply", v, ctx.const(n / max(n - corr, 0), d))
    return ctx.op("sqrt", v) if str(node.target).startswith("aten.std") else v


@converter("aten.topk")
def topk(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x = a["self"]
    return ctx.op("topk", x, k=int(a["k"]), axis=norm_axis(int(a["dim"]), ndim(x)), largest=bool(a["largest"]))


@converter("aten.sort")
def sort(ctx: Ctx, node, args, kwargs):
    """(values, indices) along ``dim``: ``topk`` of every element, which is sorted with equal
    values in index order, i.e. a stable sort (what torch gives with ``stable=True``; its
    unstable sort may order ties otherwise). argsort exports as sort's indices."""
    a = bind(node, args, kwargs)
    x = a["self"]
    axis = norm_axis(int(a["dim"]), ndim(x))
    n = shape(x)[axis]
    if not isinstance(n, int):
        raise Unsupported("sorting along a symbolic dim is not supported")
    return ctx.op("topk", x, k=n, axis=axis, largest=bool(a["descending"]))


@converter("aten.var_mean")
def var_mean(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    v = var(ctx, node, args, kwargs)
    m = ctx.op("mean", a["self"], axis=_axes(a["self"], a.get("dim")), keepdims=bool(a.get("keepdim") or False))
    return v, m


@converter("aten.linalg_vector_norm")
def vector_norm(ctx: Ctx, node, args, kwargs):
    a = bind(node, args, kwargs)
    x = ctx.cast(a["self"], ctx.out_dtype())
    ord_, axes, keep = float(a["ord"]), _axes(x, a["dim"]), bool(a["keepdim"])
    ax = ctx.op("abs", x)
    if ord_ == float("inf"):
        return ctx.op("max", ax, axis=axes, keepdims=keep)
    if ord_ == 1:
        return ctx.op("sum", ax, axis=axes, keepdims=keep)
    if ord_ == 2:
        return ctx.op("sqrt", ctx.op("sum", ctx.op("multiply", x, x), axis=axes, keepdims=keep))
    raise Unsupported(f"vector norm of order {ord_} is not supported (1, 2, inf are)")
