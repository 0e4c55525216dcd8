"""Concats done by the memory plan: each part written in place, the concat kernel skipped.

A channel concat (SqueezeNet's fire modules, GoogLeNet's inception blocks) copies every part
into a new tensor: a kernel that reads and writes all of it. When every part is laid out as a
contiguous byte range of the result (each axis before the concat axis has extent 1, as the
channel axis of a batch-1 NCHW or NCHWc tensor) and each part is the output of a kernel of its
own, the producers can write straight into the result: the memory plan places each part at its
offset inside the concat's storage, and the concat's value is a view of that storage, so the
concat kernel never runs.

``concat_views`` finds the concats this applies to in one graph function. A concat qualifies
when its kernel is a lone ``concat`` (``kernels.ATTR_CONCAT_AXIS``), it is not done in place,
its result and every part have static shapes and stay in the arena (none is returned), its parts are
distinct variables each bound to a one-output ``call_tir`` (not another in-place concat: one
level), no part belongs to another in-place concat, the dtype is whole bytes, and each part
starts at a multiple of 64 bytes (so that no kernel gets a misaligned tensor).

>>> # lv13 = call_tir(concat, (lv9, lv12)) -> lv9 at byte 0 of lv13's storage, lv12 after it
"""
from __future__ import annotations

import math
from typing import Dict, List, Mapping, Sequence, Set, Tuple

from ..ir.function import PrimFunc
from ..ir.graph import Call, GlobalVar, GraphVar, TensorType, Tuple as GTuple
from ..transform.kernels import ATTR_CONCAT_AXIS
from .format import ALIGN, tensor_nbytes


def concat_views(bindings: Sequence, outputs: Mapping[int, List[int]],
                 alloc_types: Mapping[int, TensorType], prim_funcs: Mapping[str, PrimFunc],
                 escaping: Set[int]) -> Tuple[Dict[int, Tuple[int, int]], Dict[int, int]]:
    """The concats of a graph function that the memory plan can do (module docstring).

    ``bindings`` are the function's bindings, ``outputs`` the allocation ids of each call
    binding's outputs, ``alloc_types`` their types, ``escaping`` the allocations that may be
    returned. Returns ``views`` (part allocation -> (concat allocation, byte offset in it)) and
    ``elided`` (binding index of each such concat -> its allocation)."""
    producer: Dict[GraphVar, int] = {}   # variable -> the one-output call_tir binding making it
    for i, b in enumerate(bindings):
        v = b.value
        if isinstance(v, Call) and v.op == "call_tir" and v.attr("inplace") is None \
                and isinstance(v.ty, TensorType) and len(outputs.get(i, ())) == 1:
            producer[b.var] = i
    views: Dict[int, Tuple[int, int]] = {}
    elided: Dict[int, int] = {}
    for i, b in enumerate(bindings):
        parts = _parts(b.value, producer, outputs, prim_funcs)
        if parts is None:
            continue
        axis, part_bindings = parts
        if any(j in elided for j in part_bindings):
            continue   # a concat of an in-place concat: one level only
        c = outputs[i][0]
        part_ids = [outputs[j][0] for j in part_bindings]
        offsets = _offsets(alloc_types[c], [alloc_types[k] for k in part_ids], axis)
        if offsets is None or c in escaping or any(k in escaping or k in views for k in part_ids):
            continue
        for k, off in zip(part_ids, offsets):
            views[k] = (c, off)
        elided[i] = c
    return views, elided


def _parts(v, producer: Mapping[GraphVar, int], outputs: Mapping[int, List[int]],
           prim_funcs: Mapping[str, PrimFunc]):
    """(axis, the parts' producing bindings) when ``v`` calls a lone concat kernel on distinct
    kernel outputs; else None."""
    if not isinstance(v, Call) or v.op != "call_tir" or v.attr("inplace") is not None \
            or not isinstance(v.ty, TensorType) or not isinstance(v.args[0], GlobalVar) \
            or not isinstance(v.args[1], GTuple):
        return None
    prim = prim_funcs.get(v.args[0].name)
    axis = dict(prim.attrs).get(ATTR_CONCAT_AXIS) if prim is not None else None
    fields = v.args[1].fields
    if axis is None or len(fields) < 2 or len(prim.params) != len(fields) + 1 \
            or not all(isinstance(f, GraphVar) and f in producer for f in fields) \
            or len(set(fields)) != len(fields):
        return None
    return int(axis), [producer[f] for f in fields]


def _offsets(out: TensorType, parts: List[TensorType], axis: int):
    """Each part's byte offset in ``out`` when the parts are its consecutive, 64-byte aligned
    byte ranges along ``axis``; else None."""
    shape = out.static_shape()
    shapes = [p.static_shape() for p in parts]
    if shape is None or None in shapes or any(p.dtype != out.dtype for p in parts):
        return None
    if any(d != 1 for d in shape[:axis]):
        return None   # the parts interleave in memory
    if any(len(s) != len(shape) or s[:axis] != shape[:axis] or s[axis + 1:] != shape[axis + 1:]
           for s in shapes) or sum(s[axis] for s in shapes) != shape[axis]:
        return None
    item = tensor_nbytes(out.dtype, (1,))
    if tensor_nbytes(out.dtype, (8,)) != 8 * item:
        return None   # sub-byte elements are packed across the parts' boundaries
    offsets, at = [], 0
    for s in shapes:
        if at % ALIGN:
            return None
        offsets.append(at)
        at += math.prod(s) * item
    return offsets
