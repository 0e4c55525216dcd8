"""Neural-network operators over NCHW tensors: conv1d, conv2d, max_pool2d, avg_pool2d,
adaptive_avg_pool2d, resize2d.

Each operator has its shape rule, te definition and numpy reference side by side (see
``registry``). The te definitions are written for the default schedules:

- conv: an optional ``conv2d_pad`` block (zero padding; its loads are clamped into the input,
  since codegen evaluates both sides of a Select), then one reduction block ``conv2d`` over
  ``(rc, ry, rx)`` reading ``pad[n, g * Cg + rc, y * stride + ry * dilation, ...]`` (``g``
  only when groups > 1; depthwise is groups = C, Cg = 1). float16 accumulates in float32:
  ``conv2d_acc`` then a cast block ``conv2d`` (as matmul does);
- pools: one reduction block over ``(ry, rx)`` (``max_pool2d``; ``avg_pool2d_sum``) whose
  padded taps are excluded with the reduction's ``where`` condition (an ``if`` around the
  update, so never read); average pools then divide in an elementwise block ``avg_pool2d`` by
  a count computed from the indices (a constant when no window leaves the input).

>>> from kiln.ir.graph import GraphVar, TensorType
>>> x = GraphVar("x", TensorType((1, 3, 8, 8)))
>>> w = GraphVar("w", TensorType((4, 3, 3, 3)))
>>> call("conv2d", x, w, padding=(1, 1, 1, 1)).ty.static_shape()      # doctest: +SKIP
(1, 4, 8, 8)
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import te
from ..arith import simplify
from ..ir.expr import Cast, IntImm
from ..ir.graph import TensorType
from .common import (FLOAT_DTYPES, as_dim, check_dtype, const_dim, dim_str, dims_equal, error,
                     get_attrs, literal, out_type, require_attr, shape_str, tensor_args, REQUIRED)
from .linalg import _accumulate
from .reduction import acc_dtype
from .registry import register
from .transform import _and, _ints, _max, _min, clamp, last_index, padded


def _tuple(op, name, value, n):
    """An int (repeated ``n`` times) or a sequence of ``n`` ints."""
    v = _ints(op, name, value)
    if len(v) == 1 and n > 1:
        v = v * n
    if len(v) != n:
        raise error(op, f"{name}= needs {n} value(s), got {v}")
    return v


def _padding(op, value, nsp):
    """Padding as (before..., after...) per spatial dim: conv2d (top, left, bottom, right)."""
    p = _ints(op, "padding", value)
    if len(p) == 1:
        p = p * (2 * nsp)
    elif len(p) == nsp:
        p = p + p
    if len(p) != 2 * nsp:
        raise error(op, f"padding= needs 1, {nsp} or {2 * nsp} values, got {p}")
    if any(v < 0 for v in p):
        raise error(op, f"padding must be >= 0, got {p}")
    return p[:nsp], p[nsp:]


def _out_dim(op, size, k, stride, dilation, before, after, ceil_mode=False, what="kernel"):
    """Sliding-window output length (PyTorch's rule for ceil_mode: the last window must start
    inside the input or its leading padding)."""
    span = dilation * (k - 1) + 1
    c = const_dim(size)
    if c is None:
        if ceil_mode:
            raise error(op, f"ceil_mode needs static spatial dimensions, got {dim_str(size)}")
        return simplify((as_dim(size) + (before + after - span)) // stride + 1)
    room = c + before + after - span
    if room < 0:
        raise error(op, f"{what} extent {span} (size {k}, dilation {dilation}) is larger than "
                        f"the padded input extent {c + before + after}")
    n = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (n - 1) * stride >= c + before:
        n -= 1
    return IntImm(n)


# ---- conv1d / conv2d -----------------------------------------------------------------------

def _conv_attrs(op, attrs, nsp):
    d = ((1,) * nsp, (0,) * (2 * nsp), (1,) * nsp)
    a = get_attrs(op, attrs, strides=d[0], padding=d[1], dilation=d[2], groups=1)
    strides = _tuple(op, "strides", a["strides"], nsp)
    dilation = _tuple(op, "dilation", a["dilation"], nsp)
    if any(s < 1 for s in strides) or any(v < 1 for v in dilation):
        raise error(op, f"strides {strides} and dilation {dilation} must be >= 1")
    before, after = _padding(op, a["padding"], nsp)
    groups = _ints(op, "groups", a["groups"], 1)[0]
    if groups < 1:
        raise error(op, f"groups must be >= 1, got {groups}")
    return strides, before, after, dilation, groups


def _conv_shape(op, x, w, attrs, nsp):
    layout = "NCW/OIW" if nsp == 1 else "NCHW/OIHW"
    if x.ndim != nsp + 2 or w.ndim != nsp + 2:
        raise error(op, f"expects a {nsp + 2}-D input and weight ({layout}), got "
                        f"{shape_str(x.shape)} and {shape_str(w.shape)}")
    if x.dtype != w.dtype:
        raise error(op, f"input dtype {x.dtype} and weight dtype {w.dtype} differ")
    check_dtype(op, x.dtype, FLOAT_DTYPES)
    strides, before, after, dilation, groups = _conv_attrs(op, attrs, nsp)
    cin, cout, cg = x.shape[1], w.shape[0], w.shape[1]
    kernel = [const_dim(k) for k in w.shape[2:]]
    if const_dim(cout) is None or const_dim(cg) is None or None in kernel:
        raise error(op, f"weight shape {shape_str(w.shape)} must be static")
    if const_dim(cout) % groups:
        raise error(op, f"{const_dim(cout)} output channels (weight {shape_str(w.shape)}) do not "
                        f"divide into groups={groups}")
    if dims_equal(cin, const_dim(cg) * groups) is not True:
        raise error(op, f"input {shape_str(x.shape)} has {dim_str(cin)} channels but weight "
                        f"{shape_str(w.shape)} with groups={groups} expects "
                        f"{const_dim(cg) * groups}")
    spatial = [_out_dim(op, x.shape[2 + d], kernel[d], strides[d], dilation[d], before[d], after[d])
               for d in range(nsp)]
    return (x.shape[0], cout, *spatial), (strides, before, after, dilation, groups, kernel)


def _infer_conv(op, nsp):
    def infer(types, attrs):
        x, w = tensor_args(op, types, names=("data", "weight"), count=2)
        shape, _ = _conv_shape(op, x, w, attrs, nsp)
        return out_type(shape, x.dtype)
    return infer


def _compute_conv(op, nsp):
    def compute(args, attrs):
        x, w = args
        shape, (strides, before, after, dilation, groups, kernel) = _conv_shape(
            op, TensorType(x.shape, x.dtype), TensorType(w.shape, w.dtype), attrs, nsp)
        if any(before) or any(after):
            pads = [(0, 0), (0, 0)] + list(zip(before, after))
            x = padded(x, pads, 0.0, name=f"{op}_pad")
        cg = const_dim(w.shape[1])
        og = const_dim(w.shape[0]) // groups
        acc = acc_dtype(x.dtype)
        rc = te.reduce_axis((0, cg), name="rc")
        rs = [te.reduce_axis((0, kernel[d]), name=("ry", "rx")[d] if nsp == 2 else "rx")
              for d in range(nsp)]

        def f(n, o, *sp):
            group = o if og == 1 else o // og
            chan = rc if groups == 1 else (group if cg == 1 else group * cg) + rc
            pos = tuple((s * strides[d] if strides[d] != 1 else s) +
                        (rs[d] * dilation[d] if dilation[d] != 1 else rs[d])
                        for d, s in enumerate(sp))
            return te.sum(x[(n, chan) + pos].astype(acc) * w[(o, rc) + tuple(rs)].astype(acc),
                          axis=[rc] + rs)
        if nsp == 2:
            body = lambda n, o, y, x: f(n, o, y, x)      # noqa: E731 - te names loops after these
        else:
            body = lambda n, o, x: f(n, o, x)            # noqa: E731
        return _accumulate(op, shape, body, w.dtype, acc)
    return compute


def _ref_conv(nsp):
    def reference(x, w, strides=(1,) * nsp, padding=(0,) * (2 * nsp), dilation=(1,) * nsp, groups=1):
        op = "conv2d" if nsp == 2 else "conv1d"
        strides, dilation = _tuple(op, "strides", strides, nsp), _tuple(op, "dilation", dilation, nsp)
        before, after = _padding(op, padding, nsp)
        xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(zip(before, after)))
        O, cg = w.shape[:2]
        og = O // groups
        kernel = w.shape[2:]
        outs = [(xp.shape[2 + d] - dilation[d] * (kernel[d] - 1) - 1) // strides[d] + 1 for d in range(nsp)]
        out = np.zeros((x.shape[0], O, *outs))
        for tap in np.ndindex(*kernel):
            sl = tuple(slice(tap[d] * dilation[d], tap[d] * dilation[d] + strides[d] * (outs[d] - 1) + 1,
                             strides[d]) for d in range(nsp))
            patch = xp[(slice(None), slice(None)) + sl]
            for g in range(groups):
                wt = w[g * og:(g + 1) * og, :, *tap].astype(np.float64)
                out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch[:, g * cg:(g + 1) * cg], wt)
        return out.astype(x.dtype)
    return reference


_CONV_DOC = ("{op}(x, w, strides={s}, padding={p}, dilation={s}, groups=1): cross-correlation "
             "(PyTorch/ONNX Conv) over {layout} input and {wl} weight; padding is {pdesc}. "
             "groups splits the channels (groups = C with weight (C*m, 1, ...) is depthwise). "
             "Float dtypes; the output has the input's dtype. No bias (add it after).")

register("conv2d", infer=_infer_conv("conv2d", 2), compute=_compute_conv("conv2d", 2),
         reference=_ref_conv(2), pattern="out_fusable", num_args=2,
         doc=_CONV_DOC.format(op="conv2d", s="(1, 1)", p="(0, 0, 0, 0)", layout="NCHW", wl="OIHW",
                              pdesc="(top, left, bottom, right); 2 values mean (h, w) on both "
                                    "sides, 1 value all sides"))
register("conv1d", infer=_infer_conv("conv1d", 1), compute=_compute_conv("conv1d", 1),
         reference=_ref_conv(1), pattern="out_fusable", num_args=2,
         doc=_CONV_DOC.format(op="conv1d", s="(1,)", p="(0, 0)", layout="NCW", wl="OIW",
                              pdesc="(left, right); 1 value both sides"))


# ---- max_pool2d / avg_pool2d ---------------------------------------------------------------

def _pool_attrs(op, x, attrs, extra):
    a = get_attrs(op, attrs, pool_size=REQUIRED, strides=None, padding=(0, 0, 0, 0),
                  dilation=(1, 1), ceil_mode=False, **extra)
    if x.ndim != 4:
        raise error(op, f"expects a 4-D NCHW input, got {shape_str(x.shape)}")
    pool = _tuple(op, "pool_size", require_attr(op, a, "pool_size"), 2)
    strides = pool if a["strides"] is None else _tuple(op, "strides", a["strides"], 2)
    dilation = _tuple(op, "dilation", a["dilation"], 2)
    if min(pool + strides + dilation) < 1:
        raise error(op, f"pool_size {pool}, strides {strides} and dilation {dilation} must be >= 1")
    before, after = _padding(op, a["padding"], 2)
    ceil_mode = bool(a["ceil_mode"])
    shape = (x.shape[0], x.shape[1]) + tuple(
        _out_dim(op, x.shape[2 + d], pool[d], strides[d], dilation[d], before[d], after[d],
                 ceil_mode, "pool window") for d in range(2))
    return shape, pool, strides, dilation, before, after, a


def _infer_pool(op, extra, dtypes):
    def infer(types, attrs):
        (x,) = tensor_args(op, types, count=1)
        check_dtype(op, x.dtype, dtypes)
        return out_type(_pool_attrs(op, x, attrs, extra)[0], x.dtype)
    return infer


def _window(x, out_shape, pool, strides, dilation, before, after):
    """Reduce axes and, per output index, the input positions and in-bounds condition."""
    ry = te.reduce_axis((0, pool[0]), name="ry")
    rx = te.reduce_axis((0, pool[1]), name="rx")

    def taps(y, xx):
        pos, conds = [], []
        for d, (o, r) in enumerate(((y, ry), (xx, rx))):
            size = x.shape[2 + d]
            p = (o * strides[d] if strides[d] != 1 else o) + (r * dilation[d] if dilation[d] != 1 else r)
            if before[d]:
                p = p - before[d]
                conds.append(p >= 0)
            last = (const_dim(out_shape[2 + d]) or 0) - 1
            reach = last * strides[d] + (pool[d] - 1) * dilation[d] - before[d]
            if const_dim(size) is None or const_dim(out_shape[2 + d]) is None or reach >= const_dim(size):
                conds.append(p < as_dim(size))
            pos.append(p)
        return pos, _and(conds)
    return ry, rx, taps


def _compute_max_pool(args, attrs):
    (x,) = args
    shape, pool, strides, dilation, before, after, _ = _pool_attrs(
        "max_pool2d", TensorType(x.shape, x.dtype), attrs, {})
    ry, rx, taps = _window(x, shape, pool, strides, dilation, before, after)

    def f(n, c, y, xx):
        (py, px), cond = taps(y, xx)
        return te.max(x[n, c, py, px], axis=[ry, rx], where=cond)
    return te.compute(shape, f, name="max_pool2d")


def _window_count(o, size, k, stride, dilation, before, after, include_pad):
    """How many of the window's taps count: in the input, or (include_pad) in the padded
    input (PyTorch: the ceil_mode overhang past the padding never counts)."""
    def ceil_div(a):
        return a if dilation == 1 else (a + (dilation - 1)) // dilation
    start = (o * stride if stride != 1 else o) - before      # input position of tap 0
    if include_pad:
        return _min(ceil_div(as_dim(size) + after - start), k)   # taps before size + after
    lo = _max(ceil_div(0 - start), 0)
    hi = _min(ceil_div(as_dim(size) - start), k)
    return _max(hi - lo, 1)


def _compute_avg_pool(args, attrs):
    (x,) = args
    shape, pool, strides, dilation, before, after, a = _pool_attrs(
        "avg_pool2d", TensorType(x.shape, x.dtype), attrs, {"count_include_pad": False})
    include = bool(a["count_include_pad"])
    ry, rx, taps = _window(x, shape, pool, strides, dilation, before, after)

    def f(n, c, y, xx):
        (py, px), cond = taps(y, xx)
        return te.sum(x[n, c, py, px].astype(acc), axis=[ry, rx], where=cond)
    acc = acc_dtype(x.dtype)
    total = te.compute(shape, f, name="avg_pool2d_sum")
    # Windows wholly inside the (un)padded input count every tap.
    exact = all(const_dim(shape[2 + d]) is not None and const_dim(x.shape[2 + d]) is not None and
                (include or before[d] == 0) and
                (const_dim(shape[2 + d]) - 1) * strides[d] + (pool[d] - 1) * dilation[d] - before[d]
                < const_dim(x.shape[2 + d]) + (after[d] if include else 0)
                for d in range(2))

    def g(n, c, y, xx):
        if exact:
            return (total[n, c, y, xx] / literal(pool[0] * pool[1], acc)).astype(x.dtype)
        cnt = [_window_count(o, x.shape[2 + d], pool[d], strides[d], dilation[d], before[d], after[d],
                             include) for d, o in enumerate((y, xx))]
        return (total[n, c, y, xx] / Cast(acc, cnt[0] * cnt[1])).astype(x.dtype)
    return te.compute(shape, g, name="avg_pool2d")


def _pool_ref_windows(x, pool, strides, padding, dilation, ceil_mode):
    """For numpy references: per output position (y, x) the list of in-input taps and the
    per-dimension tap ranges (before clipping to the input)."""
    pool = _tuple("pool", "pool_size", pool, 2)
    strides = pool if strides is None else _tuple("pool", "strides", strides, 2)
    dilation = _tuple("pool", "dilation", dilation, 2)
    before, after = _padding("pool", padding, 2)
    outs = [const_dim(_out_dim("pool", x.shape[2 + d], pool[d], strides[d], dilation[d], before[d],
                                after[d], ceil_mode)) for d in range(2)]
    axes = []
    for d in range(2):
        per = []
        for o in range(outs[d]):
            taps = [o * strides[d] + t * dilation[d] - before[d] for t in range(pool[d])]
            padded_ok = [t for t in taps if t < x.shape[2 + d] + after[d]]
            per.append(([t for t in taps if 0 <= t < x.shape[2 + d]], len(padded_ok)))
        axes.append(per)
    return axes


def _ref_max_pool(x, pool_size, strides=None, padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False):
    wy, wx = _pool_ref_windows(x, pool_size, strides, padding, dilation, ceil_mode)
    fill = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    out = np.full(x.shape[:2] + (len(wy), len(wx)), fill, dtype=x.dtype)
    for i, (ty, _) in enumerate(wy):
        for j, (tx, _) in enumerate(wx):
            if ty and tx:
                out[:, :, i, j] = x[:, :, ty][:, :, :, tx].max(axis=(2, 3))
    return out


def _ref_avg_pool(x, pool_size, strides=None, padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False,
                  count_include_pad=False):
    wy, wx = _pool_ref_windows(x, pool_size, strides, padding, dilation, ceil_mode)
    out = np.zeros(x.shape[:2] + (len(wy), len(wx)), dtype=np.float64)
    for i, (ty, ny) in enumerate(wy):
        for j, (tx, nx) in enumerate(wx):
            s = x[:, :, ty][:, :, :, tx].astype(np.float64).sum(axis=(2, 3))
            cnt = ny * nx if count_include_pad else len(ty) * len(tx)
            out[:, :, i, j] = s / max(cnt, 1)
    return out.astype(x.dtype)


_POOL_COMMON = ("(x, pool_size, strides=None, padding=(0, 0, 0, 0), dilation=(1, 1), "
                "ceil_mode=False{extra}) over NCHW: strides=None means pool_size; padding is "
                "(top, left, bottom, right) (or 1 or 2 values); ceil_mode rounds the output size "
                "up as PyTorch does (a last window that would start in the trailing padding is "
                "dropped). ")
_NUMERIC = FLOAT_DTYPES + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")

register("max_pool2d", infer=_infer_pool("max_pool2d", {}, _NUMERIC), compute=_compute_max_pool,
         reference=_ref_max_pool, pattern="reduce", num_args=1,
         doc="max_pool2d" + _POOL_COMMON.format(extra="") +
             "Padding is never selected (it acts as -inf).")
register("avg_pool2d", infer=_infer_pool("avg_pool2d", {"count_include_pad": False}, FLOAT_DTYPES),
         compute=_compute_avg_pool, reference=_ref_avg_pool, pattern="reduce", num_args=1,
         doc="avg_pool2d" + _POOL_COMMON.format(extra=", count_include_pad=False") +
             "The divisor counts the taps inside the input, or with count_include_pad=True "
             "those inside the padded input (PyTorch).")


# ---- adaptive_avg_pool2d -------------------------------------------------------------------

def _adaptive_attrs(op, x, attrs):
    a = get_attrs(op, attrs, output_size=REQUIRED)
    size = require_attr(op, a, "output_size")
    size = size if isinstance(size, (list, tuple)) else (size, size)
    if x.ndim != 4 or len(size) != 2:
        raise error(op, f"expects a 4-D NCHW input and output_size=(h, w), got {shape_str(x.shape)} "
                        f"and {size!r}")
    ins = [const_dim(d) for d in x.shape[2:]]
    if None in ins or 0 in ins:
        raise error(op, f"needs static, non-empty spatial dimensions, got {shape_str(x.shape)}")
    outs = tuple(ins[d] if size[d] is None else _ints(op, "output_size", size[d], 1)[0] for d in range(2))
    if min(outs) < 1:
        raise error(op, f"output_size {outs} must be >= 1")
    return ins, outs


def _infer_adaptive(types, attrs):
    (x,) = tensor_args("adaptive_avg_pool2d", types, count=1)
    check_dtype("adaptive_avg_pool2d", x.dtype, FLOAT_DTYPES)
    _, outs = _adaptive_attrs("adaptive_avg_pool2d", x, attrs)
    return out_type(tuple(x.shape[:2]) + outs, x.dtype)


def _bins(size, out):
    """PyTorch's adaptive bins: [floor(i*size/out), ceil((i+1)*size/out))."""
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


