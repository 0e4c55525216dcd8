"""Winograd convolution F(m x m, 3 x 3): a 3x3, stride-1 ``conv2d`` as three operators.

``transform/conv_winograd.py`` rewrites ``conv2d(x, W)`` (NCHW, weight a constant) into::

    V = winograd_input(x, padding=p, tile=m)          # [alpha, alpha, T, C]
    M = winograd_gemm(V, U, out_channels=O)           # [alpha, alpha, T, O]
    Y = winograd_output(M, out_size=(OH, OW), tile=m) # [N, O, OH, OW], what conv2d gave

with ``alpha = m + 2`` and ``T = N * TH * TW`` tiles of ``m x m`` output pixels
(``TH = ceil(OH / m)``, ``TW = ceil(OW / m)``; the input is zero-extended to whole tiles).
``U = G g G^T`` is the weight transformed once at compile time (``transform_weight``, in
float64), packed in panels of ``P`` output channels: ``U[o // P, a, b, c, o % P]``. Per tile:

- ``winograd_input``: ``V = B^T d B`` of the tile's ``alpha x alpha`` input patch ``d``
  (blocks ``winograd_pad``: the input copied to NHWC with the padding, so that the transforms
  read channels contiguously; ``winograd_rows``: ``B^T d``; ``winograd_input``: ``(B^T d) B``);
- ``winograd_gemm``: ``alpha * alpha`` independent matrix products over the channels,
  ``M[a, b, t, o] = sum_c V[a, b, t, c] * U[a, b, c, o]`` (a batched contraction: the
  default register-tile schedule, vector axis ``o`` along the packed panels);
- ``winograd_output``: ``Y = A^T M A`` written as the NCHW conv output (blocks
  ``winograd_out_rows``: ``A^T M``; ``winograd_output``: ``(A^T M) A``, cropped to the output
  size). Its pattern is ``out_fusable``, so ``fuse_ops`` folds the conv's elementwise epilogue
  (bias, batch norm, relu, a residual add) into it.

The transform matrices are derived exactly (``fractions``) from the interpolation points
(Toom-Cook, as Lavin & Gray): ``A^T`` and ``G`` evaluate at the points, ``B^T`` is the inverse
transposed, rows scaled so that ``B^T`` has small integers: for m = 4 (points 0, +-1, +-2 and
infinity) these are Lavin's matrices. Each transform is written in te as a sum over the
nonzero entries of one matrix row, chosen by a Select on the row index: once the schedule
unrolls that index (``transform/schedule_winograd.py``), every Select folds to one row's sum.
"""
from __future__ import annotations

import functools
from fractions import Fraction
from typing import Sequence, Tuple

import numpy as np

from .. import te
from ..ir.expr import Select
from ..ir.graph import TensorType
from .common import (check_dtype, const_dim, error, get_attrs, literal, out_type, shape_str,
                     tensor_args)
from .nn import _padding, _tuple
from .registry import register
from .transform import _and, _max, _min

# Interpolation points per output tile size m (infinity is always the last point). F(4, 3)
# is accurate to ~1e-6 relative in float32; F(6, 3) loses about two more digits.
POINTS = {2: (0, 1, -1), 4: (0, 1, -1, 2, -2),
          6: (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))}
KERNEL = 3


# ---- the transform matrices ----------------------------------------------------------------

