"""Shape and indexing ATen ops: view/reshape, permute, expand, slice, select, cat, split,
squeeze/unsqueeze, index, index_select, repeat."""
from __future__ import annotations

import numpy as np

from ...ir.expr import IntImm, PrimExpr
from .common import Ctx, converter, is_static, ndim, norm_axis, shape, sizes
from .errors import Unsupported

_END = 2 ** 63 - 1


def _same(a, b) -> bool:
    """Two sizes known equal (ints, or the very same symbolic expression)."""
    if is_static(a) and is_static(b):
        return a == b
    return a is b or (isinstance(a, PrimExpr) and isinstance(b, PrimExpr) and str(a) == str(b))


@converter("aten.view", "aten._unsafe_view", "aten.reshape")
def view(ctx: Ctx, node, args, kwargs):
    x, dims = args[0], sizes(args[1])
    # torch's recorded sizes rather than its -1: an inferred -1 over symbolic dims comes out as
    # an expression with casts, which kernels cannot match against the same size elsewhere
    dims = [ctx.out_size(i) for i in range(len(dims))]
    if len(dims) == ndim(x) and all(_same(a, b) for a, b in zip(dims, shape(x))):
        return x
    y = ctx.op("reshape", x, shape=tuple(dims))
    if len(dims) == 2 and ndim(x) > 2 and _same(dims[1], shape(x)[-1]) and not all(is_static(d) for d in shape(x)):
        ctx.flattened[y] = x      # x.view(-1, d): mm/addmm multiply x itself (see nn._dense)
    return y


@converter("aten.permute")
def permute(ctx: Ctx, node, args, kwargs):
    x, axes = args[0], [norm_axis(int(a), ndim(args[0])) for a in args[1]]
    if axes == list(range(ndim(x))):
        return x
    y = ctx.op("permute_dims", x, axes=tuple(axes))
    if axes == [1, 0]:
        ctx.transposed[y] = x      # x @ W.T: mm/addmm use linear on W itself
    return y


@converter("aten.t")
def t(ctx, node, args, kwargs):
    return permute(ctx, node, [args[0], [1, 0] if ndim(args[0]) == 2 else [0]], {})


@converter("aten.transpose")
def transpose(ctx, node, args, kwargs):
    x = args[0]
    n = ndim(x)
    axes = list(range(n))
    i, j = norm_axis(int(args[1]), n), norm_axis(int(args[2]), n)
    axes[i], axes[j] = axes[j], axes[i]
    return permute(ctx, node, [x, axes], {})


@converter("aten.expand")
def expand(ctx: Ctx, node, args, kwargs):
    x, dims = args[0], sizes(args[1])
    have = shape(x)
    lead = len(dims) - len(have)
    out = [h if (is_static(d) and d == -1) else d for d, h in zip(dims, [None] * lead + have)]
    if lead == 0 and all(_same(a, b) for a, b in zip(out, have)):
        return x
    return ctx.op("broadcast_to", x, shape=tuple(out))