def _compute_adaptive(args, attrs):
    (x,) = args
    ins, outs = _adaptive_attrs("adaptive_avg_pool2d", TensorType(x.shape, x.dtype), attrs)
    kmax = [max(e - s for s, e in _bins(ins[d], outs[d])) for d in range(2)]
    ry = te.reduce_axis((0, kmax[0]), name="ry")
    rx = te.reduce_axis((0, kmax[1]), name="rx")
    shape = tuple(x.shape[:2]) + outs

    def bounds(o, d):
        if ins[d] % outs[d] == 0:
            k = ins[d] // outs[d]
            return o * k, o * k + k, None
        start = (o * ins[d]) // outs[d]
        end = ((o + 1) * ins[d] + (outs[d] - 1)) // outs[d]
        return start, end, end - start

    def f(n, c, y, xx):
        (sy, ey, _), (sx, ex, _) = bounds(y, 0), bounds(xx, 1)
        conds = [None if ins[0] % outs[0] == 0 else sy + ry < ey,
                 None if ins[1] % outs[1] == 0 else sx + rx < ex]
        return te.sum(x[n, c, sy + ry, sx + rx].astype(acc), axis=[ry, rx], where=_and(conds))
    acc = acc_dtype(x.dtype)
    total = te.compute(shape, f, name="adaptive_avg_pool2d_sum")

    def g(n, c, y, xx):
        (_, _, ly), (_, _, lx) = bounds(y, 0), bounds(xx, 1)
        if ly is None and lx is None:
            return (total[n, c, y, xx] / literal(kmax[0] * kmax[1], acc)).astype(x.dtype)
        cnt = (ly if ly is not None else kmax[0]) * (lx if lx is not None else kmax[1])
        return (total[n, c, y, xx] / Cast(acc, cnt)).astype(x.dtype)
    return te.compute(shape, g, name="adaptive_avg_pool2d")


