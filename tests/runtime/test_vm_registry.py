"""The external-function registry from Python: kiln.register_func (plain and as a decorator),
override rules, lookup, removal, argument and result conversion, exceptions as errors."""

import gc

import numpy as np
import pytest

import kiln
from kiln.runtime import KilnError, get_func, nd, register_func, unregister_func
from kiln.runtime import registry
from kiln.runtime._base import lib


@pytest.fixture
def name(request):
    """A fresh registry name, removed after the test."""
    n = f"test.registry.{request.node.name}"
    yield n
    try:
        unregister_func(n)
    except KilnError:
        pass


def test_decorator_registers_and_returns_the_function(name):
    @kiln.register_func(name)
    def add(a, b):
        return a + b

    assert add(1, 2) == 3  # still the plain Python function
    assert get_func(name)(1, 2) == 3
    assert get_func(name).name == name


def test_arguments_are_zero_copy_ndarrays(name):
    seen = []

    def relu(x, out):
        seen.append((type(x), np.from_dlpack(x).ctypes.data))
        np.maximum(np.from_dlpack(x), 0, out=np.from_dlpack(out))

    register_func(name, relu)
    x = np.array([-1.0, 2.0, -3.0], "float32")
    out = nd.empty((3,), "float32")
    assert get_func(name)(x, out) is None
    np.testing.assert_array_equal(out.numpy(), [0, 2, 0])
    assert seen == [(kiln.NDArray, x.ctypes.data)]


def test_results_are_converted(name):
    register_func(name, lambda: (1, 2.5, "three", np.arange(2.0), None, kiln.cpu()))
    i, f, s, arr, none, dev = get_func(name)()
    assert (i, f, s, none, dev) == (1, 2.5, "three", None, kiln.cpu())
    np.testing.assert_array_equal(arr.numpy(), [0.0, 1.0])


def test_duplicate_name_needs_override(name):
    register_func(name, lambda: 1)
    with pytest.raises(KilnError) as info:
        register_func(name, lambda: 2)
    assert str(info.value) == (f"external function '{name}' is already registered (pass override to "
                               "replace it)")
    assert info.value.status == lib.KILN_ERR_INVALID_ARGUMENT
    assert get_func(name)() == 1
    register_func(name, lambda: 2, override=True)
    assert get_func(name)() == 2


def test_unregister_and_missing(name):
    register_func(name, lambda: 1)
    unregister_func(name)
    for call in (lambda: get_func(name), lambda: unregister_func(name)):
        with pytest.raises(KilnError) as info:
            call()
        assert str(info.value) == f"no external function '{name}' is registered"
        assert info.value.status == lib.KILN_ERR_NOT_FOUND


def test_exception_message_and_status(name):
    def fails(x):
        raise ZeroDivisionError("no way")

    register_func(name, fails)
    with pytest.raises(KilnError) as info:
        get_func(name)(1)
    assert str(info.value) == f"{name}: ZeroDivisionError: no way"
    assert info.value.status == lib.KILN_ERR_RUNTIME

    def unconvertible():
        return object()

    register_func(name, unconvertible, override=True)
    with pytest.raises(KilnError, match=f"{name}: TypeError: {name}: the result has unsupported type object"):
        get_func(name)()

    def nested_error():
        return kiln.nd.from_dlpack(object())

    register_func(name, nested_error, override=True)
    with pytest.raises(KilnError, match="TypeError: from_dlpack"):
        get_func(name)()


def test_callable_lives_while_registered(name):
    class Counter:
        calls = 0

        def __call__(self):
            Counter.calls += 1

    register_func(name, Counter())
    gc.collect()
    get_func(name)()
    assert Counter.calls == 1
    before = len(registry._live)
    unregister_func(name)
    gc.collect()
    assert len(registry._live) == before - 1  # released with the runtime function


def test_bad_registrations():
    with pytest.raises(TypeError, match="expected a callable"):
        register_func("test.registry.bad", 42)
    with pytest.raises(TypeError, match="non-empty string"):
        register_func("", lambda: 0)
