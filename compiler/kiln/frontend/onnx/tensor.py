"""Shape and data-movement ops; shape subgraphs fold to constants when shapes are known, and
to known symbolic values (symbolic.py) when they involve symbolic dims."""
from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from ...ir.expr import IntImm, Var
from ...ops.registry import OpError
from . import symbolic
from .common import (FOLD_LIMIT, Unsupported, converter, dim, dtype, kiln_dtype, ndim, norm_axis,
                     static_shape)


def _ints(ctx, e, what):
    return [int(v) for v in np.asarray(ctx.need_value(e, what)).reshape(-1)]


@converter("Constant")
def constant(ctx, node, ins, attrs):
    if "value" in attrs:
        t = attrs["value"]
        kiln_dtype(t.data_type, "value: ")
        return ctx.const(numpy_helper.to_array(t))
    if "value_float" in attrs:
        return ctx.const(np.float32(attrs["value_float"]))
    if "value_floats" in attrs:
        return ctx.const(np.asarray(attrs["value_floats"], np.float32))
    if "value_int" in attrs:
        return ctx.const(np.int64(attrs["value_int"]))
    if "value_ints" in attrs:
        return ctx.const(np.asarray(attrs["value_ints"], np.int64))
    raise Unsupported(f"attribute(s) {sorted(attrs)} are not supported (value, value_float(s), value_int(s) are)")


