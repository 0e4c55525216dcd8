"""Initializers kept outside the model file (ONNX "external data"), memory-mapped, not read.

A model over 2 GB must keep its weights in separate files (protobuf's limit), and exporters
do so for large models. ``onnx.load`` reads those files into the ModelProto, and
``numpy_helper.to_array`` copies the bytes again: twice the weights in memory before the
compiler has done anything. ``load_model(path)`` parses the model without its external data
and maps each main-graph initializer's bytes read-only from its file instead. The arrays are
views of the mapping: their pages come from the file as the compiler reads them and the
operating system may drop them again, so a weight costs memory only once, when it is packed.
Anything else stored externally (a subgraph's initializers, a ``Constant``'s tensor, a type
numpy cannot view directly such as bfloat16) is read as ``onnx.load`` would.

Every location is checked before it is opened: a relative path that stays inside the model's
directory (no ``..``, no absolute path, no symbolic link out of it), and an offset and length
that lie within the file and match the tensor's shape and type.

>>> model, mapped = load_model("llm.onnx")           # doctest: +SKIP
>>> mod, params = from_onnx(model, mapped_initializers=mapped)   # doctest: +SKIP
"""
from __future__ import annotations

import functools
import mmap
import os
import sys
from typing import Dict, Tuple

import numpy as np

from .common import ONNXImportError


@functools.lru_cache(maxsize=1)
def _numpy_types() -> Dict[int, np.dtype]:
    from onnx import TensorProto as T
    # The ONNX types whose raw bytes are exactly numpy's (little-endian) layout.
    return {T.FLOAT: np.dtype("<f4"), T.DOUBLE: np.dtype("<f8"), T.FLOAT16: np.dtype("<f2"),
            T.INT8: np.dtype("i1"), T.UINT8: np.dtype("u1"), T.INT16: np.dtype("<i2"),
            T.UINT16: np.dtype("<u2"), T.INT32: np.dtype("<i4"), T.UINT32: np.dtype("<u4"),
            T.INT64: np.dtype("<i8"), T.UINT64: np.dtype("<u8"), T.BOOL: np.dtype("?")}


def load_model(path) -> Tuple[object, Dict[str, np.ndarray]]:
    """(the ModelProto at ``path``, its main-graph initializers stored in external files,
    by name, as read-only arrays mapped from those files). Pass both to ``from_onnx``
    (``mapped_initializers=``); the model's own entries for the mapped tensors hold no data.
    A model with no external data gives an empty mapping."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    path = os.fsdecode(os.fspath(path))
    model = onnx.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    mapped: Dict[str, np.ndarray] = {}
    if sys.byteorder == "little":
        files: Dict[str, mmap.mmap] = {}
        try:
            for t in model.graph.initializer:
                if uses_external_data(t):
                    arr = _map(t, base, files)
                    if arr is not None:
                        mapped[t.name] = arr
                        # This proto is private to us: it no longer claims a file, so the loader
                        # below leaves it alone; the importer takes the array from ``mapped``.
                        del t.external_data[:]
                        t.data_location = onnx.TensorProto.DEFAULT
        finally:
            # Each array keeps its mapping alive through its buffer; the files can close.
            files.clear()
    try:
        load_external_data_for_model(model, base)   # the rest, read as onnx.load reads it
    except (OSError, ValueError) as e:
        raise ONNXImportError(f"{path}: cannot read the model's external data: {e}") from None
    return model, mapped


def _map(tensor, base: str, files: Dict[str, mmap.mmap]):
    """``tensor``'s data as a read-only array over a mapping of its file, or None where its
    type is not one numpy views directly."""
    from onnx.external_data_helper import ExternalDataInfo

    dtype = _numpy_types().get(tensor.data_type)
    if dtype is None:
        return None
    try:
        info = ExternalDataInfo(tensor)
    except ValueError as e:
        raise ONNXImportError(f"initializer {tensor.name!r}: {e}") from None
    shape = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in shape):
        raise ONNXImportError(f"initializer {tensor.name!r}: negative dims {shape}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    where = _resolve(base, info.location, tensor.name)
    size = os.path.getsize(where)
    offset = info.offset or 0
    length = nbytes if info.length is None else info.length
    if length != nbytes:
        raise ONNXImportError(f"initializer {tensor.name!r}: its external data is {length} bytes, "
                              f"but {shape} of {dtype} takes {nbytes}")
    if offset + length > size:
        raise ONNXImportError(f"initializer {tensor.name!r}: bytes {offset}..{offset + length} "
                              f"of {info.location!r} are past its end ({size} bytes)")
    if nbytes == 0:
        return np.zeros(shape, dtype)
    mm = files.get(where)
    if mm is None:
        with open(where, "rb") as f:
            mm = files[where] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    arr = np.frombuffer(mm, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset).reshape(shape)
    # Kernels and the constant writer expect aligned elements; an exporter that did not align
    # the tensor costs one copy of it.
    return arr if arr.flags.aligned else arr.copy()


def _resolve(base: str, location: str, name: str) -> str:
    """The file ``location`` names, relative to the model's directory ``base``, refusing any
    path that leads out of it."""
    parts = location.replace("\\", "/").split("/")
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) \
            or ".." in parts or ":" in location:
        raise ONNXImportError(f"initializer {name!r}: external data location {location!r} must "
                              "be a relative path inside the model's directory")
    where = os.path.join(base, *[p for p in parts if p not in ("", ".")])
    real = os.path.realpath(where)
    if os.path.commonpath([real, os.path.realpath(base)]) != os.path.realpath(base):
        raise ONNXImportError(f"initializer {name!r}: external data location {location!r} leads "
                              "out of the model's directory")
    if not os.path.isfile(real):
        raise ONNXImportError(f"initializer {name!r}: its external data file {location!r} is "
                              f"missing (looked in {base})")
    return real
