"""The bytecode VM end to end: executables written by kiln.executable.format over the fixture
kernels (and one compiled by kiln.compile), run through load_executable / init / calls, against
numpy; argument checks and their messages; tuples; profiling; concurrent calls."""

import threading

import numpy as np
import pytest

import kiln
from kiln.executable.format import serialize
from kiln.runtime import KilnError, VirtualMachine, nd, register_func
from kiln.runtime._base import lib

C = np.arange(8, dtype="float32")


@pytest.fixture(scope="module", autouse=True)
def relu_shift():
    @register_func("test.relu_shift", override=True)
    def f(c, out):
        np.maximum(np.from_dlpack(c) - 3, 0, out=np.from_dlpack(out))
    yield
    kiln.runtime.unregister_func("test.relu_shift")


@pytest.fixture(scope="module")
def model_path(build_model, fixture_spec):
    return build_model(serialize(fixture_spec()))


@pytest.fixture(scope="module")
def vm(model_path):
    return VirtualMachine(kiln.load_module(model_path), kiln.cpu())


def _error(fn, *args):
    with pytest.raises(KilnError) as info:
        fn(*args)
    return info.value


def test_library_lists_load_executable(model_path):
    mod = kiln.load_module(model_path)
    assert mod.function_names == ["main", "scale", "rowsum", "threads", "fail", "load_executable"]
    exe = mod["load_executable"]()
    assert exe.kind == "vm"
    assert exe.function_names == ["init", "profile", "forward", "quad", "escape", "ident"]
    e = _error(exe.__getitem__, "nope")
    assert str(e) == (f"vm module '{model_path}' has no function 'nope'; its functions: init, "
                      "profile, forward, quad, escape, ident")


def test_forward_matches_numpy(vm):
    x = np.random.default_rng(0).random(8, dtype="float32")
    (doubled, relu, const), relu_again = vm["forward"](x)
    np.testing.assert_array_equal(doubled.numpy(), 2 * (x + 1))
    np.testing.assert_array_equal(relu.numpy(), np.maximum(C - 3, 0))
    np.testing.assert_array_equal(const.numpy(), C)
    assert relu_again._handle == relu._handle  # GET_ITEM / MOVE share the tensor
    assert vm.function_names == ["forward", "quad", "escape", "ident"] and "forward" in vm


def test_constants_are_read_only_views(vm, model_path):
    (_, _, const), _ = vm["forward"](np.zeros(8, "float32"))
    view = np.from_dlpack(const)
    assert not view.flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        const.__dlpack__()  # the legacy protocol cannot say read-only
    (_, _, again), _ = vm["forward"](np.zeros(8, "float32"))
    assert np.from_dlpack(again).ctypes.data == view.ctypes.data  # no copy: the blob itself


@pytest.mark.parametrize("n", [0, 1, 16])
def test_symbolic_arena_view(vm, n):
    x = np.random.default_rng(n).random(n, dtype="float32")
    np.testing.assert_array_equal(vm["quad"](x).numpy(), 4 * x)


def test_symbolic_arena_view_too_big(vm):
    e = _error(vm["quad"], np.zeros(17, "float32"))
    assert str(e) == ("quad: instruction 0 (ALLOC_ARENA): a view of shape (17,) at offset 0 does "
                      "not fit in the arena of 64 bytes")
    assert e.status == lib.KILN_ERR_SHAPE_MISMATCH


def test_returned_arena_view_outlives_the_call(vm):
    views = [vm["escape"](np.full(8, i, "float32")) for i in range(3)]
    for i, v in enumerate(views):  # each call had its own arena, kept alive by its view
        np.testing.assert_array_equal(v.numpy(), np.full(8, i + 1, "float32"))


def test_returning_an_argument(vm):
    x = nd.array(np.arange(8, dtype="float32"))
    y = vm["ident"](x)
    assert y._handle == x._handle or np.from_dlpack(y).ctypes.data == np.from_dlpack(x).ctypes.data


@pytest.mark.parametrize("args,status,message", [
    ((np.zeros(9, "float32"),), "SHAPE_MISMATCH", "forward: argument 0 'x' expected shape (8,), got (9,)"),
    ((np.zeros((2, 4), "float32"),), "SHAPE_MISMATCH", "forward: argument 0 'x' expected shape (8,), got (2, 4)"),
    ((np.zeros(8, "float64"),), "DTYPE_MISMATCH", "forward: argument 0 'x' expected dtype float32, got float64"),
    ((), "INVALID_ARGUMENT", "forward: expected 1 argument, got 0"),
    ((np.zeros(8, "float32"), 1), "INVALID_ARGUMENT", "forward: expected 1 argument, got 2"),
    ((3,), "INVALID_ARGUMENT", "forward: argument 0 'x' expected a tensor, got int"),
    ((np.zeros(16, "float32")[::2],), "INVALID_ARGUMENT", "forward: argument 0 'x' is not contiguous"),
])
def test_argument_checks(vm, args, status, message):
    e = _error(vm["forward"], *args)
    assert str(e).startswith(message) and e.status == getattr(lib, "KILN_ERR_" + status)


def test_call_before_init_and_init_errors(model_path):
    exe = kiln.load_module(model_path)["load_executable"]()
    e = _error(exe["forward"], np.zeros(8, "float32"))
    assert str(e) == "forward: the virtual machine is not initialized; call init(device) first"
    assert e.status == lib.KILN_ERR_INVALID_STATE
    e = _error(exe["init"], kiln.Device("cuda", 0))
    assert str(e) == "init: device cuda:0 is not supported; this runtime runs executables on cpu"
    assert e.status == lib.KILN_ERR_UNSUPPORTED
    assert str(_error(exe["init"], 3)) == "init: argument 0 expected a device, got int"
    exe["init"]()  # no argument: cpu
    assert exe["forward"](np.zeros(8, "float32"))[1].shape == (8,)


