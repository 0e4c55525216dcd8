"""Loading a kernel library and calling its kernels through kiln.runtime: results, the argument
checks and their messages, and the thread pool."""

import numpy as np
import pytest

from kiln import runtime
from kiln.runtime import KilnError, nd
from kiln.runtime._base import lib


@pytest.fixture(scope="module")
def mod(lib_path):
    return runtime.load_module(lib_path)


def test_add_one_matches_numpy(mod):
    a = nd.array(np.arange(8, dtype="float32"))
    b = nd.empty((8,), "float32")
    assert mod(a, b) is None  # a module with "main" is callable
    np.testing.assert_array_equal(b.numpy(), np.arange(8, dtype="float32") + 1)
    mod["main"](b, a)
    np.testing.assert_array_equal(a.numpy(), np.arange(8, dtype="float32") + 2)


def test_numpy_arguments_are_shared_not_copied(mod):
    a = np.random.default_rng(0).random(8, dtype="float32")
    out = np.zeros(8, dtype="float32")
    mod["main"](a, out)  # writes into the numpy array itself
    np.testing.assert_array_equal(out, a + 1)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 100003])
def test_symbolic_parallel_kernel(mod, n):
    x = np.random.default_rng(n).random(n, dtype="float32")
    y = nd.empty((n,), "float32")
    mod["scale"](nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), 2 * x)


def test_two_symbolic_dimensions(mod):
    a = np.random.default_rng(1).random((5, 3))
    out = np.empty(5)
    mod["rowsum"](a, out)
    np.testing.assert_allclose(out, a.sum(axis=1))


def test_module_introspection(mod, lib_path):
    assert mod.kind == "library"
    assert mod.function_names == ["main", "scale", "rowsum", "threads", "fail"]
    assert "scale" in mod and "nope" not in mod
    assert mod["scale"] is mod["scale"]  # looked up once
    assert mod["scale"].name == "scale"


def _error(fn, *args):
    with pytest.raises(KilnError) as info:
        fn(*args)
    return info.value


def test_argument_errors_name_kernel_argument_expected_and_given(mod):
    a, b = nd.empty((8,), "float32"), nd.empty((8,), "float32")
    main = mod["main"]
    cases = [
        ((a,), lib.KILN_ERR_INVALID_ARGUMENT, "main: expected 2 arguments, got 1"),
        ((a, b, b), lib.KILN_ERR_INVALID_ARGUMENT, "main: expected 2 arguments, got 3"),
        ((1, b), lib.KILN_ERR_INVALID_ARGUMENT, "main: argument 0 'A' expected a tensor, got int"),
        ((a, "x"), lib.KILN_ERR_INVALID_ARGUMENT,
         "main: argument 1 'B' expected a tensor, got string"),
        ((nd.empty((8,), "int32"), b), lib.KILN_ERR_DTYPE_MISMATCH,
         "main: argument 0 'A' expected dtype float32, got int32"),
        ((a, nd.empty((9,), "float32")), lib.KILN_ERR_SHAPE_MISMATCH,
         "main: argument 1 'B' expected shape (8,), got (9,)"),
        ((nd.empty((2, 4), "float32"), b), lib.KILN_ERR_SHAPE_MISMATCH,  # wrong ndim
         "main: argument 0 'A' expected shape (8,), got (2, 4)"),
        ((np.zeros(16, "float32")[::2], b), lib.KILN_ERR_INVALID_ARGUMENT,
         "main: argument 0 'A' is not contiguous (shape (8,), strides (2,))"),
    ]
    for args, status, message in cases:
        e = _error(main, *args)
        assert str(e) == message
        assert e.status == status


def test_symbolic_dimension_mismatch(mod):
    e = _error(mod["scale"], nd.empty((10,), "float32"), nd.empty((11,), "float32"))
    assert str(e) == ("scale: argument 1 'B' expected shape (n,) with n = 10 "
                      "(from argument 0 'A'), got (11,)")
    assert e.status == lib.KILN_ERR_SHAPE_MISMATCH and e.status_name == "shape mismatch"
    e = _error(mod["rowsum"], np.zeros((3, 4)), np.zeros(4))
    assert str(e) == ("rowsum: argument 1 'B' expected shape (m,) with m = 3 "
                      "(from argument 0 'A'), got (4,)")


def test_size_one_dimensions_with_any_stride_are_contiguous(mod):
    a = np.arange(48.0).reshape(16, 3)[::16]  # shape (1, 3), strides (384, 8): row stride unused
    assert a.strides == (384, 8)
    out = np.zeros(1)
    mod["rowsum"](a, out)
    assert out[0] == 3.0


def test_kernel_failure_is_reported(mod):
    e = _error(mod["fail"], np.array([7], "int32"))
    assert str(e) == "fail: kernel returned error code 7"
    assert e.status == lib.KILN_ERR_RUNTIME
    mod["fail"](np.array([0], "int32"))  # a task returning 0 is success


def test_unsupported_python_argument(mod):
    with pytest.raises(TypeError, match="main: argument 0 has unsupported type list"):
        mod["main"]([1.0] * 8, nd.empty((8,), "float32"))


