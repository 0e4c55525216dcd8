"""Index-driven gathers and scatters: GatherND, ReverseSequence, ScatterND, ScatterElements,
TensorScatter, MaxUnpool, Col2Im.

The gathers become one ``take`` on a flattened view of the data: the converter computes, with
graph ops on the (run-time) indices, the row-major flat index of every element to read (shapes
must be static: the strides are constants). The scatters are kiln's ``scatter_nd``;
ScatterElements and TensorScatter become it by spelling out every update's full coordinate.
"""
from __future__ import annotations

import numpy as np

from .common import Unsupported, converter, dtype, lookup, static_shape


def _int64(ctx, e):
    return e if dtype(e) == "int64" else ctx.op("cast", e, dtype="int64")


def _i64(v):
    return np.asarray(v, np.int64)


@converter("GatherND", since=11)
def gather_nd(ctx, node, ins, attrs):
    """``out[b..., i...] = data[b..., indices[b..., i..., :]]`` (``batch_dims`` leading dims
    shared): a take from data viewed as ``(batches * indexed, rest...)``."""
    data, idx = ins
    b = attrs.get("batch_dims", 0)
    ds, ishape = static_shape(data, "data"), static_shape(idx, "indices")
    k = ishape[-1]
    if b + k > len(ds):
        raise Unsupported(f"indices of depth {k} with batch_dims={b} index past the rank of "
                          f"data {tuple(ds)}")
    batch, indexed, rest = ds[:b], ds[b:b + k], ds[b + k:]
    idx = _int64(ctx, idx)
    dims = _i64(indexed)
    # negative indices count from the end of their dim
    idx = ctx.op("where", ctx.op("less", idx, ctx.const(_i64(0))),
                 ctx.op("add", idx, ctx.const(dims)), idx)
    strides = _i64(np.cumprod([1] + list(indexed[::-1]))[:-1][::-1]) if k else _i64([])
    lin = ctx.op("sum", ctx.op("multiply", idx, ctx.const(strides)), axis=-1)
    m = int(np.prod(indexed))
    if b:
        # each batch entry reads its own block of m rows
        nb = int(np.prod(batch))
        offs = (np.arange(nb, dtype=np.int64) * m).reshape(tuple(batch) + (1,) * (len(ishape) - 1 - b))
        lin = ctx.op("add", lin, ctx.const(offs))
    flat = ctx.op("reshape", data, shape=(int(np.prod(batch)) * m,) + tuple(rest))
    return ctx.op("take", flat, lin, axis=0)


@converter("ReverseSequence", since=10)
def reverse_sequence(ctx, node, ins, attrs):
    """Reverse the first ``sequence_lens[b]`` steps of every batch entry ``b``, keep the rest."""
    x, lens = ins
    t_axis, b_axis = attrs.get("time_axis", 0), attrs.get("batch_axis", 1)
    if {t_axis, b_axis} != {0, 1}:
        raise Unsupported(f"time_axis={t_axis}, batch_axis={b_axis}: one must be 0, the other 1")
    shp = static_shape(x)
    steps, batch = shp[t_axis], shp[b_axis]
    t = np.arange(steps, dtype=np.int64).reshape(steps, 1)
    bi = np.arange(batch, dtype=np.int64).reshape(1, batch)
    ln = ctx.op("reshape", _int64(ctx, lens), shape=(1, batch))
    # source step of (t, b): len[b] - 1 - t inside the sequence, t past its end
    rev = ctx.op("subtract", ctx.op("subtract", ln, ctx.const(_i64(1))), ctx.const(t))
    keep = ctx.const(np.broadcast_to(t, (steps, batch)).copy())
    src = ctx.op("where", ctx.op("less", ctx.const(t), ln), rev, keep)
    if t_axis == 0:
        lin = ctx.op("add", ctx.op("multiply", src, ctx.const(_i64(batch))), ctx.const(bi))
    else:
        lin = ctx.op("permute_dims", ctx.op("add", src, ctx.const(bi * steps)), axes=(1, 0))
    flat = ctx.op("reshape", x, shape=(steps * batch,) + tuple(shp[2:]))
    return ctx.op("take", flat, lin, axis=0)


@converter("ScatterND", since=11)
def scatter_nd(ctx, node, ins, attrs):
    """``out = data; out[indices[n..., :]] (reduction)= updates[n...]``."""
    data, idx, upd = ins
    return ctx.op("scatter_nd", data, idx, upd, reduction=attrs.get("reduction", "none"))


@converter("ScatterElements", since=11)
def scatter_elements(ctx, node, ins, attrs):
    """``out[..., indices[u], ...] (reduction)= updates[u]`` along ``axis``: scatter_nd with the
    coordinate of every update element, ``u`` with its ``axis`` entry replaced by the index."""
    data, idx, upd = ins
    r = len(data.ty.shape)
    axis = attrs.get("axis", 0)
    axis = axis + r if axis < 0 else axis
    ushape = static_shape(idx, "indices")
    full = _coordinates(ctx, ushape, {axis: _int64(ctx, idx)})
    return ctx.op("scatter_nd", data, full, upd, reduction=attrs.get("reduction", "none"))


def _coordinates(ctx, shape, given):
    """``(shape..., rank)`` int64: for every element of ``shape``, its coordinates, except
    along the dims in ``given`` (dim -> expr of ``shape``), whose coordinate is that expr."""
    r = len(shape)
    coords = []
    for d in range(r):
        if d in given:
            c = given[d]
        else:
            iota = np.arange(shape[d], dtype=np.int64).reshape([-1 if k == d else 1 for k in range(r)])
            c = ctx.const(np.broadcast_to(iota, shape).copy())
        coords.append(ctx.op("expand_dims", c, axis=r))
    return ctx.op("concat", *coords, axis=r)


