"""Modules and functions: loading kernel libraries and calling their functions."""

import os
import sys

from ._base import NARROW_FLOATS, KilnError, check, ffi, lib
from .device import Device
from .. import subbyte
from .ndarray import NDArray, array, from_dlpack


class Function:
    """A callable runtime function. ``f(*args)`` converts each argument to a runtime value
    (None, int, float, str, NDArray, Module, Function, Device, tuple; numpy arrays and
    other DLPack producers are shared without copying) and returns the result converted back
    (None, int, float, str, NDArray, Module, Function, Device, tuple). Runtime errors raise
    KilnError."""

    __slots__ = ("_handle", "__weakref__")

    def __init__(self, handle):
        """Takes over one reference to a ``kiln_function_t*``."""
        self._handle = ffi.gc(handle, lib.kiln_function_release)

    @property
    def name(self):
        return ffi.string(lib.kiln_function_name(self._handle)).decode()

    def __call__(self, *args):
        n = len(args)
        values = ffi.new("kiln_value_t[]", n)
        keep = []  # what the values point into (strings, wrapped arrays), alive for the call
        for i, arg in enumerate(args):
            to_value(arg, values[i], keep, lambda: f"{self.name}: argument {i}")
        result = ffi.new("kiln_value_t*")
        check(lib.kiln_function_call(self._handle, values, n, result))
        return from_value(result)

    def __repr__(self):
        return f"kiln.Function({self.name!r})"


class Module:
    """A runtime module: named functions. ``mod["name"]`` is a Function; ``mod(*args)`` calls
    its function "main" (or its only function)."""

    __slots__ = ("_handle", "_functions", "_entry", "__weakref__")

    def __init__(self, handle):
        """Takes over one reference to a ``kiln_module_t*``."""
        self._handle = ffi.gc(handle, lib.kiln_module_release)
        self._functions = {}
        self._entry = None

    @property
    def kind(self):
        return ffi.string(lib.kiln_module_kind(self._handle)).decode()

    @property
    def function_names(self):
        h = self._handle
        return [ffi.string(lib.kiln_module_function_name(h, i)).decode()
                for i in range(lib.kiln_module_num_functions(h))]

    def __getitem__(self, name):
        fn = self._functions.get(name)
        if fn is None:
            if not isinstance(name, str):
                raise TypeError(f"function names are strings, not {type(name).__name__}")
            out = ffi.new("kiln_function_t**")
            check(lib.kiln_module_get_function(self._handle, name.encode(), out))
            fn = self._functions[name] = Function(out[0])
        return fn

    def __contains__(self, name):
        return name in self.function_names

    def __call__(self, *args):
        if self._entry is None:
            names = self.function_names
            if "main" not in names and len(names) != 1:
                raise KilnError(
                    f"{self.kind} module has no function 'main' and {len(names)} functions "
                    f"({', '.join(names)}); call one by name, e.g. mod[{names[0]!r}](...)"
                    if names else f"{self.kind} module has no functions",
                    lib.KILN_ERR_NOT_FOUND)
            self._entry = self["main" if "main" in names else names[0]]
        return self._entry(*args)

    def __repr__(self):
        return f"kiln.Module({self.kind}: {', '.join(self.function_names)})"


def load_module(path):
    """Loads a kernel library built by Kiln (a shared object) as a Module."""
    out = ffi.new("kiln_module_t**")
    check(lib.kiln_module_load_library(os.fsencode(os.fspath(path)), out))
    return Module(out[0])