def _ref_adaptive(x, output_size):
    size = output_size if isinstance(output_size, (list, tuple)) else (output_size, output_size)
    outs = [x.shape[2 + d] if size[d] is None else int(size[d]) for d in range(2)]
    by, bx = _bins(x.shape[2], outs[0]), _bins(x.shape[3], outs[1])
    out = np.zeros(x.shape[:2] + tuple(outs), dtype=np.float64)
    for i, (s0, e0) in enumerate(by):
        for j, (s1, e1) in enumerate(bx):
            out[:, :, i, j] = x[:, :, s0:e0, s1:e1].astype(np.float64).mean(axis=(2, 3))
    return out.astype(x.dtype)


register("adaptive_avg_pool2d", infer=_infer_adaptive, compute=_compute_adaptive,
         reference=_ref_adaptive, pattern="reduce", num_args=1,
         doc="adaptive_avg_pool2d(x, output_size=(h, w)): average over PyTorch's adaptive bins "
             "(start = floor(i*H/h), end = ceil((i+1)*H/h)); an int means (n, n), a None entry "
             "keeps that input size. NCHW, static H and W.")


# ---- resize2d ------------------------------------------------------------------------------

_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")
_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_attrs(op, x, attrs):
    a = get_attrs(op, attrs, size=REQUIRED, method="nearest",
                  coordinate_transformation_mode="half_pixel", rounding_method="round_prefer_floor")
    if x.ndim not in (4, 5):
        raise error(op, f"expects a 4-D NCHW input (or a 5-D channel-blocked NCHW[b]c one), got "
                        f"{shape_str(x.shape)}")
    size = _tuple(op, "size", require_attr(op, a, "size"), 2)
    if min(size) < 1:
        raise error(op, f"size {size} must be >= 1")
    if any(const_dim(d) == 0 for d in x.shape[2:]):
        raise error(op, f"cannot resize the empty spatial dimensions of {shape_str(x.shape)}")
    for key, allowed in (("method", ("nearest", "linear")),
                         ("coordinate_transformation_mode", _MODES), ("rounding_method", _ROUNDING)):
        if a[key] not in allowed:
            raise error(op, f"{key}={a[key]!r} is not supported; expected one of {', '.join(allowed)}")
    if a["method"] == "linear":
        check_dtype(op, x.dtype, FLOAT_DTYPES)
    return size, a["method"], a["coordinate_transformation_mode"], a["rounding_method"]


