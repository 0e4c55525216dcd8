"""Data types, spelled as strings: ``"float32"``, ``"int64"``, ``"bool"``, ``"float32x8"`` (lanes).

Strings keep IR and printed script identical; this module validates and takes them apart.

>>> bits("float16"), is_float("float16"), lanes("float32x8"), with_lanes("float32", 8)
(16, True, 8, 'float32x8')
"""
from __future__ import annotations

import functools
import re

import numpy as np

SCALAR_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64") + ("int4", "uint4", "int2", "uint2")
# Sub-byte integers: packed in tensors (two int4 or four int2 to a byte, the first element in
# the lowest bits, as ONNX and DLPack pack them), one element per register in kernels; numpy
# holds them as ml_dtypes' one-byte-per-element types. They have no vector (lanes) form.
SUBBYTE_DTYPES = ("int4", "uint4", "int2", "uint2")
# Narrow floats (ml_dtypes' names): stored as their bits (16, 8 or 4), computed in float32 and
# rounded back (round to nearest even); kernels only load, store and convert them
# (codegen/narrow_float.py). numpy holds them as ml_dtypes arrays.
NARROW_FLOAT_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                       "float8_e8m0fnu", "float4_e2m1fn")
# float4_e2m1fn is also packed, two to a byte, like int4 (is_subbyte), and has no vector form.
_NARROW_BITS = {"bfloat16": 16, "float4_e2m1fn": 4}
# Their DLPack (code, bits): kDLBfloat, and DLPack 1.1's float8 codes (runtime_c/include/dlpack.h).
NARROW_FLOAT_DLPACK = {"bfloat16": (4, 16), "float8_e4m3fn": (10, 8), "float8_e4m3fnuz": (11, 8),
                       "float8_e5m2": (12, 8), "float8_e5m2fnuz": (13, 8), "float8_e8m0fnu": (14, 8),
                       "float4_e2m1fn": (17, 4)}
# The dtype of loop variables and buffer indices unless the program says otherwise.
INDEX_DTYPE = "int32"

_PATTERN = re.compile(r"^(bool|int8|int16|int32|int64|uint8|uint16|uint32|uint64|float16|float32|float64)"
                      r"(?:x(\d+))?$|^(int4|uint4|int2|uint2)$")

_NARROW_PATTERN = re.compile(r"^(" + "|".join(NARROW_FLOAT_DTYPES[:-1]) + r")(?:x(\d+))?$|^(float4_e2m1fn)$")


# Text (docs/strings.md): a value of this dtype is a string tensor, held by the runtime as one
# block and read only by the string operators' external functions (call_packed), never by a
# tensor program; it has no bits and no vector form. numpy holds it as an object array of str.
STRING = "string"


def check(dtype: str) -> str:
    """Return ``dtype`` if it is a valid Kiln dtype, else raise ``ValueError`` naming the choices."""
    if dtype == STRING:
        return dtype
    if not isinstance(dtype, str) or not (_PATTERN.match(dtype) or _NARROW_PATTERN.match(dtype)):
        raise ValueError(f"unknown dtype {dtype!r}; expected one of "
                         f"{', '.join(SCALAR_DTYPES + NARROW_FLOAT_DTYPES)}"
                         " (optionally with lanes, e.g. 'float32x8')")
    return dtype


@functools.lru_cache(maxsize=None)   # pure, on a few dtype strings; hot in the simplifier
def element(dtype: str) -> str:
    """The scalar type of a (possibly vector) dtype: ``element("float32x8") == "float32"``."""
    return check(dtype).split("x")[0] if "x" in dtype else dtype


def lanes(dtype: str) -> int:
    if dtype == STRING:
        return 1
    m = _PATTERN.match(check(dtype)) or _NARROW_PATTERN.match(dtype)
    return int(m.group(2)) if m.group(2) else 1


def is_subbyte(dtype: str) -> bool:
    """Whether elements of ``dtype`` are packed several to a byte (int4/uint4/int2/uint2,
    float4_e2m1fn)."""
    return element(dtype) in SUBBYTE_DTYPES or element(dtype) == "float4_e2m1fn"


def with_lanes(dtype: str, n: int) -> str:
    return element(dtype) if n == 1 else f"{element(dtype)}x{n}"


@functools.lru_cache(maxsize=None)
def bits(dtype: str) -> int:
    e = element(dtype)
    if e == STRING:
        raise ValueError("dtype 'string' has no bits: only the string operators take it (docs/strings.md)")
    if e in NARROW_FLOAT_DTYPES:
        return _NARROW_BITS.get(e, 8)
    return 1 if e == "bool" else int(re.sub(r"\D", "", e))


@functools.lru_cache(maxsize=None)
def is_float(dtype: str) -> bool:
    """Any floating-point format, the narrow ones (``is_narrow_float``) included."""
    e = element(dtype)
    return e.startswith("float") or e == "bfloat16"


def is_narrow_float(dtype: str) -> bool:
    """bfloat16 or a float8 format: held as bits, computed in float32 (``NARROW_FLOAT_DTYPES``)."""
    return element(dtype) in NARROW_FLOAT_DTYPES


@functools.lru_cache(maxsize=None)
def is_int(dtype: str) -> bool:
    """Signed or unsigned integer (not bool)."""
    e = element(dtype)
    return e.startswith("int") or e.startswith("uint")


@functools.lru_cache(maxsize=None)
def is_uint(dtype: str) -> bool:
    return element(dtype).startswith("uint")


@functools.lru_cache(maxsize=None)
def is_bool(dtype: str) -> bool:
    return element(dtype) == "bool"


def to_numpy(dtype: str) -> np.dtype:
    e = element(dtype)
    if e == STRING:
        return np.dtype(object)
    if e in SUBBYTE_DTYPES:
        import ml_dtypes  # numpy has no 4- or 2-bit integers
        return np.dtype(getattr(ml_dtypes, e))
    if e in NARROW_FLOAT_DTYPES:
        import ml_dtypes  # numpy has no bfloat16 or float8
        return np.dtype(getattr(ml_dtypes, e))
    return np.dtype(e)


def from_numpy(dt) -> str:
    """The Kiln dtype of a numpy dtype; ``str`` and ``object`` arrays are ``string``."""
    if np.dtype(dt).kind in "OU":
        return STRING
    return check(str(np.dtype(dt)))
