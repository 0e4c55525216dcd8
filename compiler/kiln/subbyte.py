"""Packing of the sub-byte integer dtypes (int4, uint4, int2, uint2) to and from numpy.

Kiln tensors hold these packed: ``8 // bits`` elements to a byte, element ``i`` in bits
``(i % per_byte) * bits`` and up of byte ``i // per_byte`` (ONNX's and DLPack's layout: the first
element in the low nibble), the last byte padded with zero bits. numpy holds them unpacked, one
element per byte, as ml_dtypes' ``int4``/``uint4``/``int2``/``uint2``. This module converts
between the two; it needs only numpy and ml_dtypes, so both the compiler (constants in an
executable) and the runtime (arrays crossing the Python boundary) use it.

>>> import ml_dtypes
>>> a = np.array([1, -2, 7], dtype=ml_dtypes.int4)
>>> pack(a).tobytes().hex()
'e107'
>>> unpack(pack(a), "int4", (3,))
array([1, -2, 7], dtype=int4)
"""
from __future__ import annotations

import math

import numpy as np

BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}
# float4_e2m1fn packs the same way; its code is the low 4 bits of ml_dtypes' byte (no sign
# extension: the code is the bits, not an integer value).
BITS["float4_e2m1fn"] = 4


def is_subbyte(dtype) -> bool:
    """Whether ``dtype`` (a name or a numpy dtype) is one of the packed sub-byte integers."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return name in BITS


def numpy_dtype(name: str) -> np.dtype:
    """The ml_dtypes numpy dtype of a sub-byte dtype name."""
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name))


def packed_nbytes(name: str, numel: int) -> int:
    """Bytes ``numel`` packed elements of ``name`` take: ``ceil(numel * bits / 8)``."""
    return (numel * BITS[name] + 7) // 8


def pack(arr: np.ndarray) -> np.ndarray:
    """The packed bytes (a flat uint8 array) of ``arr``, an ml_dtypes sub-byte array in C
    order."""
    name = arr.dtype.name
    bits = BITS[name]
    per = 8 // bits
    # The two's-complement low bits of each element (astype wraps to the wider int).
    flat = np.ascontiguousarray(arr).reshape(-1)
    flat = flat.view(np.uint8) if name == "float4_e2m1fn" else flat.astype(np.int8).view(np.uint8)
    codes = flat & ((1 << bits) - 1)
    n = codes.size
    padded = np.zeros(math.ceil(n / per) * per, np.uint8)
    padded[:n] = codes
    lanes = padded.reshape(-1, per)
    out = np.zeros(lanes.shape[0], np.uint8)
    for k in range(per):
        out |= lanes[:, k] << np.uint8(k * bits)
    return out


def unpack(data, name: str, shape) -> np.ndarray:
    """The ml_dtypes array of ``shape`` whose packed bytes are ``data`` (bytes-like or a uint8
    array of at least ``packed_nbytes`` bytes)."""
    bits = BITS[name]
    per = 8 // bits
    shape = tuple(int(d) for d in shape)
    n = math.prod(shape)
    raw = np.frombuffer(data, np.uint8, count=packed_nbytes(name, n)) if not isinstance(data, np.ndarray) \
        else np.asarray(data, np.uint8).reshape(-1)[:packed_nbytes(name, n)]
    mask = np.uint8((1 << bits) - 1)
    codes = np.stack([(raw >> np.uint8(k * bits)) & mask for k in range(per)], axis=1).reshape(-1)[:n]
    if name == "float4_e2m1fn":
        return codes.astype(np.uint8).view(numpy_dtype(name)).reshape(shape)
    values = codes.astype(np.int8)
    if not name.startswith("u"):  # sign-extend the top bit of each field
        values = np.where(values >= (1 << (bits - 1)), values - (1 << bits), values).astype(np.int8)
    return values.astype(numpy_dtype(name)).reshape(shape)
