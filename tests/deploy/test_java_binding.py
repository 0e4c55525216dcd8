"""The Java binding (bindings/java, package ai.kiln) on the shared MLP artifact.

Builds kiln.jar and libkiln_jni.so once per session with `make -C bindings/java`, runs
examples/java/RunModel.java as a plain `java` program, and drives the same classes from pytest
through jpype. jpype can start only one JVM per process, so every jpype test lives in this module
and shares the session-scoped `jvm` fixture.
"""
from __future__ import annotations

import concurrent.futures
import os
import pathlib
import subprocess

import numpy as np
import pytest

# KilnException status codes (kiln_runtime.h).
SHAPE_MISMATCH, DTYPE_MISMATCH, NOT_FOUND, IO, INVALID_FORMAT = 0x11, 0x12, 0x20, 0x30, 0x31


def _deterministic(k, shape):
    """RunModel.java's data: element i of input k is ((i * 7 + k * 13) % 17 - 8) / 64."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    return ((((i * 7 + k * 13) % 17) - 8) / 64).astype(np.float32).reshape(shape)


def _mlp_numpy(x, w1, b1, w2, b2):
    return np.maximum(x @ w1.T + b1, 0) @ w2.T + b2


# ---- the example, as a plain java program ------------------------------------------------------

def test_run_model_example(java_build, mlp_artifact):
    cp = os.pathsep.join([str(java_build["jar"]), str(java_build["examples"])])
    proc = subprocess.run(
        [str(java_build["java"]), "-Xcheck:jni", "-cp", cp,
         f"-Djava.library.path={java_build['lib_dir']}", "RunModel", str(mlp_artifact.so_path)],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr  # -Xcheck:jni found no JNI misuse
    header, values = proc.stdout.strip().splitlines()[-2:]
    assert header == "output float32 [1, 10]"
    got = np.array([float(v) for v in values.split()], dtype=np.float32).reshape(1, 10)

    args = [_deterministic(k, s) for k, s in enumerate(mlp_artifact.arg_shapes)]
    np.testing.assert_allclose(got, _mlp_numpy(*args), rtol=1e-4, atol=1e-4)

    import kiln  # the Python VM on the same file gives the same answer
    vm = kiln.VirtualMachine(kiln.load_module(str(mlp_artifact.so_path)), kiln.cpu())
    ref = vm["forward"](*[kiln.nd.array(a) for a in args]).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


# ---- jpype -------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def jvm(java_build):
    jpype = pytest.importorskip("jpype", reason="jpype1 (the test extra) is not installed")
    if not jpype.isJVMStarted():
        libjvm = java_build["home"] / "lib" / "server" / "libjvm.so"
        jpype.startJVM(str(libjvm) if libjvm.exists() else jpype.getDefaultJVMPath(),
                       f"-Djava.library.path={java_build['lib_dir']}",
                       f"-Dkiln.jni.library={java_build['lib']}",
                       classpath=[str(java_build["jar"])], convertStrings=True)
    else:
        # jpype starts one JVM per process; one started by other code without kiln.jar on its
        # class path cannot load it (a fact about this process, not about the jar): skip.
        class_path = str(jpype.JClass("java.lang.System").getProperty("java.class.path"))
        if str(java_build["jar"]) not in class_path.split(os.pathsep):
            pytest.skip(f"a JVM was already started in this process without {java_build['jar']} "
                        f"on its class path ({class_path!r})")
    # kiln.jar is on the class path of this JVM: a class that does not load is a broken jar and
    # fails every test that uses it (no skip).
    jpype.JClass("ai.kiln.KilnModule")

    class K:
        KilnModule = jpype.JClass("ai.kiln.KilnModule")
        Module = jpype.JClass("ai.kiln.Kiln$Module")      # KilnModule's old name, nested
        NDArray = jpype.JClass("ai.kiln.NDArray")
        Device = jpype.JClass("ai.kiln.Device")
        Value = jpype.JClass("ai.kiln.Value")
        KilnException = jpype.JClass("ai.kiln.KilnException")
        IllegalStateException = jpype.JClass("java.lang.IllegalStateException")
        IllegalArgumentException = jpype.JClass("java.lang.IllegalArgumentException")
        ClassCastException = jpype.JClass("java.lang.ClassCastException")

        @staticmethod
        def nd(a):
            a = np.ascontiguousarray(a)
            shape = jpype.JArray(jpype.JLong)(list(a.shape))
            if a.dtype == np.float32:
                return K.NDArray.fromFloatArray(jpype.JArray(jpype.JFloat)(a.ravel()), shape)
            if a.dtype == np.int32:
                return K.NDArray.fromIntArray(jpype.JArray(jpype.JInt)(a.ravel()), shape)
            if a.dtype == np.int64:
                return K.NDArray.fromLongArray(jpype.JArray(jpype.JLong)(a.ravel()), shape)
            raise TypeError(a.dtype)

        @staticmethod
        def np(nd):
            shape = tuple(int(d) for d in nd.shape())
            return np.array(nd.toFloatArray(), dtype=np.float32).reshape(shape)

    return K


@pytest.fixture(scope="module")
def mlp(jvm, mlp_artifact):
    """(library module, initialised VM module, argument NDArrays, numpy args, expected)."""
    K = jvm
    lib = K.KilnModule.load(str(mlp_artifact.so_path))
    vm = lib.getFunction("load_executable").invoke().asModule()
    assert vm.getFunction("init").pushArg(K.Device.cpu()).invoke().isNull()
    args_np = [np.load(p) for p in [mlp_artifact.input_npy, *mlp_artifact.param_npys]]
    args = [K.nd(a) for a in args_np]
    yield lib, vm, args, args_np, mlp_artifact.expected()
    for a in args:
        a.close()
    vm.close()
    lib.close()


def _forward(vm, args):
    f = vm.getFunction("forward")
    for a in args:
        f.pushArg(a)
    return f.invoke().asNDArray()


def test_forward_matches_numpy(jvm, mlp):
    lib, vm, args, args_np, expected = mlp
    assert str(lib.kind()) == "library" and str(vm.kind()) == "vm"
    assert "forward" in list(vm.functionNames())
    with _forward(vm, args) as out:
        assert str(out.dtype()) == "float32" and list(out.shape()) == list(expected.shape)
        got = jvm.np(out)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, _mlp_numpy(*args_np), rtol=1e-4, atol=1e-4)


def test_api_md_block(jvm, mlp_artifact):
    """API.md section 5 as written (the VM module is left to the Cleaner)."""
    K = jvm
    args_np = [np.load(p) for p in [mlp_artifact.input_npy, *mlp_artifact.param_npys]]
    x, w1, b1, w2, b2 = [K.nd(a) for a in args_np]
    with K.Module.load(str(mlp_artifact.so_path)) as lib:        # Module: as API.md writes it
        vm = lib.getFunction("load_executable").invoke().asModule()
        vm.getFunction("init").pushArg(K.Device.cpu()).invoke()
        out = (vm.getFunction("forward").pushArg(x).pushArg(w1).pushArg(b1).pushArg(w2)
               .pushArg(b2).invoke().asNDArray())
    # the VM and the output outlive the closed library handle (the runtime keeps it alive)
    np.testing.assert_allclose(jvm.np(out), mlp_artifact.expected(), rtol=1e-5, atol=1e-5)
    out.close()
    vm.close()


def test_module_is_the_old_name_of_kiln_module(jvm, mlp_artifact):
    """Every module is a Kiln.Module (the old name: ``import ai.kiln.Kiln.Module;``, which
    ``import ai.kiln.*`` does not bring, so no clash with java.lang.Module) and a KilnModule."""
    K = jvm
    with K.KilnModule.load(str(mlp_artifact.so_path)) as lib:
        vm = lib.getFunction("load_executable").invoke().asModule()
        assert isinstance(lib, K.Module) and isinstance(vm, K.Module) and isinstance(vm, K.KilnModule)
        vm.close()


def test_call_from_several_threads(jvm, mlp):
    _, vm, args, _, expected = mlp

    def work(_):
        results = []
        for _ in range(10):
            with _forward(vm, args) as out:  # each call: its own Function object
                results.append(jvm.np(out))
        return results

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for results in pool.map(work, range(4)):
            for r in results:
                np.testing.assert_allclose(r, expected, rtol=1e-5, atol=1e-5)


def test_errors_become_kiln_exception(jvm, mlp, tmp_path):
    K = jvm
    lib, vm, args, args_np, _ = mlp
    forward = vm.getFunction("forward")

    with K.nd(np.zeros((1, 785), np.float32)) as bad:  # wrong shape
        with pytest.raises(K.KilnException) as e:
            forward.pushArg(bad).pushArg(args[1]).pushArg(args[2]).pushArg(args[3]) \
                .pushArg(args[4]).invoke()
    assert e.value.getStatus() == SHAPE_MISMATCH
    assert "expected shape (1, 784), got (1, 785)" in str(e.value.getMessage())
    assert forward.numArgs() == 0  # cleared even though the call failed

    with K.nd(np.zeros((1, 784), np.int32)) as bad:  # wrong dtype
        with pytest.raises(K.KilnException) as e:
            forward.call(bad, *args[1:])
    assert e.value.getStatus() == DTYPE_MISMATCH
    assert "expected dtype float32, got int32" in str(e.value.getMessage())

    with pytest.raises(K.KilnException) as e:  # wrong number of arguments
        forward.call(args[0])
    assert "forward" in str(e.value.getMessage())

    with pytest.raises(K.KilnException) as e:  # unknown function
        vm.getFunction("backward")
    assert e.value.getStatus() == NOT_FOUND
    assert "backward" in str(e.value.getMessage())
    assert "shape mismatch" not in str(e.value.getStatusName())

    corrupt = tmp_path / "corrupt.so"  # an ELF magic followed by garbage
    corrupt.write_bytes(b"\x7fELF" + b"\0" * 60 + b"garbage" * 100)
    with pytest.raises(K.KilnException) as e:
        K.KilnModule.load(str(corrupt))
    assert e.value.getStatus() in (IO, INVALID_FORMAT)
    assert str(e.value.getMessage())

    with pytest.raises(K.KilnException) as e:  # missing file
        K.KilnModule.load(str(tmp_path / "missing.so"))
    assert e.value.getStatus() == IO
    assert "missing.so" in str(e.value.getMessage())


def test_truncated_library(jvm, mlp_artifact, tmp_path):
    K = jvm
    data = mlp_artifact.so_path.read_bytes()
    corrupt = tmp_path / "truncated.so"
    corrupt.write_bytes(data[: len(data) // 3])
    with pytest.raises(K.KilnException) as e:
        K.KilnModule.load(str(corrupt))
    assert e.value.getStatus() in (IO, INVALID_FORMAT)
    assert len(str(e.value.getMessage())) > 0


def test_close_twice_and_use_after_close(jvm, mlp_artifact):
    K = jvm
    lib = K.KilnModule.load(str(mlp_artifact.so_path))
    f = lib.getFunction("load_executable")
    a = K.nd(np.ones((2, 3), np.float32))
    for h in (f, lib, a):
        h.close()
        h.close()  # idempotent
        assert h.isClosed()
    with pytest.raises(K.IllegalStateException):
        lib.getFunction("load_executable")
    with pytest.raises(K.IllegalStateException):
        f.invoke()
    with pytest.raises(K.IllegalStateException):
        a.toFloatArray()
    with pytest.raises(K.IllegalStateException):
        a.asByteBuffer()
    with K.KilnModule.load(str(mlp_artifact.so_path)) as lib2:
        vm = lib2.getFunction("load_executable").invoke().asModule()
        with pytest.raises(K.IllegalStateException):  # a closed argument
            vm.getFunction("init").call(a)
        vm.close()


def test_ndarray_roundtrip(jvm):
    K = jvm
    import jpype
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    with K.nd(x) as a:
        assert list(a.shape()) == [3, 4] and str(a.dtype()) == "float32"
        assert a.size() == 12 and a.nbytes() == 48
        np.testing.assert_array_equal(jvm.np(a), x)
        buf = a.asByteBuffer()  # zero copy: writes show up in the tensor
        assert buf.isDirect() and buf.order() == jpype.JClass("java.nio.ByteOrder").nativeOrder()
        buf.putFloat(4 * 5, 42.0)
        assert a.toFloatArray()[5] == 42.0
    i32 = np.arange(-3, 3, dtype=np.int32)
    with K.nd(i32) as a:
        assert str(a.dtype()) == "int32"
        assert list(a.toIntArray()) == list(i32)
        with pytest.raises(K.IllegalStateException):
            a.toFloatArray()  # dtype mismatch on the Java side
    i64 = np.array([[1 << 40, -5]], dtype=np.int64)
    with K.nd(i64) as a:
        assert list(a.toLongArray()) == [1 << 40, -5]
    with K.NDArray.empty(jpype.JArray(jpype.JLong)([2, 0]), "float16") as a:
        assert str(a.dtype()) == "float16" and a.nbytes() == 0 and a.asByteBuffer().capacity() == 0
    with K.NDArray.empty(jpype.JArray(jpype.JLong)([]), "bool") as a:
        assert a.size() == 1 and a.nbytes() == 1
    with pytest.raises(K.IllegalArgumentException):
        K.NDArray.fromFloatArray(jpype.JArray(jpype.JFloat)([1.0, 2.0]),
                                 jpype.JArray(jpype.JLong)([3]))
    with pytest.raises(K.IllegalArgumentException):
        K.NDArray.empty(jpype.JArray(jpype.JLong)([2]), "complex64")


def test_value_kinds(jvm, mlp_artifact):
    K = jvm
    with K.KilnModule.load(str(mlp_artifact.so_path)) as lib:
        with lib.getFunction("load_executable").invoke() as v:
            assert str(v.kind()) == "MODULE"
            with pytest.raises(K.ClassCastException):
                v.asNDArray()
            vm = v.asModule()
            assert vm.equals(v.asModule())
        assert vm.isClosed()  # closing the Value closed the module it held


def test_profile_returns_tuples_of_scalars(jvm, mlp):
    """VM `profile` returns a tuple of (name, kind, calls, total_us) rows: exercises string,
    int, float and tuple results."""
    K = jvm
    _, vm, args, _, _ = mlp
    with vm.getFunction("profile").call("forward", *args) as v:
        rows = list(v.asTuple())
        assert rows
        for row in rows:
            name, kind, calls, total_us = list(row.asTuple())
            assert isinstance(str(name.asString()), str)
            assert str(kind.asString()) in ("kernel", "extern", "vm", "total")
            assert calls.asLong() >= 0 and total_us.asDouble() >= 0.0
        assert "total" in [str(list(r.asTuple())[1].asString()) for r in rows]
    # a tuple argument (Object[]) crosses too; init rejects it with a message
    with pytest.raises(K.KilnException) as e:
        vm.getFunction("init").call([1, 2.5, "s", K.Device.cpu()])
    assert str(e.value.getMessage())


def test_unclosed_handles_are_cleaned(jvm, mlp):
    """Handles dropped without close() are released by the Cleaner. What is checked is the
    release itself: 100 unclosed NDArrays of 4 MiB each (written, so resident) would add 400 MiB
    to this process's RSS if their native tensors were never freed; after a GC the Cleaner must
    have given the memory back (posix_memalign of 4 MiB is an mmap, returned on free). Dropped
    Function handles must not break the VM either."""
    import time

    import jpype
    K = jvm
    _, vm, args, _, expected = mlp
    System = jpype.JClass("java.lang.System")
    n = 1024 * 1024
    data = jpype.JArray(jpype.JFloat)(n)  # one Java array, copied into each NDArray
    shape = jpype.JArray(jpype.JLong)([1024, 1024])

    def settle():
        System.gc()
        time.sleep(0.2)  # the Cleaner runs on its own thread
        _trim_heap()
        return _rss_bytes()

    base = settle()
    peak = base
    for i in range(100):
        K.NDArray.fromFloatArray(data, shape)  # dropped unclosed
        vm.getFunction("forward")
        if i % 10 == 9:
            peak = max(peak, _rss_bytes())
            System.gc()  # native memory puts no pressure on the Java heap: collect by hand
    leaked = 100 * 4 * n
    deadline = time.monotonic() + 20
    after = settle()
    while after - base > leaked // 4 and time.monotonic() < deadline:
        after = settle()
    assert after - base < leaked // 4, (
        f"RSS grew by {(after - base) >> 20} MiB after 100 dropped 4 MiB NDArrays and a GC "
        f"(peak +{(peak - base) >> 20} MiB): the Cleaner did not release them")
    with _forward(vm, args) as out:
        np.testing.assert_allclose(jvm.np(out), expected, rtol=1e-5, atol=1e-5)


def _trim_heap() -> None:
    """Give the C heap's free memory back to the OS (glibc ``malloc_trim``). glibc raises its
    mmap threshold after freeing a large mmap'd block, so later 4 MiB buffers come from the
    heap, and freeing them leaves RSS as it was until a trim: without one, RSS read whether
    glibc had trimmed, not whether the Cleaner freed the arrays (it failed once at 106 MiB
    against a 100 MiB limit). A real leak is not freed, so a trim cannot hide it."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):     # not glibc: RSS as it is
        pass