def test_missing_extern_at_init(build_model, fixture_spec):
    path = build_model(serialize(fixture_spec(extern="test.not_registered")))
    e = _error(VirtualMachine, kiln.load_module(path), kiln.cpu())
    assert str(e) == "init: external function 'test.not_registered' is not registered"
    assert e.status == lib.KILN_ERR_NOT_FOUND


def test_extern_exception_becomes_the_error(build_model, fixture_spec):
    @register_func("test.raises", override=True)
    def raises(c, out):
        raise ValueError(f"bad shape {np.from_dlpack(c).shape}")

    try:
        vm = VirtualMachine(kiln.load_module(build_model(serialize(fixture_spec("test.raises")))))
        e = _error(vm["forward"], np.zeros(8, "float32"))
        assert str(e) == ("forward: instruction 6 (CALL_EXTERN): test.raises: ValueError: bad shape (8,)")
        assert e.status == lib.KILN_ERR_RUNTIME
    finally:
        kiln.runtime.unregister_func("test.raises")


def test_init_keeps_the_function_it_looked_up(build_model, fixture_spec):
    calls = []
    register_func("test.swap", lambda c, out: calls.append("first"), override=True)
    vm = VirtualMachine(kiln.load_module(build_model(serialize(fixture_spec("test.swap")))))
    register_func("test.swap", lambda c, out: calls.append("second"), override=True)
    vm["forward"](np.zeros(8, "float32"))
    vm.module["init"](kiln.cpu())  # looks the functions up again
    vm["forward"](np.zeros(8, "float32"))
    kiln.runtime.unregister_func("test.swap")
    vm["forward"](np.zeros(8, "float32"))  # the VM holds its own reference
    assert calls == ["first", "second", "second"]


def test_profile_report(vm):
    report = vm.profile("forward", np.zeros(8, "float32"))
    rows = {(r.name, r.kind): r for r in report.rows}
    assert rows[("main", "kernel")].calls == 1 and rows[("scale", "kernel")].calls == 1
    assert rows[("test.relu_shift", "extern")].calls == 1
    assert rows[("MAKE_TUPLE", "vm")].calls == 2 and rows[("RET", "vm")].calls == 1
    assert set(report.kernels) == {"main", "scale"}
    assert report.total_us >= sum(r.total_us for r in report.rows) > 0
    text = str(report)
    assert text.splitlines()[0] == "profile of 'forward'"
    assert "test.relu_shift" in text and text.splitlines()[-1].startswith("total")
    e = _error(vm.profile, "nope")
    assert str(e) == "profile: no function 'nope'"
    assert str(_error(vm.profile, "forward", np.zeros(3, "float32"))).startswith(
        "forward: argument 0 'x' expected shape (8,), got (3,)")


def test_virtual_machine_inputs(model_path, vm):
    assert VirtualMachine(str(model_path))["ident"] is not None
    exe = kiln.load_module(model_path)["load_executable"]()
    assert VirtualMachine(exe, "cpu").device == kiln.cpu()  # an already loaded VM module
    with pytest.raises(TypeError, match="VirtualMachine takes"):
        VirtualMachine(42)


def test_kernel_library_without_executable(lib_path):
    e = _error(VirtualMachine, kiln.load_module(lib_path))
    assert "holds no executable" in str(e)


def test_concurrent_calls(vm):
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(50):
                x = rng.random(8, dtype="float32")
                (doubled, relu, _), _ = vm["forward"](x)
                np.testing.assert_array_equal(doubled.numpy(), 2 * (x + 1))
                n = int(rng.integers(0, 17))
                q = rng.random(n, dtype="float32")
                np.testing.assert_array_equal(vm["quad"](q).numpy(), 4 * q)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_values_device_and_tuple_round_trip():
    """Devices and (nested) tuples cross the boundary both ways, through a registered echo."""
    echo = kiln.runtime.registry.make_function("echo", lambda *args: args)
    arr = nd.array(np.arange(3.0))
    out = echo(kiln.cpu(), (1, (2.5, "s"), arr), None)
    assert out[0] == kiln.cpu() and out[2] is None
    assert out[1][0] == 1 and out[1][1] == (2.5, "s")
    assert out[1][2]._handle == arr._handle


def test_compiled_model_end_to_end():
    """kiln.compile output (codegen kernels + the serializer's blob) through the VM."""
    from kiln import te
    from kiln.ir import Constant, FunctionBuilder, GraphTuple, GraphVar, IRModule, TensorType, call_dps_packed, call_tir

    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 4)).astype("float32")
    A = te.placeholder((2, 16), "float32", name="A")
    W = te.placeholder((16, 4), "float32", name="W")
    k = te.reduce_axis((0, 16), name="k")
    matmul = te.create_prim_func([A, W, te.compute((2, 4), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k),
                                                   name="C")])
    x = GraphVar("x", TensorType((2, 16), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        lv = fb.emit(call_tir("matmul", [x, Constant(w)], TensorType((2, 4), "float32")))
        r = fb.emit(call_dps_packed("test.relu_shift", [lv], TensorType((2, 4), "float32")))
        gv = fb.emit_output(GraphTuple((r, lv)))
    ex = kiln.compile(IRModule({"matmul": matmul, "forward": fb.finish(gv)}), "llvm")
    vm = VirtualMachine(ex, kiln.cpu())
    xs = rng.standard_normal((2, 16)).astype("float32")
    relu, mm = vm["forward"](xs)
    np.testing.assert_allclose(mm.numpy(), xs @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(relu.numpy(), np.maximum(xs @ w - 3, 0), rtol=1e-5, atol=1e-5)
