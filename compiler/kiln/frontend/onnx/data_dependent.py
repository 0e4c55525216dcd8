"""Operators whose output *shape* depends on their input *values*: NonZero, Unique,
NonMaxSuppression, ImageDecoder.

Every Kiln tensor's shape is a function of the graph inputs' shapes (symbolic dims, derived
dims), so a count of selected elements cannot size an output at run time. These converters
therefore compute their result at import time, in numpy, from inputs known then
(initializers, Constants, folded values); given a run-time input they raise an error naming
it (``needs_constant``), and the ONNX backend specialises the model on that input's value, as
it does for shape inputs. They pass the backend node tests that way, not the run-time way.
"""
from __future__ import annotations

import io

import numpy as np

from .common import Unsupported, converter

_WHY = "(the output's size depends on its values)"


@converter("NonZero", since=9)
def non_zero(ctx, node, ins, attrs):
    """(rank, count) int64 indices of the nonzero elements, in row-major order."""
    x = ctx.need_value(ins[0], f"NonZero's input {_WHY}")
    return ctx.const(np.array(np.nonzero(np.asarray(x)), dtype=np.int64).reshape(np.ndim(x), -1))


@converter("Unique", since=11)
def unique(ctx, node, ins, attrs):
    """Y, indices (first occurrences), inverse_indices, counts; sorted ascending, or (sorted=0)
    in order of first occurrence; over the flattened input, or slices along ``axis``."""
    x = np.asarray(ctx.need_value(ins[0], f"Unique's input {_WHY}"))
    axis = attrs.get("axis")
    if axis is None:
        x = x.reshape(-1)
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    else:
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                              axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs.get("sorted", 1):
        order = np.argsort(first, kind="stable")           # by first occurrence
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(x, first, axis=0 if axis is None else axis)
    outs = [y, first, inverse, counts]
    return [ctx.const(np.asarray(o, dtype=x.dtype if i == 0 else np.int64)) for i, o in enumerate(outs)][
        :len(node.output)]


def _iou_over(a, b, center_point_box, threshold) -> bool:
    """Whether boxes a and b overlap by more than ``threshold`` (the ONNX reference's rules:
    corners in either order, or (x, y, w, h) centres; an empty intersection never suppresses)."""
    if center_point_box:
        ax0, ax1, ay0, ay1 = a[0] - a[2] / 2, a[0] + a[2] / 2, a[1] - a[3] / 2, a[1] + a[3] / 2
        bx0, bx1, by0, by1 = b[0] - b[2] / 2, b[0] + b[2] / 2, b[1] - b[3] / 2, b[1] + b[3] / 2
    else:
        ay0, ay1 = sorted((a[0], a[2]))
        ax0, ax1 = sorted((a[1], a[3]))
        by0, by1 = sorted((b[0], b[2]))
        bx0, bx1 = sorted((b[1], b[3]))
    iw, ih = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    if iw <= 0 or ih <= 0:
        return False
    inter = iw * ih
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > threshold


@converter("NonMaxSuppression", since=10)
def non_max_suppression(ctx, node, ins, attrs):
    """(selected, 3) int64 rows (batch, class, box): per batch and class, boxes above
    score_threshold in decreasing score (ties: lower index first), each kept unless it overlaps
    a kept one by more than iou_threshold, at most max_output_boxes_per_class."""
    ins = list(ins) + [None] * (5 - len(ins))
    boxes = np.asarray(ctx.need_value(ins[0], f"NonMaxSuppression's boxes {_WHY}"))
    scores = np.asarray(ctx.need_value(ins[1], f"NonMaxSuppression's scores {_WHY}"))

    def scalar(e, what, default):
        if e is None:
            return default
        v = np.asarray(ctx.need_value(e, f"NonMaxSuppression's {what} {_WHY}")).reshape(-1)
        return v[0] if v.size else default
    limit = max(int(scalar(ins[2], "max_output_boxes_per_class", 0)), 0)
    iou = float(scalar(ins[3], "iou_threshold", 0.0))
    score_min = scalar(ins[4], "score_threshold", None)
    cpb = attrs.get("center_point_box", 0)
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = [i for i in range(len(s)) if score_min is None or s[i] > score_min]
            cand.sort(key=lambda i: (-s[i], i))
            kept = []
            for i in cand:
                if len(kept) >= limit:
                    break
                if not any(_iou_over(boxes[b, i], boxes[b, j], cpb, iou) for j in kept):
                    kept.append(i)
                    rows.append((b, c, i))
    return ctx.const(np.array(rows, dtype=np.int64).reshape(-1, 3))


@converter("ImageDecoder", since=20)
def image_decoder(ctx, node, ins, attrs):
    """(H, W, 3) RGB or BGR, or (H, W, 1) grayscale uint8 pixels of an encoded image (JPEG, PNG,
    BMP, TIFF, WebP, PNM, JPEG 2000), decoded with Pillow as the ONNX reference does; the image's
    size is in its bytes, so they must be known at import."""
    data = np.asarray(ctx.need_value(ins[0], f"ImageDecoder's encoded image {_WHY}"))
    fmt = attrs.get("pixel_format", "RGB")
    if fmt not in ("RGB", "BGR", "Grayscale"):
        raise Unsupported(f"pixel_format={fmt!r} is not RGB, BGR or Grayscale")
    try:
        import PIL.Image
    except ImportError:
        raise Unsupported("ImageDecoder needs Pillow (pip install pillow)") from None
    try:
        img = PIL.Image.open(io.BytesIO(data.tobytes()))
        img = img.convert("L" if fmt == "Grayscale" else "RGB")
    except (OSError, ValueError, SyntaxError) as e:  # Pillow's words for bytes it cannot decode
        raise Unsupported(f"cannot decode the image ({data.size} bytes): {e}") from None
    pixels = np.asarray(img, dtype=np.uint8)
    if fmt == "Grayscale":
        pixels = pixels[:, :, None]
    elif fmt == "BGR":
        pixels = pixels[:, :, ::-1]
    return ctx.const(np.ascontiguousarray(pixels))