def to_value(arg, value, keep, where):
    """Fills ``value`` (a ``kiln_value_t``) from a Python object, borrowing: what it points into
    (strings, wrapped arrays, tuples) is appended to ``keep``, which must outlive its use.
    ``where()`` names the argument in a TypeError."""
    if isinstance(arg, NDArray):
        value.kind = lib.KILN_VALUE_TENSOR
        value.u.tensor = arg._handle
    elif arg is None:
        value.kind = lib.KILN_VALUE_NULL
    elif isinstance(arg, int) or _is_numpy_scalar(arg, "integer") or _is_numpy_scalar(arg, "bool_"):
        value.kind = lib.KILN_VALUE_INT
        value.u.i = int(arg)
    elif isinstance(arg, float) or _is_numpy_scalar(arg, "floating"):
        value.kind = lib.KILN_VALUE_FLOAT
        value.u.f = float(arg)
    elif isinstance(arg, str):
        s = ffi.new("char[]", arg.encode())
        keep.append(s)
        value.kind = lib.KILN_VALUE_STRING
        value.u.s = s
    elif isinstance(arg, Module):
        value.kind = lib.KILN_VALUE_MODULE
        value.u.module = arg._handle
    elif isinstance(arg, Function):
        value.kind = lib.KILN_VALUE_FUNCTION
        value.u.function = arg._handle
    elif isinstance(arg, Device):
        value.kind = lib.KILN_VALUE_DEVICE
        value.u.device.device_type = arg.device_type
        value.u.device.device_id = arg.device_id
    elif isinstance(arg, tuple):
        items = ffi.new("kiln_value_t[]", len(arg))
        inner = []
        for j, item in enumerate(arg):
            to_value(item, items[j], inner, lambda: f"{where()} item {j}")
        out = ffi.new("kiln_tuple_t**")
        check(lib.kiln_tuple_create(items, len(arg), out))  # owns copies: `inner` may go
        tup = ffi.gc(out[0], lib.kiln_tuple_release)
        keep.append(tup)
        value.kind = lib.KILN_VALUE_TUPLE
        value.u.tuple = tup
    elif _is_string_numpy(arg):   # numpy str/object arrays: a string tensor (docs/strings.md)
        from .strings import tensor_from_numpy
        tensor = tensor_from_numpy(arg)
        keep.append(tensor)
        value.kind = lib.KILN_VALUE_TENSOR
        value.u.tensor = tensor._handle
    elif _is_subbyte_numpy(arg):   # numpy cannot export these through DLPack: packed in a copy
        tensor = array(arg)
        keep.append(tensor)
        value.kind = lib.KILN_VALUE_TENSOR
        value.u.tensor = tensor._handle
    elif _is_narrow_float_numpy(arg):   # copied into a runtime array of the right DLPack code
        tensor = array(arg)
        keep.append(tensor)
        value.kind = lib.KILN_VALUE_TENSOR
        value.u.tensor = tensor._handle
    elif hasattr(arg, "__dlpack__"):
        tensor = from_dlpack(arg)
        keep.append(tensor)
        value.kind = lib.KILN_VALUE_TENSOR
        value.u.tensor = tensor._handle
    else:
        raise TypeError(f"{where()} has unsupported type {type(arg).__name__}")


def _is_string_numpy(arg):
    """Whether ``arg`` is a numpy array of ``str`` (dtype ``U`` or ``object``)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(arg, np.ndarray) and arg.dtype.kind in "UO"


def _is_narrow_float_numpy(arg):
    """Whether ``arg`` is a numpy array of ml_dtypes' bfloat16 or a float8 (numpy's DLPack
    export refuses them)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(arg, np.ndarray) and arg.dtype.name in NARROW_FLOATS


def _is_subbyte_numpy(arg):
    """Whether ``arg`` is a numpy array of ml_dtypes' int4/uint4/int2/uint2."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(arg, np.ndarray) and subbyte.is_subbyte(arg.dtype)


def _is_numpy_scalar(arg, kind):
    np = sys.modules.get("numpy")  # no numpy imported means no numpy scalars to convert
    return np is not None and isinstance(arg, getattr(np, kind))


def from_value(value):
    """Converts an owned value (a ``kiln_value_t*``), taking over its reference."""
    kind = value.kind
    if kind == lib.KILN_VALUE_NULL:
        return None
    if kind == lib.KILN_VALUE_INT:
        return value.u.i
    if kind == lib.KILN_VALUE_FLOAT:
        return value.u.f
    if kind == lib.KILN_VALUE_STRING:
        s = ffi.string(value.u.s).decode()
        lib.kiln_value_release(value)
        return s
    if kind == lib.KILN_VALUE_TENSOR:
        return NDArray(value.u.tensor)
    if kind == lib.KILN_VALUE_MODULE:
        return Module(value.u.module)
    if kind == lib.KILN_VALUE_FUNCTION:
        return Function(value.u.function)
    if kind == lib.KILN_VALUE_DEVICE:
        return Device(value.u.device.device_type, value.u.device.device_id)
    if kind == lib.KILN_VALUE_TUPLE:
        tup = value.u.tuple
        try:
            item = ffi.new("kiln_value_t*")
            items = []
            for i in range(lib.kiln_tuple_size(tup)):
                check(lib.kiln_tuple_get_item(tup, i, item))
                items.append(from_value(item))
            return tuple(items)
        finally:
            lib.kiln_value_release(value)
    lib.kiln_value_release(value)
    raise KilnError(f"unknown value kind {kind} returned by the runtime", lib.KILN_ERR_INTERNAL)


def from_borrowed(value):
    """Converts a borrowed value (a ``kiln_value_t*``): the result holds its own references."""
    owned = ffi.new("kiln_value_t*")
    check(lib.kiln_value_copy(value, owned))
    return from_value(owned)


# The earlier private names (tests use them).
_from_value = from_value


def _to_value(arg, value, keep, fn, index):
    to_value(arg, value, keep, lambda: f"{fn.name}: argument {index}")
