"""The cffi extension, the runtime's error type, and dtype names."""

import functools
import re

try:
    from .._ffi import ffi, lib
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "the Kiln runtime extension kiln._ffi is not built; run "
        "`python runtime_c/build_ffi.py` (or `make runtime`) in the repository"
    ) from e


# The string operators' external functions (libkiln_strings, linked into this extension) are
# registered once, here, so that a compiled model with string operators initialises.
if lib.kiln_strings_register() != lib.KILN_OK:  # pragma: no cover - only out of memory
    raise ImportError("kiln: registering the string functions failed: "
                      + ffi.string(lib.kiln_last_error()).decode("utf-8", "replace"))


class KilnError(RuntimeError):
    """An error reported by the Kiln C runtime. ``str(e)`` is the runtime's message verbatim,
    e.g. ``main: argument 1 'B' expected shape (8,), got (9,)``; ``e.status`` is its status code
    (``kiln_status_t``), ``e.status_name`` a short name such as ``"shape mismatch"``."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status

    @property
    def status_name(self):
        return ffi.string(lib.kiln_status_string(self.status)).decode()


def check(status):
    """Raises KilnError with the calling thread's last runtime message unless status is OK."""
    if status != lib.KILN_OK:
        raise KilnError(ffi.string(lib.kiln_last_error()).decode("utf-8", "replace"), status)


# dtype strings <-> DLPack (code, bits, lanes): "float32", "int8", "bool", "bfloat16",
# "complex64", and vectors such as "float32x4" (4 lanes).
_CODE_OF_PREFIX = {
    "int": lib.kDLInt,
    "uint": lib.kDLUInt,
    "float": lib.kDLFloat,
    "bfloat": lib.kDLBfloat,
    "complex": lib.kDLComplex,
    "bool": lib.kDLBool,
}
_PREFIX_OF_CODE = {code: prefix for prefix, code in _CODE_OF_PREFIX.items()}
# int4/uint4/int2/uint2 are packed several to a byte (kiln.subbyte); numpy holds them as ml_dtypes'.
_BITS = {"int": (2, 4, 8, 16, 32, 64), "uint": (2, 4, 8, 16, 32, 64), "float": (16, 32, 64),
         "bfloat": (16,), "complex": (64, 128), "bool": (8,)}
_DTYPE = re.compile(r"(bool|[a-z]+)(\d*)(?:x(\d+))?")
# The float8 formats by ml_dtypes' names (numpy holds them as ml_dtypes arrays), DLPack 1.1 codes.
_FLOAT8 = {"float8_e4m3fn": lib.kDLFloat8_e4m3fn, "float8_e4m3fnuz": lib.kDLFloat8_e4m3fnuz,
           "float8_e5m2": lib.kDLFloat8_e5m2, "float8_e5m2fnuz": lib.kDLFloat8_e5m2fnuz,
           "float8_e8m0fnu": lib.kDLFloat8_e8m0fnu}
_FLOAT8_OF_CODE = {code: name for name, code in _FLOAT8.items()}
NARROW_FLOATS = ("bfloat16",) + tuple(_FLOAT8)   # float4_e2m1fn is packed (kiln.subbyte)


@functools.lru_cache(maxsize=256)
def parse_dtype(dtype):
    """(code, bits, lanes) of a dtype string, numpy dtype or numpy scalar type."""
    if not isinstance(dtype, str):
        import numpy as np

        dtype = np.dtype(dtype).name
    if dtype in _FLOAT8:
        return _FLOAT8[dtype], 8, 1
    if dtype == "float4_e2m1fn":
        return lib.kDLFloat4_e2m1fn, 4, 1
    m = _DTYPE.fullmatch(dtype)
    prefix, bits, lanes = m.groups() if m else (None, None, None)
    bits = int(bits or (8 if prefix == "bool" else 0))
    if prefix not in _BITS or bits not in _BITS[prefix] or lanes == "0" or (bits < 8 and lanes):
        raise ValueError(f"unsupported dtype {dtype!r}")
    return _CODE_OF_PREFIX[prefix], bits, int(lanes or 1)


def dtype_name(dl_dtype):
    """The dtype string of a DLDataType."""
    code, bits, lanes = dl_dtype.code, dl_dtype.bits, dl_dtype.lanes
    if code == lib.kDLBool and bits == 8:
        name = "bool"
    elif code in _PREFIX_OF_CODE:
        name = f"{_PREFIX_OF_CODE[code]}{bits}"
    elif code in _FLOAT8_OF_CODE and bits == 8:
        name = _FLOAT8_OF_CODE[code]
    elif code == lib.KILN_STR_DTYPE_CODE and bits == lib.KILN_STR_DTYPE_BITS:
        name = "string"   # a string tensor (docs/strings.md)
    elif code == lib.kDLFloat4_e2m1fn and bits == 4:
        name = "float4_e2m1fn"
    else:
        name = f"dtype(code={code}, bits={bits})"
    return name if lanes == 1 else f"{name}x{lanes}"