def _rss_bytes() -> int:
    """This process's resident set size (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_string_tensors(jvm, tmp_path):
    """NDArray.fromStrings / toStrings around a compiled model with string operators
    (tests/onnx/string_models.py: x == "cat", x ++ "!"): the string functions are registered
    by the JNI library itself; UTF-8 beyond ASCII survives both ways; a count that does not fit
    the shape and toStrings of a numeric tensor are refused."""
    import importlib.util
    import jpype
    import kiln
    from kiln.frontend.onnx import from_onnx
    root = pathlib.Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("string_models", root / "tests" / "onnx" / "string_models.py")
    string_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(string_models)
    mod = from_onnx(string_models.equal_and_concat_model())[0]
    kiln.compile(kiln.get_pipeline("default")(mod), "llvm").export_library(tmp_path / "model.so")
    K = jvm
    Strings = jpype.JArray(jpype.JString)
    Shape = jpype.JArray(jpype.JLong)
    lib = K.KilnModule.load(str(tmp_path / "model.so"))
    vm = lib.getFunction("load_executable").invoke().asModule()
    assert vm.getFunction("init").pushArg(K.Device.cpu()).invoke().isNull()
    x = K.NDArray.fromStrings(Strings(["cat", "dog", "émeu 🐦"]), Shape([3]))
    assert str(x.dtype()) == "string" and list(x.toStrings()) == ["cat", "dog", "émeu 🐦"]
    eq, w = vm.getFunction("main").pushArg(x).invoke().asTuple()
    eq_nd = eq.asNDArray()
    assert str(eq_nd.dtype()) == "bool"
    buf = eq_nd.asByteBuffer()
    assert [buf.get(i) != 0 for i in range(3)] == [True, False, False]
    assert list(w.asNDArray().toStrings()) == ["cat!", "dog!", "émeu 🐦!"]
    grid = K.NDArray.fromStrings(Strings(["", "a", "", "bc"]), Shape([2, 2]))
    assert list(grid.toStrings()) == ["", "a", "", "bc"] and list(grid.shape()) == [2, 2]
    with pytest.raises(K.IllegalArgumentException):
        K.NDArray.fromStrings(Strings(["a"]), Shape([2]))
    with pytest.raises(K.IllegalStateException):
        eq.asNDArray().toStrings()
    for v in (x, grid, eq_nd, w.asNDArray()):
        v.close()
    vm.close()
    lib.close()