def _inverse(rows):
    """Exact inverse of a square matrix of Fractions (Gauss-Jordan)."""
    n = len(rows)
    a = [list(r) + [Fraction(int(i == j)) for j in range(n)] for i, r in enumerate(rows)]
    for c in range(n):
        p = next(r for r in range(c, n) if a[r][c] != 0)
        a[c], a[p] = a[p], a[c]
        a[c] = [v / a[c][c] for v in a[c]]
        for r in range(n):
            if r != c and a[r][c] != 0:
                f = a[r][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [r[n:] for r in a]


@functools.lru_cache(maxsize=None)
def matrices(m: int, r: int = KERNEL) -> Tuple[tuple, tuple, tuple]:
    """``(A^T, G, B^T)`` of F(m, r) as tuples of rows of ``Fraction``: ``A^T`` is m x alpha,
    ``G`` alpha x r, ``B^T`` alpha x alpha (alpha = m + r - 1). 1-D correlation
    ``y[i] = sum_k g[k] * d[i + k]`` is ``A^T ((G g) * (B^T d))``; 2-D nests it."""
    if m not in POINTS:
        raise ValueError(f"winograd: no interpolation points for output tile {m}; "
                         f"expected one of {sorted(POINTS)}")
    pts = [Fraction(p) for p in POINTS[m]]
    alpha = m + r - 1
    if len(pts) != alpha - 1:
        raise ValueError(f"winograd: F({m}, {r}) needs {alpha - 1} finite points, got {len(pts)}")

    def evaluation(k):     # alpha x k: polynomial of degree < k at each point, then infinity
        return [[p ** i for i in range(k)] for p in pts] + [[Fraction(0)] * (k - 1) + [Fraction(1)]]
    scale = [np.prod([p - q for q in pts if q != p]) for p in pts] + [Fraction(1)]
    bt = [list(col) for col in zip(*_inverse(evaluation(alpha)))]
    bt = tuple(tuple(v * s for v in row) for row, s in zip(bt, scale))
    g = tuple(tuple(v / s for v in row) for row, s in zip(evaluation(r), scale))
    at = tuple(zip(*evaluation(m)))
    return at, g, bt


def matrices_f64(m: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``matrices(m)`` as float64 arrays."""
    return tuple(np.array([[float(v) for v in row] for row in mat]) for mat in matrices(m))


def tiles(out_h: int, out_w: int, m: int) -> Tuple[int, int]:
    """Tiles (TH, TW) of m x m output pixels covering an ``out_h`` x ``out_w`` output."""
    return -(-out_h // m), -(-out_w // m)


def transform_weight(w: np.ndarray, m: int, lanes: int) -> np.ndarray:
    """``U = G g G^T`` of an OIHW 3x3 weight, packed as ``[ceil(O/P), alpha, alpha, C, P]``
    float32 (P = ``lanes``; the last panel zero-padded). Computed in float64."""
    if w.ndim != 4 or w.shape[2:] != (KERNEL, KERNEL):
        raise ValueError(f"winograd: expects an OIHW 3x3 weight, got shape {w.shape}")
    g = matrices_f64(m)[1]
    u = np.einsum("ak,ockl,bl->abco", g, w.astype(np.float64), g)
    o = w.shape[0]
    panels = -(-o // lanes)
    # Straight into the packed float32 array (one rounding, as astype would): no padded or
    # transposed float64 copies of a weight 4x the size of the original.
    out = (np.empty if panels * lanes == o else np.zeros)((panels,) + u.shape[:3] + (lanes,), w.dtype)
    view = out.transpose(1, 2, 3, 0, 4)          # [a, b, c, panel, lane]
    full = o // lanes
    view[:, :, :, :full] = u[..., :full * lanes].reshape(u.shape[:3] + (full, lanes))
    if full < panels:
        view[:, :, :, full, :o - full * lanes] = u[..., full * lanes:]
    return out


def unpack_weight(up: np.ndarray, out_channels: int) -> np.ndarray:
    """``[alpha, alpha, C, O]`` from the packed ``transform_weight`` result."""
    panels, alpha, _, c, lanes = up.shape
    u = up.transpose(1, 2, 3, 0, 4).reshape(alpha, alpha, c, panels * lanes)
    return u[..., :out_channels]


# ---- te helpers -----------------------------------------------------------------------------

def _row_sum(coeffs: Sequence[Fraction], terms: Sequence, dtype: str):
    """``sum_k coeffs[k] * terms[k]`` over the nonzero coefficients, +-1 without a multiply,
    positive terms first (so that no ``0 - x`` is needed)."""
    nz = sorted(((c, t) for c, t in zip(coeffs, terms) if c != 0), key=lambda ct: ct[0] < 0)
    out = None
    for c, t in nz:
        mag = abs(c)
        v = t if mag == 1 else literal(float(mag), dtype) * t
        if out is None:
            out = v if c > 0 else literal(float(c), dtype) * t
        else:
            out = out + v if c > 0 else out - v
    return out if out is not None else literal(0.0, dtype)


def _by_row(index, exprs):
    """``exprs[index]`` as a chain of Selects (folds to one expression for a constant index)."""
    if isinstance(index, int):
        return exprs[index]
    out = exprs[-1]
    for k in range(len(exprs) - 2, -1, -1):
        out = Select(index == k, exprs[k], out)
    return out


# ---- winograd_input -------------------------------------------------------------------------

def _input_geometry(op, x, attrs):
    a = get_attrs(op, attrs, padding=(0, 0, 0, 0), tile=4)
    if x.ndim not in (4, 5):
        raise error(op, f"expects a 4-D NCHW input, got {shape_str(x.shape)} (or a 5-D "
                        "NCHW[b]c one)")
    dims = [const_dim(d) for d in x.shape]
    if None in dims:
        raise error(op, f"needs a static input shape, got {shape_str(x.shape)}")
    if x.ndim == 5:              # channel-blocked [N, C/b, H, W, b]
        dims = [dims[0], dims[1] * dims[4], dims[2], dims[3]]
    m = a["tile"]
    if m not in POINTS:
        raise error(op, f"tile={m!r} is not supported; expected one of {sorted(POINTS)}")
    before, after = _padding(op, a["padding"], 2)
    n, c, h, w = dims
    oh, ow = h + before[0] + after[0] - (KERNEL - 1), w + before[1] + after[1] - (KERNEL - 1)
    if oh < 1 or ow < 1:
        raise error(op, f"a 3x3 window does not fit the padded input of {shape_str(x.shape)} "
                        f"with padding {tuple(before) + tuple(after)}")
    th, tw = tiles(oh, ow, m)
    return n, c, h, w, m, before, (oh, ow), (th, tw)


def _infer_input(types, attrs):
    (x,) = tensor_args("winograd_input", types, count=1)
    check_dtype("winograd_input", x.dtype, ("float32", "float64"))
    n, c, _, _, m, _, _, (th, tw) = _input_geometry("winograd_input", x, attrs)
    return out_type((m + 2, m + 2, n * th * tw, c), x.dtype)


def _tile_coords(t, n_img, th, tw):
    """(image, tile row, tile column) of the flat tile index ``t``."""
    n = t // (th * tw) if n_img > 1 else 0
    r = t % (th * tw) if n_img > 1 else t
    return n, (r // tw if th > 1 else 0), (r % tw if tw > 1 else 0)


def _compute_input(args, attrs):
    (x,) = args
    n_img, c, h, w, m, before, _, (th, tw) = _input_geometry(
        "winograd_input", TensorType(x.shape, x.dtype), attrs)
    alpha, dtype = m + 2, x.dtype
    hp, wp = th * m + 2, tw * m + 2
    zero = literal(0.0, dtype)

    def pad(n, yy, xx, ch):
        idx, conds = [], []
        for v, b, size, span in ((yy, before[0], h, hp), (xx, before[1], w, wp)):
            src = v - b if b else v
            if b > 0:
                conds.append(src >= 0)
            if span - b > size:
                conds.append(src < size)
            if b > 0:
                src = _max(src, 0)
            if span - b > size:
                src = _min(src, size - 1)
            idx.append(src)
        cond = _and(conds)
        if len(x.shape) == 5:
            b = const_dim(x.shape[4])
            load = x[n, ch // b, idx[0], idx[1], ch % b]
        else:
            load = x[n, ch, idx[0], idx[1]]
        return load if cond is None else Select(cond, load, zero)
    xp = te.compute((n_img, hp, wp, c), pad, name="winograd_pad")
    bt = matrices(m)[2]
    shape = (alpha, alpha, n_img * th * tw, c)

    def rows(a, j, t, ch):
        n, ty, tx = _tile_coords(t, n_img, th, tw)
        patch = [xp[n, ty * m + i, tx * m + j, ch] for i in range(alpha)]
        return _by_row(a, [_row_sum(bt[k], patch, dtype) for k in range(alpha)])
    d1 = te.compute(shape, rows, name="winograd_rows")

    def cols(a, b, t, ch):
        row = [d1[a, j, t, ch] for j in range(alpha)]
        return _by_row(b, [_row_sum(bt[k], row, dtype) for k in range(alpha)])
    return te.compute(shape, cols, name="winograd_input")


def _ref_input(x, padding=(0, 0, 0, 0), tile=4):
    if x.ndim == 5:
        n, q, h, w, b = x.shape
        x = x.transpose(0, 1, 4, 2, 3).reshape(n, q * b, h, w)
    n_img, c, h, w, m, before, (oh, ow), (th, tw) = _input_geometry(
        "winograd_input", TensorType(x.shape, str(x.dtype)), {"padding": padding, "tile": tile})
    alpha = m + 2
    hp, wp = th * m + 2, tw * m + 2
    xp = np.zeros((n_img, c, hp, wp))
    ys, xs = min(h, hp - before[0]), min(w, wp - before[1])
    xp[:, :, before[0]:before[0] + ys, before[1]:before[1] + xs] = x[:, :, :ys, :xs]
    bt = matrices_f64(m)[2]
    # patches[n, ty, tx, c, i, j]
    idx_y = (np.arange(th) * m)[:, None] + np.arange(alpha)[None, :]
    idx_x = (np.arange(tw) * m)[:, None] + np.arange(alpha)[None, :]
    patches = xp[:, :, idx_y[:, :, None, None], idx_x[None, None, :, :]]   # n c ty i tx j
    v = np.einsum("ai,nczisj,bj->abnzsc", bt, patches, bt)
    return v.reshape(alpha, alpha, n_img * th * tw, c).astype(x.dtype)


register("winograd_input", infer=_infer_input, compute=_compute_input, reference=_ref_input,
         pattern="opaque", num_args=1,
         doc="winograd_input(x, padding=(0, 0, 0, 0), tile=4): the Winograd input transform "
             "B^T d B of every tile of F(tile x tile, 3 x 3) over NCHW x (or channel-blocked "
             "NCHW[b]c x, [N, C/b, H, W, b]) padded by padding "
             "(as conv2d's) and zero-extended to whole tiles: [alpha, alpha, N*TH*TW, C], "
             "alpha = tile + 2, tiles numbered (image, tile row, tile column).")


# ---- winograd_gemm --------------------------------------------------------------------------

def _infer_gemm(types, attrs):
    v, u = tensor_args("winograd_gemm", types, names=("v", "u"), count=2)
    a = get_attrs("winograd_gemm", attrs, out_channels=None)
    check_dtype("winograd_gemm", v.dtype, ("float32", "float64"))
    vs, us = v.static_shape(), u.static_shape()
    if vs is None or us is None or len(vs) != 4 or len(us) != 5:
        raise error("winograd_gemm", f"expects v [alpha, alpha, T, C] and a packed u "
                                     f"[O/P, alpha, alpha, C, P], got {shape_str(v.shape)} and "
                                     f"{shape_str(u.shape)}")
    if v.dtype != u.dtype or us[1:4] != (vs[0], vs[1], vs[3]):
        raise error("winograd_gemm", f"v {v.dtype}{shape_str(v.shape)} and u "
                                     f"{u.dtype}{shape_str(u.shape)} do not fit")
    o = a["out_channels"]
    if o is None:
        o = us[0] * us[4]
    if not isinstance(o, int) or not (us[0] - 1) * us[4] < o <= us[0] * us[4]:
        raise error("winograd_gemm", f"out_channels={o!r} does not fit u {shape_str(u.shape)}")
    return out_type((vs[0], vs[1], vs[2], o), v.dtype)


def _compute_gemm(args, attrs):
    v, u = args
    shape = _infer_gemm([TensorType(v.shape, v.dtype), TensorType(u.shape, u.dtype)], attrs).shape
    p = const_dim(u.shape[4])
    k = te.reduce_axis((0, v.shape[3]), name="rc")
    return te.compute(shape, lambda a, b, t, o: te.sum(v[a, b, t, k] * u[o // p, a, b, k, o % p],
                                                       axis=k), name="winograd_gemm")


def _ref_gemm(v, u, out_channels=None):
    o = out_channels if out_channels is not None else u.shape[0] * u.shape[4]
    un = unpack_weight(u, o).astype(np.float64)
    return np.einsum("abtc,abco->abto", v.astype(np.float64), un).astype(v.dtype)


register("winograd_gemm", infer=_infer_gemm, compute=_compute_gemm, reference=_ref_gemm,
         pattern="out_fusable", num_args=2,
         doc="winograd_gemm(v, u, out_channels=None): M[a, b, t, o] = sum_c v[a, b, t, c] * "
             "u[o // P, a, b, c, o % P]: the alpha x alpha channel contractions of Winograd "
             "convolution, u the transformed weight packed in panels of P output channels "
             "(ops.winograd.transform_weight); out_channels defaults to every panel's.")


# ---- winograd_output ------------------------------------------------------------------------

def _output_geometry(op, mt, attrs):
    a = get_attrs(op, attrs, out_size=None, tile=4, layout="NCHW", fuse=None)
    if a["fuse"] not in (None, True, False):
        raise error(op, f"fuse={a['fuse']!r} must be None, True or False")
    m = a["tile"]
    if m not in POINTS:
        raise error(op, f"tile={m!r} is not supported; expected one of {sorted(POINTS)}")
    shape = mt.static_shape()
    if shape is None or len(shape) != 4 or shape[0] != m + 2 or shape[1] != m + 2:
        raise error(op, f"expects [alpha, alpha, T, O] with alpha = {m + 2}, got "
                        f"{shape_str(mt.shape)}")
    if a["out_size"] is None:
        raise error(op, "attribute out_size= is required")
    oh, ow = _tuple(op, "out_size", a["out_size"], 2)
    th, tw = tiles(oh, ow, m)
    if oh < 1 or ow < 1 or shape[2] % (th * tw):
        raise error(op, f"{shape[2]} tiles do not cover whole images of out_size {(oh, ow)} "
                        f"in {th} x {tw} tiles of {m}")
    block = _out_block(op, a["layout"], shape[3])
    return shape[2] // (th * tw), shape[3], m, (oh, ow), (th, tw), block


def _out_block(op, layout, channels):
    """The channel block of ``layout`` ("NCHW": None, "NCHW16c": 16), dividing ``channels``."""
    from .nchwc import parse_layout
    block = parse_layout(op, layout)
    if block is not None and channels % block:
        raise error(op, f"layout={layout!r}: {channels} channels do not split into blocks of "
                        f"{block}")
    return block


def _infer_output(types, attrs):
    (mt,) = tensor_args("winograd_output", types, count=1)
    check_dtype("winograd_output", mt.dtype, ("float32", "float64"))
    n, o, _, (oh, ow), _, block = _output_geometry("winograd_output", mt, attrs)
    return out_type((n, o // block, oh, ow, block) if block else (n, o, oh, ow), mt.dtype)


def _compute_output(args, attrs):
    (mt,) = args
    n_img, o, m, (oh, ow), (th, tw), block = _output_geometry(
        "winograd_output", TensorType(mt.shape, mt.dtype), attrs)
    alpha, dtype = m + 2, mt.dtype
    at = matrices(m)[0]
    d1 = te.compute((m, alpha, mt.shape[2], o), lambda i, b, t, ch: _by_row(
        i, [_row_sum(at[k], [mt[a, b, t, ch] for a in range(alpha)], dtype) for k in range(m)]),
        name="winograd_out_rows")

    def out(n, ch, y, x):
        t = x // m if tw > 1 else 0
        if th > 1:
            t = (y // m) * tw + t
        if n_img > 1:
            t = n * (th * tw) + t
        i = y % m if oh > 1 else 0
        row = [d1[i, b, t, ch] for b in range(alpha)]
        return _by_row(x % m if ow > 1 else 0, [_row_sum(at[k], row, dtype) for k in range(m)])
    if block:                    # channel-blocked [N, O/b, OH, OW, b]
        return te.compute((n_img, o // block, oh, ow, block),
                          lambda n, q, y, x, r: out(n, q * block + r, y, x), name="winograd_output")
    return te.compute((n_img, o, oh, ow), out, name="winograd_output")


def _ref_output(mt, out_size=None, tile=4, layout="NCHW", fuse=None):
    n_img, o, m, (oh, ow), (th, tw), block = _output_geometry(
        "winograd_output", TensorType(mt.shape, str(mt.dtype)),
        {"out_size": out_size, "tile": tile, "layout": layout})
    at = matrices_f64(m)[0]
    alpha = m + 2
    mm = mt.astype(np.float64).reshape(alpha, alpha, n_img, th, tw, o)
    y = np.einsum("ia,abnzso,jb->nozisj", at, mm, at).reshape(n_img, o, th * m, tw * m)
    y = y[:, :, :oh, :ow]
    if block:
        y = y.reshape(n_img, o // block, block, oh, ow).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(y).astype(mt.dtype)


register("winograd_output", infer=_infer_output, compute=_compute_output, reference=_ref_output,
         pattern="out_fusable", num_args=1,
         doc="winograd_output(m, out_size=(OH, OW), tile=4, layout='NCHW', fuse=None): the "
             "Winograd output transform A^T M A of every tile, written as the NCHW result "
             "[N, O, OH, OW] (tiles cropped to out_size), or channel-blocked [N, O/b, OH, OW, b] "
             "with layout='NCHW<b>c'; m is [alpha, alpha, N*TH*TW, O] from winograd_gemm. "
             "fuse: whether transform/fuse_winograd.py makes the three stages one kernel "
             "(None: its rule decides; True/False: a tuning record's choice).")


# ---- winograd_conv: the three stages in one kernel ----------------------------------------------

def _conv_attrs(attrs):
    a = get_attrs("winograd_conv", attrs, padding=(0, 0, 0, 0), tile=4, out_channels=None,
                  layout="NCHW")
    return ({"padding": a["padding"], "tile": a["tile"]},
            {"out_channels": a["out_channels"]},
            {"tile": a["tile"], "layout": a["layout"]})


def _conv_types(types, attrs):
    """The types of V, M and the result, each checked by its stage's own rule."""
    x, u = tensor_args("winograd_conv", types, names=("x", "u"), count=2)
    in_a, gemm_a, out_a = _conv_attrs(attrs)
    v = _infer_input([x], in_a)
    m = _infer_gemm([v, u], gemm_a)
    oh, ow = _input_geometry("winograd_conv", x, in_a)[6]
    return v, m, dict(out_a, out_size=(oh, ow))


def _infer_conv(types, attrs):
    _, m, out_a = _conv_types(types, attrs)
    return _infer_output([m], out_a)


def _compute_conv(args, attrs):
    x, u = args
    _, _, out_a = _conv_types([TensorType(x.shape, x.dtype), TensorType(u.shape, u.dtype)], attrs)
    in_a, gemm_a, _ = _conv_attrs(attrs)
    v = _compute_input([x], in_a)
    return _compute_output([_compute_gemm([v, u], gemm_a)], out_a)


def _ref_conv(x, u, padding=(0, 0, 0, 0), tile=4, out_channels=None, layout="NCHW"):
    _, _, out_a = _conv_types([TensorType(x.shape, str(x.dtype)), TensorType(u.shape, str(u.dtype))],
                              {"padding": padding, "tile": tile, "out_channels": out_channels,
                               "layout": layout})
    v = _ref_input(x, padding=padding, tile=tile)
    return _ref_output(_ref_gemm(v, u, out_channels=out_channels), **out_a)


register("winograd_conv", infer=_infer_conv, compute=_compute_conv, reference=_ref_conv,
         pattern="out_fusable", num_args=2,
         doc="winograd_conv(x, u, padding=(0, 0, 0, 0), tile=4, out_channels=None, "
             "layout='NCHW'): winograd_output(winograd_gemm(winograd_input(x), u)) as one "
             "operator, so that one kernel runs the three stages per block of tiles and V and M "
             "never reach memory (transform/fuse_winograd.py); x NCHW or NCHW[b]c, the result "
             "NCHW or in layout's channel blocks, the conv's output size.")