def test_unknown_function_lists_the_available_ones(mod, lib_path):
    e = _error(mod.__getitem__, "nope")
    assert str(e) == (f"library module '{lib_path}' has no function 'nope'; "
                      "its functions: main, scale, rowsum, threads, fail")
    assert e.status == lib.KILN_ERR_NOT_FOUND


def test_module_call_picks_main_or_the_only_function(kernel_libs):
    single = runtime.load_module(kernel_libs["single"])
    x, y = np.arange(4, dtype="float32"), np.zeros(4, "float32")
    single(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    e = _error(runtime.load_module(kernel_libs["no_main"]), x, y)
    assert "has no function 'main' and 4 functions (scale, rowsum, threads, fail)" in str(e)


def test_load_errors(kernel_libs, tmp_path):
    e = _error(runtime.load_module, tmp_path / "missing.so")
    assert str(e).startswith(f"cannot load library '{tmp_path / 'missing.so'}': ")
    assert e.status == lib.KILN_ERR_IO
    e = _error(runtime.load_module, kernel_libs["no_info"])
    assert str(e) == (f"'{kernel_libs['no_info']}' is not a kiln kernel library: "
                      "it has no 'kiln_library_info' symbol")
    assert e.status == lib.KILN_ERR_INVALID_FORMAT
    e = _error(runtime.load_module, kernel_libs["bad_abi"])
    assert str(e) == (f"kernel library '{kernel_libs['bad_abi']}' has kernel ABI version 99, "
                      "this runtime supports 3")
    assert e.status == lib.KILN_ERR_VERSION_MISMATCH
    e = _error(runtime.load_module, kernel_libs["bad_dtype"])
    assert str(e) == (f"kernel library '{kernel_libs['bad_dtype']}': kernel 0 'main': "
                      "parameter 1 'B' has unsupported dtype float8_e3m4")
    not_a_library = tmp_path / "text.so"
    not_a_library.write_text("hello")
    e = _error(runtime.load_module, not_a_library)
    assert e.status == lib.KILN_ERR_INVALID_FORMAT and "too short for an ELF header" in str(e)
    # A truncated library would crash dlopen (SIGBUS on segments past the end): refused first.
    data = open(kernel_libs["fixture"], "rb").read()
    for cut in (100, len(data) // 2, len(data) - 1):
        truncated = tmp_path / f"truncated_{cut}.so"
        truncated.write_bytes(data[:cut])
        e = _error(runtime.load_module, truncated)
        assert e.status == lib.KILN_ERR_INVALID_FORMAT and "(truncated?)" in str(e), str(e)


def test_relative_path_is_relative_to_working_directory(lib_path, monkeypatch):
    monkeypatch.chdir(lib_path.parent)
    assert runtime.load_module(lib_path.name).function_names[0] == "main"


@pytest.fixture
def threads():
    saved = runtime.get_num_threads()
    yield
    runtime.set_num_threads(saved)


def _probe(mod, num_tasks, wait):
    t = np.array([num_tasks, wait, 0, 0], dtype="int64")
    mod["threads"](t)
    return {"distinct": t[0], "ctx_threads": t[1], "nested_serial": t[2]}


def test_parallel_launch_uses_two_threads(mod, threads):
    runtime.set_num_threads(2)
    assert runtime.get_num_threads() == 2
    # Both tasks wait until both are running: only a pool of 2 finishes this quickly.
    assert _probe(mod, 2, 1) == {"distinct": 2, "ctx_threads": 2, "nested_serial": 1}


def test_single_thread_runs_serially(mod, threads):
    runtime.set_num_threads(1)
    assert _probe(mod, 8, 0) == {"distinct": 1, "ctx_threads": 1, "nested_serial": 1}


def test_default_thread_count_is_core_count(threads):
    import os

    runtime.set_num_threads(0)
    assert runtime.get_num_threads() == os.cpu_count()
    with pytest.raises(KilnError, match="negative"):
        runtime.set_num_threads(-2)


def test_concurrent_callers_from_python_threads(mod, threads):
    from concurrent.futures import ThreadPoolExecutor

    runtime.set_num_threads(2)
    x = np.random.default_rng(2).random(10001, dtype="float32")

    def work(_):
        y = np.empty_like(x)
        for _ in range(20):
            mod["scale"](x, y)
        return np.array_equal(y, 2 * x)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))


def test_pool_survives_fork(mod, threads):
    import os
    import time

    runtime.set_num_threads(2)
    assert _probe(mod, 2, 1)["distinct"] == 2  # the parent's workers are running
    pid = os.fork()
    if pid == 0:  # child: only this thread was copied; the pool must start afresh, not hang
        ok = _probe(mod, 2, 1)["distinct"] == 2
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung in the thread pool")
    assert _probe(mod, 2, 1)["distinct"] == 2  # and the parent's pool still works


def test_overlapping_arguments_are_refused(mod):
    # Kernels treat arguments as distinct memory; an output that aliases another argument must be
    # an error, not a wrong answer.
    a = np.arange(16, dtype="float32")
    with pytest.raises(KilnError, match=r"main: arguments 0 'A' and 1 'B' share memory, and the "
                                        r"kernel writes one of them"):
        mod["main"](a[:8], a[4:12])
    mod["main"](a[:8], a[8:])  # adjacent, not overlapping: fine
    np.testing.assert_array_equal(a[8:], np.arange(8, dtype="float32") + 1)