@converter("aten.slice")
def slice_(ctx: Ctx, node, args, kwargs):
    x = args[0]
    axis = norm_axis(int(args[1]) if len(args) > 1 else 0, ndim(x))
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else _END
    step = int(args[4]) if len(args) > 4 else 1
    n = shape(x)[axis]
    if step == 1 and is_static(start) and start == 0 and (_same(end, n) or (is_static(end) and end >= _END // 2)
                                                            or (is_static(end) and is_static(n) and end >= n)):
        return x
    if isinstance(start, PrimExpr) or isinstance(end, PrimExpr) or (not is_static(n) and step == 1):
        return _symbolic_slice(ctx, x, axis, start, end, step)
    return ctx.op("strided_slice", x, begin=(int(start),), end=(int(end),), strides=(step,), axes=(axis,))


def _symbolic_slice(ctx: Ctx, x, axis, start, end, step):
    """``x[start:end]`` with a symbolic bound (``position_ids[:, :seq]``) or of a symbolic dim
    (``mask[:, :1]``, ``mask[:, :-1]``, which clamping would make ``min(1, seq)`` or
    ``max(seq - 1, 0)`` long). torch has proved the window in range (its range constraints bound
    the dims, and become Kiln bounds the VM checks), so when its recorded length is
    ``end - start`` (negative bounds counted from the end) the slice needs no clamping."""
    from ... import arith
    n = shape(x)[axis]
    if step != 1:
        raise Unsupported(f"a strided slice ({step}) at a symbolic position is not supported")

    def at(v):      # a bound as a position from the start
        if isinstance(v, PrimExpr):
            return v
        v = int(v)
        if v >= _END // 2:
            v = n
        elif v < 0:
            v = n + v
        return v if isinstance(v, PrimExpr) else IntImm(int(v), "int64")
    s, e = at(start), at(end)
    want = ctx.out_size(axis)
    want = want if isinstance(want, PrimExpr) else IntImm(want, "int64")
    if arith.can_prove(arith.simplify(e - s) == want):
        return ctx.op("strided_slice", x, begin=(arith.simplify(s),), end=(arith.simplify(e),), strides=(1,),
                      axes=(axis,), assume_in_bounds=True)
    if isinstance(start, PrimExpr) or isinstance(end, PrimExpr):
        raise Unsupported(f"slicing [{start}:{end}] of a dim of size {n} at a symbolic position "
                          f"is not supported (torch's length {want} is not {end} - {start})")
    return ctx.op("strided_slice", x, begin=(int(start),), end=(int(end),), strides=(1,), axes=(axis,))


@converter("aten.select")
def select(ctx: Ctx, node, args, kwargs):
    x, axis, index = args[0], norm_axis(int(args[1]), ndim(args[0])), args[2]
    if isinstance(index, PrimExpr):
        raise Unsupported("selecting at a symbolic index is not supported")
    return ctx.op("take", x, ctx.const(int(index), "int64"), axis=axis)


@converter("aten.flip")
def flip(ctx: Ctx, node, args, kwargs):
    x = args[0]
    axes = tuple(sorted(norm_axis(int(d), ndim(x)) for d in args[1]))
    if not axes:
        return x
    return ctx.op("strided_slice", x, begin=(-1,) * len(axes), end=(-_END - 1,) * len(axes),
                  strides=(-1,) * len(axes), axes=axes)


@converter("aten.cat", "aten.concat")
def cat(ctx: Ctx, node, args, kwargs):
    xs = [ctx.cast(x, ctx.out_dtype()) for x in args[0]]
    axis = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    # torch's legacy rule: 1-D empty tensors are skipped
    xs = [x for x in xs if not (ndim(x) == 1 and shape(x) == [0])] or xs[:1]
    if len(xs) == 1:
        return xs[0]
    return ctx.op("concat", *xs, axis=norm_axis(int(axis), ndim(xs[0])))


def _split(ctx, x, cuts, axis):
    return tuple(ctx.op("split", x, indices_or_sections=tuple(cuts), axis=axis))


@converter("aten.split_with_sizes")
def split_with_sizes(ctx: Ctx, node, args, kwargs):
    x, parts = args[0], [int(p) for p in args[1]]
    axis = norm_axis(int(args[2]) if len(args) > 2 else kwargs.get("dim", 0), ndim(x))
    return _split(ctx, x, list(np.cumsum(parts)[:-1].tolist()), axis)


@converter("aten.split")
def split(ctx: Ctx, node, args, kwargs):
    x, size = args[0], args[1]
    axis = norm_axis(int(args[2]) if len(args) > 2 else kwargs.get("dim", 0), ndim(x))
    if isinstance(size, (list, tuple)):
        return split_with_sizes(ctx, node, [x, size, axis], {})
    n = shape(x)[axis]
    if not is_static(n):
        raise Unsupported("splitting a symbolic dim into chunks is not supported")
    return _split(ctx, x, list(range(int(size), n, int(size))), axis)


@converter("aten.unbind")
def unbind(ctx: Ctx, node, args, kwargs):
    x = args[0]
    axis = norm_axis(int(args[1]) if len(args) > 1 else 0, ndim(x))
    n = shape(x)[axis]
    return tuple(ctx.op("take", x, ctx.const(i, "int64"), axis=axis) for i in range(n))


@converter("aten.unsqueeze")
def unsqueeze(ctx: Ctx, node, args, kwargs):
    x = args[0]
    return ctx.op("expand_dims", x, axis=norm_axis(int(args[1]), ndim(x) + 1))


@converter("aten.squeeze")
def squeeze(ctx: Ctx, node, args, kwargs):
    x = args[0]
    n = ndim(x)
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if dims is None:
        return ctx.op("squeeze", x)
    dims = [dims] if isinstance(dims, int) else list(dims)
    # torch leaves a dim that is not 1 alone
    keep = tuple(norm_axis(int(d), n) for d in dims if is_static(shape(x)[norm_axis(int(d), n)])
                 and shape(x)[norm_axis(int(d), n)] == 1)
    return ctx.op("squeeze", x, axis=keep) if keep else x


@converter("aten.index_select")
def index_select(ctx: Ctx, node, args, kwargs):
    x, axis, idx = args
    return ctx.op("take", x, idx, axis=norm_axis(int(axis), ndim(x)))


@converter("aten.index")
def index(ctx: Ctx, node, args, kwargs):
    """x[i0, i1, ...] with index tensors on consecutive positions (None skips a dim). A boolean
    mask known at import time (a buffer, a constant) is its true positions; one computed at run
    time is refused (the result's size would depend on the data)."""
    x, indices = args[0], list(args[1])
    if any(t is not None and t.ty.dtype == "bool" for t in indices):
        indices = _mask_positions(ctx, indices)
        y = index(ctx, node, [x, indices], kwargs)
        ctx.fix_data_sizes(y)
        return y
    pos = [i for i, t in enumerate(indices) if t is not None]
    if not pos:
        return x
    if pos != list(range(pos[0], pos[-1] + 1)):
        raise Unsupported("index tensors on non-adjacent dims are not supported")
    idx = [indices[i] for i in pos]
    first = pos[0]
    if len(idx) == 1:
        return ctx.op("take", x, idx[0], axis=first)
    # several index tensors: one linear index into the indexed dims flattened together (a
    # negative index into the first one wraps through take's own wrap over the flattened size)
    xs = shape(x)
    dims = xs[first:first + len(idx)]
    lin = None
    for k, (i, d) in enumerate(zip(idx, dims)):
        i = ctx.cast(i, "int64")
        if k:
            dk = ctx.size(d)
            i = ctx.op("where", ctx.op("less", i, ctx.const(0, "int64")), ctx.op("add", i, dk), i)
            lin = ctx.op("add", ctx.op("multiply", lin, dk), i)
        else:
            lin = i
    flat = ctx.op("reshape", x, shape=tuple(xs[:first]) + (-1,) + tuple(xs[first + len(idx):]))
    return ctx.op("take", flat, lin, axis=first)


def _mask_positions(ctx: Ctx, indices):
    """Each boolean index (covering as many dims as it has) as the int64 index tensors of its
    true positions, which the import computes from the mask's known value."""
    out = []
    for t in indices:
        if t is None or t.ty.dtype != "bool":
            out.append(t)
            continue
        mask = ctx.value(t)
        if mask is None:
            raise Unsupported("boolean-mask indexing with a mask computed at run time is not supported "
                              "(the result's size depends on the data); a mask known when exporting "
                              "(a buffer or a constant) is, and so is x[mask] = value")
        out += [ctx.const(np.asarray(p, np.int64), "int64") for p in np.nonzero(mask)]
    return out


@converter("aten.repeat")
def repeat(ctx: Ctx, node, args, kwargs):
    x, reps = args[0], [int(r) for r in args[1]]
    xs = [1] * (len(reps) - ndim(x)) + shape(x)
    x = ctx.op("reshape", x, shape=tuple(xs)) if len(xs) != ndim(x) else x
    inter = []
    for r, d in zip(reps, xs):
        inter += [1, d]
    y = ctx.op("reshape", x, shape=tuple(inter))
    target = []
    for r, d in zip(reps, xs):
        target += [r, d]
    y = ctx.op("broadcast_to", y, shape=tuple(target))
    return ctx.op("reshape", y, shape=tuple(r * d for r, d in zip(reps, xs)))


@converter("aten.gather")
def gather(ctx: Ctx, node, args, kwargs):
    """out[..., i_d, ...] = x[..., idx[..., i_d, ...], ...] along ``dim``: a take from the flat
    x at the flat offset of every other coordinate plus idx times dim's stride (x's shape must
    be static; idx's may be symbolic)."""
    x, axis, idx = args[0], norm_axis(int(args[1]), ndim(args[0])), args[2]
    xs, ishape = shape(x), shape(idx)
    if not all(is_static(d) for d in xs):
        raise Unsupported("gather needs a static input shape")
    n = len(xs)
    strides = [int(np.prod(xs[k + 1:])) for k in range(n)]
    i = ctx.cast(idx, "int64")
    i = ctx.op("where", ctx.op("less", i, ctx.const(0, "int64")), ctx.op("add", i, ctx.const(xs[axis], "int64")), i)
    flat = ctx.op("multiply", i, ctx.const(strides[axis], "int64"))
    for k in range(n):
        if k == axis or strides[k] == 0:
            continue
        coord = ctx.op("reshape", ctx.iota(ishape[k]), shape=tuple(-1 if j == k else 1 for j in range(n)))
        flat = ctx.op("add", flat, ctx.op("multiply", coord, ctx.const(strides[k], "int64")))
    return ctx.op("take", ctx.op("reshape", x, shape=(-1,)), flat, axis=0)


@converter("aten.cumsum")
def cumsum(ctx: Ctx, node, args, kwargs):
    """Running sum along ``dim`` as a product with an upper-triangular matrix of ones (exact for
    integers below 2**53: computed in float64 for them)."""
    x, axis = args[0], norm_axis(int(args[1]), ndim(args[0]))
    out = ctx.out_dtype()
    n = shape(x)[axis]
    work = out if out in ("float32", "float64") else "float64"
    t = ctx.cast(x, work)
    r = ctx.iota(n)       # i <= j: a constant, or computed at run time for a symbolic n
    tri = ctx.cast(ctx.op("less_equal", ctx.op("expand_dims", r, axis=1), ctx.op("expand_dims", r, axis=0)), work)
    last = ndim(x) - 1
    perm = list(range(ndim(x)))
    perm[axis], perm[last] = perm[last], perm[axis]
    if axis != last:
        t = ctx.op("permute_dims", t, axes=tuple(perm))
    t = ctx.op("matmul", t, tri)
    if axis != last:
        t = ctx.op("permute_dims", t, axes=tuple(perm))
    return ctx.cast(t, out)
