"""``conv_live_taps``: a conv computes only the taps that read its input, not its padding.

A dilated conv on a small feature map reads mostly padding. DeepLabV3's ASPP runs 3 x 3 convs
of dilation 12, 24 and 36 over a 14 x 14 map (MobileNetV3 backbone, 224 x 224 input), padded
by as much: at dilation 24 or 36 every tap but the centre reads only zeros, for every output
pixel, and at 12 the outer taps read the map at two rows (or columns) of the fourteen. Run as
written, each conv pads its 960-channel input to 86 x 86 (28 MB) and multiplies zeros: the
three took 53 ms of the model's 64, onnxruntime 21 ms for all of it.

Along each spatial axis, output position ``o`` reads input ``o*stride + t*dilation - before``
at tap ``t``; the taps that land inside the input form one run ``first..last``, the same for
neighbouring positions. Consecutive positions with the same run are a *band*. So:

- **trim**: taps that no position's run reaches are dropped from the weight, and the padding
  shrinks by as many dilations (the conv at dilation 24 or 36 above becomes a 1 x 1 conv, no
  padding);
- **split**: where the bands' own runs do at most ``SPLIT_WORK`` of the trimmed conv's work,
  along an axis with at most ``MAX_BANDS`` bands, each band is a conv of its own over the
  slice of the input it reads, with only its run's taps and no padding, and the bands are
  concatenated (the conv at dilation 12: 3 x 3 bands, 18% of the taps-times-pixels)::

    y = R.conv2d(x, W, padding=(12, 12, 12, 12), dilation=(12, 12))    # x [1, 960, 14, 14]
  ->
    y_0_0 = R.conv2d(R.strided_slice(x, begin=(0, 0), end=(14, 14), axes=(2, 3)),
                     W[:, :, 1:3, 1:3], dilation=(12, 12))                # [1, 256, 2, 2]
    ...                                                                   # 9 bands
    y = R.concat(R.concat(y_0_0, y_0_1, y_0_2, axis=3), ..., axis=2)

Both are exact: the dropped products are products with zero padding. An ordinary 3 x 3 conv
with padding 1 keeps all its taps (its border bands lose one tap of three) and is left as it
is; so is any conv where a band reads no input at all (its output there is zero, which the
padded conv gives). A 3 x 3 conv over a 1 x 1 map becomes a 1 x 1 conv.

Only ``conv2d`` with a constant weight and static float32 shapes (a ``conv1d`` is a
``conv2d`` of height 1 by now, ``conv1d_as_2d``). Run it before the passes that choose an
algorithm or a layout by the kernel's size (Winograd, NCHWc), so that they see the convs that
will run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from .. import ops
from ..ir.graph import Binding, Call, Constant, GraphVar, TensorType
from ..ops.nn import _padding, _tuple
from .graph_util import rewrite_calls
from .infra import Pass, PassContext, context

# Split an axis into bands only when the bands do at most this share of the trimmed conv's
# multiply-adds along it (DeepLabV3's dilation 12 over 14 rows: 18 / 42), ...
SPLIT_WORK = 0.5
# ... and into at most this many: each band is a kernel of its own.
MAX_BANDS = 3


@dataclass(frozen=True)
class Band:
    """Output positions ``start..stop-1`` along one axis, whose live taps are ``first..last``
    (none when ``first > last``)."""
    start: int
    stop: int
    first: int
    last: int

    @property
    def taps(self) -> int:
        return max(0, self.last - self.first + 1)


def live_bands(size: int, out: int, kernel: int, stride: int, dilation: int,
               before: int) -> List[Band]:
    """The bands of one spatial axis: runs of output positions with the same live taps.

    >>> live_bands(14, 14, 3, 1, 36, 36)          # only the centre tap reads the input
    [Band(start=0, stop=14, first=1, last=1)]
    >>> [(b.start, b.stop, b.first, b.last) for b in live_bands(14, 14, 3, 1, 12, 12)]
    [(0, 2, 1, 2), (2, 12, 1, 1), (12, 14, 0, 1)]
    """
    bands: List[Band] = []
    for o in range(out):
        base = o * stride - before
        live = [t for t in range(kernel) if 0 <= base + t * dilation < size]
        first, last = (live[0], live[-1]) if live else (1, 0)
        if bands and (bands[-1].first, bands[-1].last) == (first, last):
            bands[-1] = Band(bands[-1].start, o + 1, first, last)
        else:
            bands.append(Band(o, o + 1, first, last))
    return bands


def axis_plan(size: int, out: int, kernel: int, stride: int, dilation: int,
              before: int) -> Optional[List[Band]]:
    """The bands one axis is computed in: the bands themselves (split), one band of every live
    tap (trimmed; it may read padding), or None when all ``kernel`` taps stay in one band."""
    bands = live_bands(size, out, kernel, stride, dilation, before)
    live = [b for b in bands if b.taps]
    if not live:
        return None
    whole = Band(0, out, min(b.first for b in live), max(b.last for b in live))
    banded = sum((b.stop - b.start) * b.taps for b in bands)
    if len(live) == len(bands) and 1 < len(bands) <= MAX_BANDS \
            and banded <= SPLIT_WORK * out * whole.taps:
        return bands
    return [whole] if whole.taps < kernel else None


def conv_live_taps(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    context(ctx)

    def replace(b: Binding, em) -> Optional[Call]:
        geometry = _geometry(b.value)
        plan = None if geometry is None else _plan(geometry)
        return None if plan is None else _banded_conv(b.var, b.value, geometry, plan, em)
    return Pass("conv_live_taps", lambda mod: rewrite_calls(mod, replace))


def _geometry(call: Call):
    """(input shape, output shape, weight, strides, dilation, before) of a conv this pass can
    rewrite, else None."""
    if call.op != "conv2d" or len(call.args) != 2:
        return None
    x, w = call.args
    if not isinstance(w, Constant) or w.data.dtype != np.float32 or not all(
            isinstance(t, TensorType) and t.dtype == "float32" and t.static_shape() is not None
            for t in (x.ty, call.ty)):
        return None
    attrs = dict(call.attrs)
    strides = _tuple("conv2d", "strides", attrs.get("strides", 1), 2)
    dilation = _tuple("conv2d", "dilation", attrs.get("dilation", 1), 2)
    before, _ = _padding("conv2d", attrs.get("padding", 0), 2)
    return x.ty.static_shape(), call.ty.static_shape(), w, strides, dilation, before


def _plan(geometry) -> Optional[Tuple[List[Band], List[Band]]]:
    """Per spatial axis, the bands to compute (``axis_plan``; an axis left whole is one band
    of all its taps), or None when neither axis changes."""
    x_shape, y_shape, w, strides, dilation, before = geometry
    plans = [axis_plan(x_shape[2 + a], y_shape[2 + a], w.data.shape[2 + a], strides[a],
                       dilation[a], before[a]) for a in range(2)]
    if plans == [None, None]:
        return None
    return tuple(p or [Band(0, y_shape[2 + a], 0, w.data.shape[2 + a] - 1)]
                 for a, p in enumerate(plans))


def _banded_conv(var: GraphVar, call: Call, geometry, plan, em) -> Call:
    """The value of ``var``: one conv per pair of bands, concatenated along the width, then
    the height (``plan`` from ``_plan``)."""
    x_shape, _, w, strides, dilation, before = geometry
    groups = dict(call.attrs).get("groups", 1)

    def bound(name, value):
        return em.emit(Binding(GraphVar(name, value.ty), value))
    rows = []
    for i, by in enumerate(plan[0]):
        row = [_band_conv(call.args[0], x_shape, w, (by, bx), strides, dilation, before, groups, em)
               for bx in plan[1]]
        rows.append(row[0] if len(row) == 1 else ops.call(
            "concat", *[bound(f"{var.name}_band{i}_{j}", p) for j, p in enumerate(row)], axis=3))
    result = rows[0] if len(rows) == 1 else ops.call(
        "concat", *[bound(f"{var.name}_band{i}", r) for i, r in enumerate(rows)], axis=2)
    if result.ty.static_shape() != var.ty.static_shape():
        raise AssertionError(f"conv_live_taps: {var.name} became {result.ty}, not {var.ty}")
    return result


def _band_conv(x, x_shape, w: Constant, bands, strides, dilation, before, groups, em) -> Call:
    """The conv that computes one band along each axis: the input rows and columns it reads
    (sliced; padded where the band reads padding), the weight's live taps."""
    begin, end, pad_before, pad_after, taps, dil = [], [], [], [], [], []
    for a, band in enumerate(bands):
        size = x_shape[2 + a]
        lo = band.start * strides[a] + band.first * dilation[a] - before[a]
        hi = (band.stop - 1) * strides[a] + band.last * dilation[a] - before[a] + 1
        begin.append(max(lo, 0))
        end.append(min(hi, size))
        pad_before.append(max(-lo, 0))
        pad_after.append(max(hi - size, 0))
        taps.append(slice(band.first, band.last + 1))
        # One tap left: its dilation no longer matters, and a 1 x 1 conv should say so.
        dil.append(dilation[a] if band.taps > 1 else 1)
    if begin != [0, 0] or end != list(x_shape[2:]):
        s = ops.call("strided_slice", x, begin=tuple(begin), end=tuple(end), axes=(2, 3))
        x = em.emit(Binding(GraphVar("conv_taps_input", s.ty), s))
    weight = Constant(np.ascontiguousarray(w.data[:, :, taps[0], taps[1]]))
    return ops.call("conv2d", x, weight, strides=tuple(strides),
                    padding=(pad_before[0], pad_before[1], pad_after[0], pad_after[1]),
                    dilation=tuple(dil), groups=groups)