@converter("Shape")
def shape(ctx, node, ins, attrs):
    x = ins[0]
    dims = list(x.ty.shape)
    n = len(dims)
    start = attrs.get("start", 0)
    end = attrs.get("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    # a Constant when the dims are static, else a known symbolic value (symbolic.py)
    return symbolic.from_dims(ctx, dims[start:end])


@converter("Size")
def size(ctx, node, ins, attrs):
    n = IntImm(1, "int64")
    for d in ins[0].ty.shape:
        n = n * symbolic.as_expr(d)
    return symbolic.from_dims(ctx, [n], scalar=True)


@converter("ConstantOfShape")
def constant_of_shape(ctx, node, ins, attrs):
    shp = symbolic.dims(ctx, ins[0], "the shape input")
    v = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
    kiln_dtype(attrs["value"].data_type if "value" in attrs else 1, "value: ")
    if any(isinstance(d, int) and d < 0 for d in shp):
        raise Unsupported(f"the shape input {tuple(shp)} has a negative dim")
    if all(isinstance(d, int) for d in shp) and math.prod(shp) <= FOLD_LIMIT:
        return ctx.const(np.full(shp, v.reshape(-1)[0], dtype=v.dtype))
    # a symbolic shape, or one too large to fold into a constant at import time (a corrupt or
    # hostile model may ask for terabytes): the scalar broadcast at run time
    return ctx.op("broadcast_to", ctx.const(v.reshape(-1)[0]), shape=tuple(shp))


@converter("Range")
def range_(ctx, node, ins, attrs):
    if any(ctx.is_symbolic(e) for e in ins):
        # arange(past, past + n): computed at run time from the symbolic dims
        from .materialize import range_op, scalar
        s, l, d = (scalar(ctx, e) for e in ins)
        if s is None or l is None or d is None:
            raise Unsupported("Range's inputs must be scalars")
        return range_op(ctx, s, l, d, ins[0].ty.dtype)
    s, l, d = (np.asarray(ctx.need_value(e, "Range's inputs")) for e in ins)
    if s.size != 1 or l.size != 1 or d.size != 1:
        raise Unsupported(f"Range's inputs must be scalars, got shapes {s.shape}, {l.shape}, {d.shape}")
    # (one-element tensors, as some exporters write them, are taken as the scalar they hold)
    return ctx.const(np.arange(s.reshape(()), l.reshape(()), d.reshape(())).astype(s.dtype))


@converter("Reshape")
def reshape(ctx, node, ins, attrs):
    x = ins[0]
    shp = symbolic.dims(ctx, ins[1], "the shape input")
    shp = symbolic.reshape_target(x.ty.shape, shp, bool(attrs.get("allowzero", 0)))
    try:
        return ctx.op("reshape", x, shape=tuple(shp))
    except OpError as e:
        if x.ty.static_shape() is not None and all(isinstance(d, int) for d in shp):
            raise
        # e.g. a target that holds only for the sizes the model was exported at
        raise Unsupported(f"{e}; with symbolic dims the element counts must match for every "
                          f"size: pin the input shapes with shape_dict") from None


@converter("Flatten")
def flatten(ctx, node, ins, attrs):
    x = ins[0]
    n = ndim(x)
    axis = norm_axis(attrs.get("axis", 1), n)
    if axis == 0:
        return ctx.op("reshape", x, shape=(1, -1))
    t = x
    if axis < n:
        t = ctx.op("flatten", t, start_dim=axis, end_dim=-1)
    else:
        t = ctx.op("expand_dims", t, axis=n)
    return ctx.op("flatten", t, start_dim=0, end_dim=axis - 1)


@converter("Transpose")
def transpose(ctx, node, ins, attrs):
    perm = attrs.get("perm")
    return ctx.op("permute_dims", ins[0], axes=None if perm is None else tuple(perm))


@converter("Concat")
def concat(ctx, node, ins, attrs):
    xs = [x for x in ins if x is not None]
    return ctx.op("concat", *xs, axis=attrs["axis"])


@converter("Gather")
def gather(ctx, node, ins, attrs):
    x, idx = ins
    axis = attrs.get("axis", 0)
    if ctx.is_symbolic(idx) and not ctx.is_symbolic(x):
        # x[:, T - 1] on an axis of size T is x[:, -1]: take wraps negative indices
        idx = symbolic.index_from_end(ctx, idx, x.ty.shape[norm_axis(axis, ndim(x))])
    return ctx.op("take", x, idx, axis=axis)


@converter("Slice")
def slice_(ctx, node, ins, attrs):
    x = ins[0]
    if ctx.opset < 10:
        starts, ends = attrs["starts"], attrs["ends"]
        axes, steps = attrs.get("axes"), None
    else:
        starts = symbolic.dims(ctx, ins[1], "starts")
        ends = symbolic.dims(ctx, ins[2], "ends")
        axes = _ints(ctx, ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
        steps = _ints(ctx, ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    if axes is None:
        axes = list(range(len(starts)))
    ends = _sentinel_ends(ctx, x, ends, axes, steps)
    starts, ends = _static_slice_bounds(ctx, x, starts, ends, axes, steps)
    if _takes_everything(x, starts, ends, axes, steps):
        return x  # x[:, :T] with T = x.shape[1], x[:, 0:]: nothing to slice
    extra = {}
    if _window_of_a_static_dim(ctx, x, starts, ends, axes, steps):
        extra["assume_in_bounds"] = True
    return ctx.op("strided_slice", x, begin=tuple(starts), end=tuple(ends),
                  strides=None if steps is None else tuple(steps), axes=tuple(axes), **extra)


def _window_of_a_static_dim(ctx, x, starts, ends, axes, steps) -> bool:
    """``mask[past:past + n]`` of a fixed-size buffer (a causal mask of the maximum context):
    ONNX would clamp the window, and the result would no longer match ``n``. Such a model only
    works while the window fits (onnxruntime fails at the next op otherwise), so Kiln records
    ``past + n <= 128`` as a limit the runtime checks (a clear error past it) and slices
    without clamping. Applies when every symbolic bound is on a static dim, with step 1, and
    the start is provably <= the end."""
    found = False
    for k, (b, e) in enumerate(zip(starts, ends)):
        if isinstance(b, int) and isinstance(e, int):
            continue
        d = x.ty.shape[norm_axis(axes[k], ndim(x))]
        if not isinstance(d, IntImm) or (steps is not None and steps[k] != 1):
            return False
        b, e = symbolic.as_expr(b), symbolic.as_expr(e)
        if not (symbolic.can_prove(b >= 0) and symbolic.can_prove(b <= e)):
            return False
        found = True
    if not found:
        return False
    for k, e in enumerate(ends):
        d = x.ty.shape[norm_axis(axes[k], ndim(x))]
        if not isinstance(e, int):
            key = str(e)
            old = ctx.limits.get(key)
            ctx.limits[key] = (e, min(int(d.value), old[1]) if old else int(d.value))
    return True


# TF / JAX exports end "to the end" slices at 10^9 rather than INT64_MAX. On a symbolic dim
# that would make the length min(10^9, n), which nothing downstream can prove equal to n; read
# it as "to the end" and record the assumption n <= 10^9, which the runtime checks.
SENTINEL_END = 10 ** 9


def _sentinel_ends(ctx, x, ends, axes, steps):
    ends = list(ends)
    for k, e in enumerate(ends):
        d = x.ty.shape[norm_axis(axes[k], ndim(x))]
        step = 1 if steps is None else steps[k]
        if isinstance(e, int) and SENTINEL_END <= e < 2 ** 31 - 1 and step > 0 and isinstance(d, Var):
            old = ctx.limits.get(d.name)
            ctx.limits[d.name] = (d, min(old[1], e) if old else e)
            ends[k] = 2 ** 63 - 1
    return ends


def _static_slice_bounds(ctx, x, starts, ends, axes, steps):
    """Slice bounds as ints: symbolic ones are accepted when they select a whole dim."""
    starts, ends = list(starts), list(ends)
    for k, (b, e) in enumerate(zip(starts, ends)):
        if isinstance(b, int) and isinstance(e, int):
            continue
        ax = norm_axis(axes[k], ndim(x))
        whole = symbolic.slice_bounds(x.ty.shape[ax], b, e, 1 if steps is None else steps[k])
        if whole is None:
            # x[past:past + n]: the op clamps symbolically; its length is a derived dim
            starts[k], ends[k] = _known_sign(ctx, b), _known_sign(ctx, e)
            continue
        starts[k], ends[k] = whole
    return starts, ends


def _known_sign(ctx, v):
    """A symbolic slice bound whose sign the op can see. ``n - 1`` is non-negative unless a dim
    is 0, where ONNX would count it from the end: Kiln takes it as non-negative and records
    ``1 - n <= 0`` (i.e. ``n - 1 >= 0``) as a limit the runtime checks."""
    from ... import arith
    from ...ir.expr import Max
    from ...ir.functor import collect
    if isinstance(v, int):
        return v
    e = symbolic.as_expr(v)
    if symbolic.can_prove(e >= 0) or symbolic.can_prove(e < 0):
        return e
    ranges = {d: (1, symbolic.DIM_LIMIT) for d in collect(e, Var)}
    ok = arith.simplify(e >= 0, ranges)
    if isinstance(ok, IntImm) and ok.value:
        neg = symbolic.simplify(IntImm(0, e.dtype) - e)
        ctx.limits[str(neg)] = (neg, 0)
        return Max(e, IntImm(0, e.dtype))
    return e


def _takes_everything(x, starts, ends, axes, steps) -> bool:
    """Whether a slice keeps every element of every axis it names."""
    if not all(isinstance(v, int) for v in list(starts) + list(ends)):
        return False
    for k, (b, e) in enumerate(zip(starts, ends)):
        d = x.ty.shape[norm_axis(axes[k], ndim(x))]
        whole_end = e >= 2 ** 31 - 1 or (isinstance(d, IntImm) and e >= d.value)
        if b != 0 or not whole_end or (steps is not None and steps[k] != 1):
            return False
    return True


def _axes_input_or_attr(ctx, ins, attrs, since):
    if ctx.opset >= since:
        if len(ins) > 1 and ins[1] is not None:
            return _ints(ctx, ins[1], "axes")
        return None
    a = attrs.get("axes")
    return None if a is None else list(a)


@converter("Unsqueeze")
def unsqueeze(ctx, node, ins, attrs):
    axes = _axes_input_or_attr(ctx, ins, attrs, 13)
    n = ndim(ins[0]) + len(axes)
    return ctx.op("expand_dims", ins[0], axis=tuple(sorted(norm_axis(a, n) for a in axes)))


@converter("Squeeze")
def squeeze(ctx, node, ins, attrs):
    axes = _axes_input_or_attr(ctx, ins, attrs, 13)
    return ctx.op("squeeze", ins[0], axis=None if axes is None else tuple(axes))


@converter("Expand")
def expand(ctx, node, ins, attrs):
    x = ins[0]
    shp = symbolic.dims(ctx, ins[1], "the shape input")
    out = symbolic.broadcast_dims(x.ty.shape, shp, "the shape input")
    return ctx.op("broadcast_to", x, shape=tuple(out))


@converter("Tile")
def tile(ctx, node, ins, attrs):
    x = ins[0]
    reps = symbolic.dims(ctx, ins[1], "repeats")
    shp = [dim(s) for s in x.ty.shape]
    if all(isinstance(r, int) and r == 1 for r in reps):
        return x
    inter, big, final = [], [], []
    for s, r in zip(shp, reps):
        if isinstance(r, int) and r == 1:  # an untiled axis needs no size-1 companion
            inter.append(s), big.append(s), final.append(s)
            continue
        inter += [1, s]
        big += [r, s]
        final.append(symbolic.as_int_or_expr(symbolic.simplify(
            symbolic.as_expr(r) * symbolic.as_expr(s))))
    t = ctx.op("reshape", x, shape=tuple(inter))
    t = ctx.op("broadcast_to", t, shape=tuple(big))
    return ctx.op("reshape", t, shape=tuple(final))


@converter("Split")
def split(ctx, node, ins, attrs):
    x = ins[0]
    axis = norm_axis(attrs.get("axis", 0), ndim(x))
    nout = len(node.output)
    sizes = None
    if ctx.opset >= 13 and len(ins) > 1 and ins[1] is not None:
        sizes = _ints(ctx, ins[1], "split")
    elif ctx.opset < 13 and attrs.get("split") is not None:
        sizes = list(attrs["split"])
    if sizes is None:
        d = dim(x.ty.shape[axis])
        num = attrs.get("num_outputs", nout)
        if isinstance(d, int) and d % num:
            chunk = -(-d // num)
            sizes = [chunk] * (d // chunk) + ([d % chunk] if d % chunk else [])
        else:
            outs = ctx.op("split", x, indices_or_sections=num, axis=axis)
            return list(outs)
    idx = list(np.cumsum(sizes)[:-1])
    outs = ctx.op("split", x, indices_or_sections=tuple(int(i) for i in idx), axis=axis)
    return list(outs)


@converter("Pad")
def pad(ctx, node, ins, attrs):
    x = ins[0]
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported(f"mode={mode} is not supported (constant, reflect, edge and wrap are)")
    n = ndim(x)
    if ctx.opset < 11:
        pads, val = list(attrs["pads"]), attrs.get("value", 0.0)
        axes = list(range(n))
    else:
        pads = _ints(ctx, ins[1], "pads")
        val = 0
        if len(ins) > 2 and ins[2] is not None:
            v = ctx.need_value(ins[2], "constant_value")
            val = np.asarray(v).reshape(-1)[0].item() if np.asarray(v).size else 0
        axes = list(range(n))
        if len(ins) > 3 and ins[3] is not None:
            axes = [norm_axis(a, n) for a in _ints(ctx, ins[3], "axes")]
    k = len(axes)
    pw = [(0, 0)] * n
    for i, a in enumerate(axes):
        pw[a] = (pads[i], pads[i + k])
    if mode == "constant":
        return ctx.op("pad", x, pad_width=tuple(pw), pad_value=val)
    # Negative pads crop before padding (as onnxruntime does); kiln's pad takes them in
    # constant mode only.
    if any(b < 0 or e < 0 for b, e in pw):
        crop = [(ax, max(-b, 0), max(-e, 0)) for ax, (b, e) in enumerate(pw) if b < 0 or e < 0]
        x = ctx.op("strided_slice", x, begin=tuple(b for _, b, _ in crop),
                   end=tuple(-e if e else 2 ** 63 - 1 for _, _, e in crop),
                   axes=tuple(ax for ax, _, _ in crop))
        pw = [(max(b, 0), max(e, 0)) for b, e in pw]
    return ctx.op("pad", x, pad_width=tuple(pw), mode=mode)


@converter("Trilu")
def trilu(ctx, node, ins, attrs):
    x = ins[0]
    # k only moves the diagonal, never the output's shape: one known at import is folded into
    # the mask, one given at run time is compared with the constant j - i in the kernel
    k = ctx.const(np.int64(0))
    if len(ins) > 1 and ins[1] is not None:
        known = ctx.value(ins[1])
        if known is not None:
            k = ctx.const(np.int64(np.asarray(known).reshape(-1)[0]))
        elif ctx.is_symbolic(ins[1]):
            k = ctx.need_value(ins[1], "k")  # a symbolic value: the error says what to fix
        else:
            k = ctx.op("reshape", ctx.op("cast", ins[1], dtype="int64"), shape=())
    cmp = "greater_equal" if attrs.get("upper", 1) else "less_equal"
    r, c = x.ty.shape[-2], x.ty.shape[-1]
    zero = ctx.const(np.zeros((), dtype=np.dtype(dtype(x)) if dtype(x) != "bool" else np.bool_))
    if not (isinstance(r, IntImm) and isinstance(c, IntImm)):
        # rows or columns symbolic: the mask j - i >= k computed at run time from two aranges
        from .materialize import witnesses
        w = witnesses(ctx, [r, c])
        i = ctx.emit("arange", *w, start=0, step=1, length=r, dtype="int64")
        j = ctx.emit("arange", *w, start=0, step=1, length=c, dtype="int64")
        d = ctx.op("subtract", ctx.op("expand_dims", j, axis=0), ctx.op("expand_dims", i, axis=1))
        return ctx.op("where", ctx.op(cmp, d, k), x, zero)
    shp = static_shape(x)
    d = np.arange(shp[-1])[None, :] - np.arange(shp[-2])[:, None]
    return ctx.op("where", ctx.op(cmp, ctx.const(d.astype(np.int64)), k), x, zero)


@converter("TopK")
def topk(ctx, node, ins, attrs):
    x = ins[0]
    k = int(np.asarray(ctx.need_value(ins[1], "K")).reshape(-1)[0])
    if not attrs.get("sorted", 1):
        pass  # sorted output is a valid unsorted output
    v, i = ctx.op("topk", x, k=k, axis=attrs.get("axis", -1), largest=bool(attrs.get("largest", 1)))
    return [v, i]


def _arg(kop):
    def fn(ctx, node, ins, attrs):
        x = ins[0]
        axis = norm_axis(attrs.get("axis", 0), ndim(x))
        keep = bool(attrs.get("keepdims", 1))
        if not attrs.get("select_last_index", 0):
            return ctx.op(kop, x, axis=axis, keepdims=keep)
        # the last extreme = (n - 1) - the first extreme of the reversed axis
        d = dim(x.ty.shape[axis])
        if not isinstance(d, int):
            raise Unsupported("select_last_index=1 needs a static reduced dim")
        r = ctx.op("strided_slice", x, begin=(-1,), end=(-(2 ** 63),), strides=(-1,), axes=(axis,))
        i = ctx.op(kop, r, axis=axis, keepdims=keep)
        return ctx.op("subtract", ctx.const(np.array(d - 1, np.int64)), i)
    return fn


@converter("GatherElements")
def gather_elements(ctx, node, ins, attrs):
    x, idx = ins
    n = ndim(x)
    axis = norm_axis(attrs.get("axis", 0), n)
    xs = static_shape(x)
    ishape = static_shape(idx, "indices")
    idx = ctx.op("cast", idx, dtype="int64") if dtype(idx) != "int64" else idx
    idx = ctx.op("where", ctx.op("less", idx, ctx.const(np.array(0, np.int64))),
                 ctx.op("add", idx, ctx.const(np.array(xs[axis], np.int64))), idx)
    strides = np.cumprod((list(xs[1:]) + [1])[::-1])[::-1]
    grid = np.indices(ishape, dtype=np.int64)
    base = sum(grid[k] * int(strides[k]) for k in range(n) if k != axis)
    lin = ctx.op("add", ctx.op("multiply", idx, ctx.const(np.array(int(strides[axis]), np.int64))),
                 ctx.const(np.asarray(base, np.int64)))
    flat = ctx.op("reshape", x, shape=(-1,))
    return ctx.op("take", flat, lin, axis=0)


converter("ArgMax")(_arg("argmax"))
converter("ArgMin")(_arg("argmin"))


def _window(kind):
    def fn(ctx, node, ins, attrs):
        n = int(np.asarray(ctx.need_value(ins[0], "size")).reshape(-1)[0])
        periodic = attrs.get("periodic", 1)
        N = n if periodic else n - 1
        k = np.arange(n, dtype=np.float64)
        if kind == "hann":
            w = np.sin(np.pi * k / N) ** 2
        elif kind == "hamming":
            a0 = 25.0 / 46.0
            w = a0 - (1 - a0) * np.cos(2 * np.pi * k / N)
        else:
            w = 0.42 - 0.5 * np.cos(2 * np.pi * k / N) + 0.08 * np.cos(4 * np.pi * k / N)
        to = kiln_dtype(attrs.get("output_datatype", 1), "output_datatype ")
        from ...ir import dtype as dt
        return ctx.const(w.astype(dt.to_numpy(to)))
    return fn


converter("HannWindow", since=17)(_window("hann"))
converter("HammingWindow", since=17)(_window("hamming"))
converter("BlackmanWindow", since=17)(_window("blackman"))


@converter("CenterCropPad", since=18)
def center_crop_pad(ctx, node, ins, attrs):
    x = ins[0]
    target = _ints(ctx, ins[1], "shape")
    n = ndim(x)
    axes = [norm_axis(a, n) for a in attrs.get("axes", list(range(n)))]
    shp = static_shape(x)
    begin, end, pw = [], [], [(0, 0)] * n
    for a, t in zip(axes, target):
        d = shp[a]
        if t < d:
            st = (d - t) // 2
            begin.append(st); end.append(st + t)
        else:
            begin.append(0); end.append(d)
            b = (t - d) // 2
            pw[a] = (b, t - d - b)
    y = ctx.op("strided_slice", x, begin=tuple(begin), end=tuple(end), axes=tuple(axes))
    if any(p != (0, 0) for p in pw):
        y = ctx.op("pad", y, pad_width=tuple(pw))
    return y


@converter("Compress", since=11)
def compress(ctx, node, ins, attrs):
    x, cond = ins
    c = np.asarray(ctx.need_value(cond, "condition")).astype(bool).reshape(-1)
    axis = attrs.get("axis")
    if axis is None:
        x = ctx.op("reshape", x, shape=(-1,))
        axis = 0
    axis = norm_axis(axis, ndim(x))
    idx = np.nonzero(c[:dim(x.ty.shape[axis])])[0].astype(np.int64)
    return ctx.op("take", x, ctx.const(idx), axis=axis)