def _infer_resize(types, attrs):
    (x,) = tensor_args("resize2d", types, count=1)
    size, *_ = _resize_attrs("resize2d", x, attrs)
    return out_type(tuple(x.shape[:2]) + size + tuple(x.shape[4:]), x.dtype)


def _source(o, size, out, mode):
    """The input coordinate of output index ``o`` as an exact fraction ``num / den`` (num an
    integer expression in ``o``, den a positive int); ONNX's coordinate_transformation_mode."""
    size = as_dim(size)
    if mode == "asymmetric":
        return o * size, out
    if mode == "align_corners" or (mode == "pytorch_half_pixel" and out == 1):
        return (o * (size - 1), out - 1) if out > 1 else (IntImm(0), 1)
    return (o * 2 + 1) * size - out, 2 * out                   # (o + 0.5) * size/out - 0.5


def _fdiv(num, den: int):
    return num // den if den != 1 else num


def _nearest(num, den, rounding):
    if rounding == "floor":
        return _fdiv(num, den)
    if rounding == "ceil":
        return _fdiv(num + (den - 1), den)
    if rounding == "round_prefer_floor":                         # ceil(x - 1/2)
        return _fdiv(num * 2 + (den - 1), 2 * den)
    return _fdiv(num * 2 + den, 2 * den)                         # floor(x + 1/2)