@converter("TensorScatter", since=24)
def tensor_scatter(ctx, node, ins, attrs):
    """KV-cache update: ``update`` written into ``past_cache`` along ``axis`` from each batch
    entry's write index (modulo the cache length in circular mode)."""
    past, upd = ins[0], ins[1]
    wi = ins[2] if len(ins) > 2 else None
    shape = static_shape(upd, "update")
    r = len(shape)
    axis = attrs.get("axis", -2)
    axis = axis + r if axis < 0 else axis
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise Unsupported(f"mode={mode!r} is not linear or circular")
    iota = np.arange(shape[axis], dtype=np.int64).reshape([-1 if k == axis else 1 for k in range(r)])
    pos = ctx.const(np.broadcast_to(iota, shape).copy())
    if wi is not None:
        start = ctx.op("reshape", _int64(ctx, wi), shape=(-1,) + (1,) * (r - 1))
        pos = ctx.op("add", pos, start)
    if mode == "circular":
        cache_len = ctx.const(_i64(static_shape(past, "past_cache")[axis]))
        pos = lookup("Mod", ctx.opset)(ctx, None, [pos, cache_len], {})
    return ctx.op("scatter_nd", past, _coordinates(ctx, shape, {axis: pos}), upd)


@converter("MaxUnpool", since=9)
def max_unpool(ctx, node, ins, attrs):
    """Zeros with each value of X put back at its MaxPool index (a flat index into the
    unpooled shape inferred from the attributes): a scatter_nd into that shape flattened. A
    larger ``output_shape`` pads the result at the end of each dim (the ONNX reference)."""
    x, idx = ins[0], ins[1]
    shp = static_shape(x)
    nsp = len(shp) - 2
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * nsp))
    pads = list(attrs.get("pads", [0] * (2 * nsp)))
    inferred = list(shp[:2]) + [(shp[2 + i] - 1) * strides[i] - pads[i] - pads[nsp + i] + kernel[i]
                                for i in range(nsp)]
    zeros = ctx.const(np.zeros(int(np.prod(inferred)), dtype=np.dtype(dtype(x))))
    flat_idx = ctx.op("reshape", _int64(ctx, idx), shape=(-1, 1))
    y = ctx.op("scatter_nd", zeros, flat_idx, ctx.op("reshape", x, shape=(-1,)))
    y = ctx.op("reshape", y, shape=tuple(inferred))
    if len(ins) > 2 and ins[2] is not None:
        out_shape = [int(v) for v in np.asarray(ctx.need_value(ins[2], "output_shape")).reshape(-1)]
        if any(o < i for o, i in zip(out_shape, inferred)):
            raise Unsupported(f"output_shape {out_shape} is smaller than the unpooled shape {inferred}")
        if out_shape != inferred:
            y = ctx.op("pad", y, pad_width=tuple((0, o - i) for o, i in zip(out_shape, inferred)))
    return y


@converter("Col2Im", since=18)
def col2im(ctx, node, ins, attrs):
    """Sum the columns (N, C * prod(block), L) back into the image (N, C, *image_shape): a
    scatter_nd with add of every (block offset, block position) to its padded-image pixel,
    whose (constant) flat index numpy works out, then the padding cropped."""
    x = ins[0]
    image = [int(v) for v in np.asarray(ctx.need_value(ins[1], "image_shape")).reshape(-1)]
    block = [int(v) for v in np.asarray(ctx.need_value(ins[2], "block_shape")).reshape(-1)]
    nsp = len(image)
    dil = list(attrs.get("dilations", [1] * nsp))
    pads = list(attrs.get("pads", [0] * (2 * nsp)))
    strides = list(attrs.get("strides", [1] * nsp))
    n, ck, L = static_shape(x)
    k = int(np.prod(block))
    c = ck // k
    padded = [image[i] + pads[i] + pads[nsp + i] for i in range(nsp)]
    counts = [(padded[i] - (dil[i] * (block[i] - 1) + 1)) // strides[i] + 1 for i in range(nsp)]
    if int(np.prod(counts)) != L:
        raise Unsupported(f"{L} columns do not match the {counts} block positions of image {image}")
    # padded-image coordinate of (block offset, block position) along each dim, then flat
    offs = np.indices(block).reshape(nsp, k)              # (nsp, k)
    starts = np.indices(counts).reshape(nsp, L)           # (nsp, L)
    flat = np.zeros((k, L), np.int64)
    for i in range(nsp):
        coord = offs[i][:, None] * dil[i] + starts[i][None, :] * strides[i]
        flat = flat * padded[i] + coord
    upd = ctx.op("permute_dims", ctx.op("reshape", x, shape=(n, c, k, L)), axes=(2, 3, 0, 1))
    upd = ctx.op("reshape", upd, shape=(k * L, n * c))
    zeros = ctx.const(np.zeros((int(np.prod(padded)), n * c), dtype=np.dtype(dtype(x))))
    y = ctx.op("scatter_nd", zeros, ctx.const(flat.reshape(-1, 1)), upd, reduction="add")
    y = ctx.op("permute_dims", ctx.op("reshape", y, shape=tuple(padded) + (n, c)),
               axes=(nsp, nsp + 1) + tuple(range(nsp)))
    if any(pads):
        y = ctx.op("strided_slice", y, begin=tuple(pads[:nsp]),
                   end=tuple(pads[i] + image[i] for i in range(nsp)), axes=tuple(range(2, 2 + nsp)))
    return y
