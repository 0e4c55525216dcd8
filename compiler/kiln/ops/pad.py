"""The ``pad`` operator: constant, reflect, edge and wrap padding (numpy ``pad`` / ONNX Pad).

Constant padding is ``transform.padded`` (shared with conv and pooling). The other modes
map each output index to a source index inside ``x`` (a clamp for edge, a floor-mod for wrap, a
triangle wave for reflect), so every load is in bounds and no Select is needed.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..ir.graph import TensorType
from .common import (REQUIRED, as_dim, const_dim, error, get_attrs, out_type,
                     require_attr, shape_str, tensor_args)
from .registry import register
from .transform import _ints, _max, _min, _pad_shape, clamp, last_index, padded

MODES = ("constant", "reflect", "edge", "wrap")


def _pad_width(op, x, pad_width):
    if not isinstance(pad_width, (list, tuple)) or len(pad_width) != x.ndim:
        raise error(op, f"pad_width needs one (before, after) pair per dimension of "
                        f"{shape_str(x.shape)}, got {pad_width!r}")
    return [_ints(op, "pad_width entry", p, 2) for p in pad_width]


def _check_mode(x, pads, mode):
    """The extra rules of the non-constant modes: no cropping, and something to copy from."""
    if mode not in MODES:
        raise error("pad", f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "constant":
        return
    for k, (d, (b, a)) in enumerate(zip(x.shape, pads)):
        if b < 0 or a < 0:
            raise error("pad", f"mode={mode} needs pads >= 0, got {tuple(pads)} "
                               f"(crop with strided_slice first)")
        if (b or a) and const_dim(d) == 0:
            raise error("pad", f"mode={mode} cannot pad dimension {k} of {shape_str(x.shape)}: "
                               f"it is empty")


def _infer_pad(types, attrs):
    (x,) = tensor_args("pad", types, count=1)
    a = get_attrs("pad", attrs, pad_width=REQUIRED, pad_value=0.0, mode="constant")
    pads = _pad_width("pad", x, require_attr("pad", a, "pad_width"))
    if not isinstance(a["pad_value"], (int, float, np.number)) or isinstance(a["pad_value"], bool):
        raise error("pad", f"pad_value must be a number, got {a['pad_value']!r}")
    _check_mode(x, pads, a["mode"])
    return out_type(_pad_shape("pad", x, pads), x.dtype)


def _source_index(i, d, b, a, mode):
    """The index of ``x`` that output index ``i`` copies along a dim of size ``d`` padded by
    ``(b, a)`` (both >= 0) in ``mode``; always inside ``[0, d)``."""
    if b == 0 and a == 0:
        return i
    src = i - b if b else i
    if mode == "edge":
        return clamp(src, 0, last_index(d))
    d = as_dim(d)
    if mode == "wrap":
        return src % d
    # reflect: a triangle wave of period 2(d - 1); a dim of size 1 reflects onto itself
    # (the max keeps the modulus >= 1 there, giving index 0).
    period = (d - 1) * 2
    j = src % _max(period, 1)
    return _min(j, period - j)


def _compute_pad(args, attrs):
    (x,) = args
    pads = _pad_width("pad", TensorType(x.shape, x.dtype), attrs["pad_width"])
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        return padded(x, pads, attrs.get("pad_value", 0.0))
    shape = _pad_shape("pad", TensorType(x.shape, x.dtype), pads)

    def f(*i):
        return x[tuple(_source_index(i[k], d, b, a, mode)
                       for k, (d, (b, a)) in enumerate(zip(x.shape, pads)))]
    return te.compute(shape, f, name="pad")


def _ref_pad(x, pad_width, pad_value=0.0, mode="constant"):
    pads = [tuple(int(v) for v in p) for p in pad_width]
    if mode != "constant":
        return np.pad(x, pads, mode=mode)
    out = np.full([d + b + a for d, (b, a) in zip(x.shape, pads)], pad_value, dtype=x.dtype)
    dst = tuple(slice(max(b, 0), max(b, 0) + max(0, d + min(b, 0) + min(a, 0)))
                for d, (b, a) in zip(x.shape, pads))
    src = tuple(slice(max(-b, 0), max(-b, 0) + max(0, d + min(b, 0) + min(a, 0)))
                for d, (b, a) in zip(x.shape, pads))
    out[dst] = x[src]
    return out


register("pad", infer=_infer_pad, compute=_compute_pad, reference=_ref_pad,
         pattern="injective", num_args=1,
         doc="pad(x, pad_width=((before, after), ...), pad_value=0.0, mode='constant'): numpy "
             "pad, one pair per dimension. mode='constant' fills with pad_value and takes "
             "negative pads, which crop (ONNX Pad); 'reflect' (mirror without repeating the "
             "edge), 'edge' (repeat the edge) and 'wrap' (periodic) need pads >= 0 and a "
             "non-empty padded dim, and repeat as numpy does for pads larger than the dim.")