def _compute_resize(args, attrs):
    (x,) = args
    size, method, mode, rounding = _resize_attrs("resize2d", TensorType(x.shape, x.dtype), attrs)
    # (a channel-blocked input keeps its block as a last axis: each output pixel's channels,
    # a vector, come from one input pixel's, so nothing is gathered)
    block = tuple(x.shape[4:])
    shape = tuple(x.shape[:2]) + size + block
    hi = [last_index(d) for d in x.shape[2:4]]

    if method == "nearest":
        def f(n, c, y, xx, *r):
            idx = [clamp(_nearest(*_source(o, x.shape[2 + d], size[d], mode), rounding), 0, hi[d])
                   for d, o in enumerate((y, xx))]
            return x[(n, c, idx[0], idx[1]) + r]
        return te.compute(shape, f, name="resize2d")

    def source(d, o):
        """(lower neighbour, upper neighbour, fraction or None) of output index ``o`` on
        spatial axis ``d``."""
        num, den = _source(o, x.shape[2 + d], size[d], mode)
        i0 = _fdiv(num, den)
        rem = num - i0 * den if den != 1 else None
        return (clamp(i0, 0, hi[d]), clamp(i0 + 1, 0, hi[d]),
                None if rem is None else Cast(x.dtype, rem) / literal(den, x.dtype))

    def lerp(a, b, t):                           # each load appears once in the expression
        return a() if t is None else a() * (literal(1.0, x.dtype) - t) + b() * t

    def across(src, n, c, yy, col, r):
        """Row ``yy`` of ``src`` interpolated at the column ``col`` (``source(1, xx)``)."""
        lo, up, t = col
        return lerp(lambda: src[(n, c, yy, lo) + r], lambda: src[(n, c, yy, up) + r], t)

    if _separable(x, size):
        # Each input row interpolated across once, then rows blended: the same arithmetic in
        # the same order as below, without redoing a row's interpolation for every output row
        # it serves (8 of them at 8x), and only the first stage gathers (NCHW vectorizes along
        # the output columns, whose neighbours are not contiguous): LR-ASPP's 28 -> 224
        # upsampling of 21 channels 1.32 -> 0.57 ms at one thread, in the model.
        rows = te.compute(tuple(x.shape[:3]) + (size[1],) + block,
                          lambda n, c, yy, xx, *r: across(x, n, c, yy, source(1, xx), r),
                          name="resize2d_rows", attrs=dict([te.KEEP_STAGE]))

        def blend(n, c, y, xx, *r):
            lo, up, t = source(0, y)
            return lerp(lambda: rows[(n, c, lo, xx) + r], lambda: rows[(n, c, up, xx) + r], t)
        return te.compute(shape, blend, name="resize2d")

    def f(n, c, y, xx, *r):
        lo, up, t = source(0, y)
        col = source(1, xx)
        return lerp(lambda: across(x, n, c, lo, col, r), lambda: across(x, n, c, up, col, r), t)
    return te.compute(shape, f, name="resize2d")


