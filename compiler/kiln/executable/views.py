"""Copies the memory plan does instead of a kernel: concats written in place, slices read in place.

A channel concat (SqueezeNet's fire modules, GoogLeNet's inception blocks) copies every part
into a new tensor, and a channel slice (ShuffleNet's split) copies a range of one. When the
bytes in question are one contiguous range (every axis before the cut one has extent 1, as the
channels of a batch-1 NCHW or NCHWc tensor), no copy is needed:

- a **concat**'s parts are placed at their offsets inside the concat's storage, so each part's
  kernel writes straight into it, and the concat's value is a view of the whole;
- a **slice**'s value is a view of its input's storage at the slice's offset.

Either way the kernel is not called. The *container* (the concat's result, the slice's input)
stays live from its first member's kernel to the last read of it or of any member. An
allocation is a container or a member, never both (no chains), and a member of one container
only. Each member starts at a multiple of 64 bytes, so that no kernel gets a misaligned tensor;
nothing involved is returned (a returned tensor is not in the arena) or of sub-byte elements.

``plan_views`` finds them in one graph function, from the kernels' attributes
(``kernels.ATTR_CONCAT_AXIS``, ``kernels.ATTR_VIEW_OFFSET``).

>>> # lv13 = call_tir(concat, (lv9, lv12)): lv9 at byte 0 of lv13's storage, lv12 after it
>>> # lv22 = call_tir(strided_slice, (lv20,)): lv22 at lv20's byte 45472 x 4
"""
from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..ir.function import PrimFunc
from ..ir.graph import Call, GlobalVar, GraphVar, TensorType, Tuple as GTuple
from ..transform.kernels import ATTR_CONCAT_AXIS, ATTR_VIEW_OFFSET
from .format import ALIGN, tensor_nbytes


def plan_views(bindings: Sequence, outputs: Mapping[int, List[int]],
               alloc_types: Mapping[int, TensorType], prim_funcs: Mapping[str, PrimFunc],
               escaping: Set[int]) -> Tuple[Dict[int, Tuple[int, int]], Dict[int, int]]:
    """The concats and slices of a graph function that the memory plan can do (module docstring).

    ``bindings`` are the function's bindings, ``outputs`` the allocation ids of each call
    binding's outputs, ``alloc_types`` their types, ``escaping`` the allocations that may be
    returned. Returns ``views`` (member allocation -> (container allocation, byte offset in
    it)) and ``elided`` (binding index of each such kernel call -> the allocation its value
    is a view of)."""
    producer: Dict[GraphVar, int] = {}   # variable -> the one-output call_tir binding making it
    for i, b in enumerate(bindings):
        v = b.value
        if isinstance(v, Call) and v.op == "call_tir" and v.attr("inplace") is None \
                and isinstance(v.ty, TensorType) and len(outputs.get(i, ())) == 1:
            producer[b.var] = i
    views: Dict[int, Tuple[int, int]] = {}
    containers: Set[int] = set()
    elided: Dict[int, int] = {}
    for i, b in enumerate(bindings):
        found = _view_kernel(b.value, producer, prim_funcs)
        if found is None:
            continue
        kind, attr, sources = found
        out = outputs[i][0]
        srcs = [outputs[producer[f]][0] for f in sources]
        if kind == "concat":
            container, members = out, srcs
            offsets = _concat_offsets(alloc_types[out], [alloc_types[k] for k in srcs], attr)
        else:
            container, members = srcs[0], [out]
            offsets = _slice_offset(alloc_types[srcs[0]], alloc_types[out], attr)
        if offsets is None or container in views or container in escaping \
                or any(k in views or k in containers or k in escaping for k in members):
            continue
        for k, off in zip(members, offsets):
            views[k] = (container, off)
        containers.add(container)
        elided[i] = out
    return views, elided


def _view_kernel(v, producer: Mapping[GraphVar, int], prim_funcs: Mapping[str, PrimFunc]):
    """("concat", axis, parts) or ("slice", element offset, [input]) when ``v`` calls such a
    kernel on distinct one-output kernel results; else None."""
    if not isinstance(v, Call) or v.op != "call_tir" or v.attr("inplace") is not None \
            or not isinstance(v.ty, TensorType) or not isinstance(v.args[0], GlobalVar) \
            or not isinstance(v.args[1], GTuple):
        return None
    prim = prim_funcs.get(v.args[0].name)
    if prim is None:
        return None
    attrs = dict(prim.attrs)
    fields = v.args[1].fields
    if len(prim.params) != len(fields) + 1 \
            or not all(isinstance(f, GraphVar) and f in producer for f in fields) \
            or len(set(fields)) != len(fields):
        return None
    if attrs.get(ATTR_CONCAT_AXIS) is not None and len(fields) >= 2:
        return "concat", int(attrs[ATTR_CONCAT_AXIS]), list(fields)
    if attrs.get(ATTR_VIEW_OFFSET) is not None and len(fields) == 1:
        return "slice", int(attrs[ATTR_VIEW_OFFSET]), list(fields)
    return None


def _element_bytes(ty: TensorType) -> Optional[int]:
    """Bytes per element, None for sub-byte elements (packed across a view's boundaries)."""
    item = tensor_nbytes(ty.dtype, (1,))
    return item if tensor_nbytes(ty.dtype, (8,)) == 8 * item else None


def _concat_offsets(out: TensorType, parts: List[TensorType], axis: int):
    """Each part's byte offset in ``out`` when the parts are its consecutive, 64-byte aligned
    byte ranges along ``axis``; else None."""
    shape = out.static_shape()
    shapes = [p.static_shape() for p in parts]
    item = _element_bytes(out)
    if shape is None or None in shapes or item is None or any(p.dtype != out.dtype for p in parts):
        return None
    if any(d != 1 for d in shape[:axis]):
        return None   # the parts interleave in memory
    if any(len(s) != len(shape) or s[:axis] != shape[:axis] or s[axis + 1:] != shape[axis + 1:]
           for s in shapes) or sum(s[axis] for s in shapes) != shape[axis]:
        return None
    offsets, at = [], 0
    for s in shapes:
        if at % ALIGN:
            return None
        offsets.append(at)
        at += math.prod(s) * item
    return offsets


def _slice_offset(src: TensorType, out: TensorType, offset: int):
    """[the slice's byte offset in ``src``] when it is 64-byte aligned and inside it; else None."""
    src_shape, shape, item = src.static_shape(), out.static_shape(), _element_bytes(src)
    if src_shape is None or shape is None or item is None or src.dtype != out.dtype:
        return None
    if offset < 0 or offset + math.prod(shape) > math.prod(src_shape) or (offset * item) % ALIGN:
        return None
    return [offset * item]
