"""External functions: Python callables registered by name in the runtime's registry, for
executables to call (``call_dps_packed("env.relu", ...)``).

    @kiln.register_func("env.relu", override=True)
    def relu(x, out):                      # kiln NDArrays, zero-copy; destination-passing style
        np.maximum(np.from_dlpack(x), 0, out=np.from_dlpack(out))

A registered callable becomes a runtime function (``kiln_function_create`` with a cffi
callback) held by the C registry; the callable stays alive as long as that function does (while
registered, and while any initialised VM that looked it up is alive). Arguments arrive as kiln
values converted to Python (tensors as NDArrays sharing memory, tuples as tuples); the return
value is converted back (None for destination-passing functions). An exception raised by the
callable becomes a runtime error whose message is ``"<name>: <ExceptionType>: <message>"``.
"""

import threading

from ._base import KilnError, check, ffi, lib
from .module import Function, from_borrowed, to_value

# ctx address -> the cffi handle of (name, callable): what keeps the callable alive. An entry
# goes when the C function holding it is destroyed (kiln_py_callback_delete).
_live = {}
_live_lock = threading.Lock()


@ffi.def_extern(error=lib.KILN_ERR_RUNTIME)
def kiln_py_callback(ctx, args, num_args, out_result):
    name, func = ffi.from_handle(ctx)
    try:
        result = func(*[from_borrowed(args + i) for i in range(num_args)])
        if result is not None:
            keep = []
            value = ffi.new("kiln_value_t*")
            to_value(result, value[0], keep, lambda: f"{name}: the result")
            check(lib.kiln_value_copy(value, out_result))  # owned, outlives `keep`
        return lib.KILN_OK
    except BaseException as e:  # nothing may propagate into C
        status = e.status if isinstance(e, KilnError) else lib.KILN_ERR_RUNTIME
        message = f"{name}: {type(e).__name__}: {e}"
        return lib.kiln_set_last_error(status, message.encode("utf-8", "replace"))


@ffi.def_extern()
def kiln_py_callback_delete(ctx):
    try:
        with _live_lock:
            _live.pop(int(ffi.cast("uintptr_t", ctx)), None)
    except BaseException:  # pragma: no cover - only at interpreter shutdown, module state gone
        pass


def make_function(name, func):
    """A runtime Function (``kiln.Function``) that calls the Python callable ``func``."""
    if not callable(func):
        raise TypeError(f"{name!r}: expected a callable, got {type(func).__name__}")
    handle = ffi.new_handle((name, func))
    key = int(ffi.cast("uintptr_t", handle))
    with _live_lock:
        _live[key] = handle
    out = ffi.new("kiln_function_t**")
    status = lib.kiln_function_create(name.encode(), lib.kiln_py_callback, handle,
                                      lib.kiln_py_callback_delete, out)
    if status != lib.KILN_OK:
        with _live_lock:
            _live.pop(key, None)
        check(status)
    return Function(out[0])


def register_func(name, f=None, override=False):
    """Registers ``f`` as the external function ``name`` (e.g. ``"env.relu"``); without ``f``,
    returns a decorator that does. A name already registered is a KilnError unless
    ``override``. ``f`` may also be a ``kiln.Function``. Returns ``f``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_func: the name must be a non-empty string, got {name!r}")
    if f is None:
        def decorator(func):
            register_func(name, func, override)
            return func
        return decorator
    fn = f if isinstance(f, Function) else make_function(name, f)
    check(lib.kiln_register_function(name.encode(), fn._handle, 1 if override else 0))
    return f


def get_func(name):
    """The registered function ``name`` as a ``kiln.Function``; KilnError if there is none."""
    out = ffi.new("kiln_function_t**")
    check(lib.kiln_get_registered_function(name.encode(), out))
    return Function(out[0])


def unregister_func(name):
    """Removes the registered function ``name``; KilnError if there is none. VMs initialised
    before keep the function they looked up."""
    check(lib.kiln_unregister_function(name.encode()))


__all__ = ["get_func", "make_function", "register_func", "unregister_func"]