def _separable(x, size) -> bool:
    """Whether a linear resize runs as two stages (``_compute_resize``): NCHW (a blocked input
    reads whole vectors of channels, no gathers), static, more output rows than input rows
    (else the first stage does more work than it saves), and columns to interpolate."""
    h, w = (getattr(d, "value", d) for d in x.shape[2:4])
    return len(x.shape) == 4 and isinstance(h, int) and isinstance(w, int) \
        and size[0] > h and size[1] != w


def _ref_resize(x, size, method="nearest", coordinate_transformation_mode="half_pixel",
                rounding_method="round_prefer_floor"):
    if x.ndim == 5:     # NCHW[b]c: the NCHW result, blocked again
        b = x.shape[4]
        plain = x.transpose(0, 1, 4, 2, 3).reshape(x.shape[0], -1, *x.shape[2:4])
        out = _ref_resize(plain, size, method, coordinate_transformation_mode, rounding_method)
        return out.reshape(out.shape[0], -1, b, *out.shape[2:]).transpose(0, 1, 3, 4, 2)
    mode = coordinate_transformation_mode
    axes = []
    for d in range(2):
        n_in, n_out = x.shape[2 + d], int(size[d])
        coords = []
        for o in range(n_out):
            if mode == "asymmetric":
                c = Fraction(o * n_in, n_out)
            elif mode == "align_corners" or (mode == "pytorch_half_pixel" and n_out == 1):
                c = Fraction(o * (n_in - 1), n_out - 1) if n_out > 1 else Fraction(0)
            else:
                c = (o + Fraction(1, 2)) * Fraction(n_in, n_out) - Fraction(1, 2)
            coords.append(c)
        axes.append((n_in, coords))
    if method == "nearest":
        rnd = {"floor": lambda c: c.__floor__(), "ceil": lambda c: c.__ceil__(),
               "round_prefer_floor": lambda c: (c - Fraction(1, 2)).__ceil__(),
               "round_prefer_ceil": lambda c: (c + Fraction(1, 2)).__floor__()}[rounding_method]
        iy, ix = ([min(max(rnd(c), 0), n - 1) for c in cs] for n, cs in axes)
        return x[:, :, iy][:, :, :, ix]
    (ny, cy), (nx, cx) = axes
    out = np.zeros(x.shape[:2] + (len(cy), len(cx)))
    xf = x.astype(np.float64)
    for i, a in enumerate(cy):
        y0 = a.__floor__()
        ty = float(a - y0)
        for j, b in enumerate(cx):
            x0 = b.__floor__()
            tx = float(b - x0)

            def at(yy, xx_):
                return xf[:, :, min(max(yy, 0), ny - 1), min(max(xx_, 0), nx - 1)]
            out[:, :, i, j] = ((1 - ty) * ((1 - tx) * at(y0, x0) + tx * at(y0, x0 + 1)) +
                               ty * ((1 - tx) * at(y0 + 1, x0) + tx * at(y0 + 1, x0 + 1)))
    return out.astype(x.dtype)


register("resize2d", infer=_infer_resize, compute=_compute_resize, reference=_ref_resize,
         pattern="injective", num_args=1,
         doc="resize2d(x, size=(h, w), method='nearest'|'linear', coordinate_transformation_mode="
             "'half_pixel'|'align_corners'|'asymmetric'|'pytorch_half_pixel', rounding_method="
             "'round_prefer_floor'|'round_prefer_ceil'|'floor'|'ceil'): ONNX Resize of the two "
             "spatial dims of NCHW x (or NCHW[b]c, 5-D) to ``size``. Source coordinates are computed exactly "
             "(integer arithmetic), so nearest never flips on a rounding tie; linear clamps "
             "neighbours to the edge (ONNX and PyTorch agree). rounding_method applies to "
             "nearest only (ONNX's nearest_mode).")
