"""Control flow: ``call_if`` from graph IR through the pipeline, the executable format (IF,
private functions) and the C VM, checked against numpy and the graph interpreter."""

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.executable import compile as kiln_compile
from kiln.executable.format import (ExecutableSpec, FormatError, FunctionSpec, Instruction, Op,
                                    ParamSpec, deserialize, serialize)
from kiln.ir import (Constant, FunctionBuilder, GraphTuple, GraphVar, IRModule, TensorType, call_if)
from kiln.ir.graph_interp import interpret
from kiln.runtime.vm import VirtualMachine

F32 = "float32"


def _branch(body, *param_types, name_prefix="p"):
    """A private graph function ``body(*params)`` (body builds with ops.call on GraphVars)."""
    params = [GraphVar(f"{name_prefix}{i}", t) for i, t in enumerate(param_types)]
    fb = FunctionBuilder(params, attrs={"private": True})
    with fb.dataflow():
        out = body(fb, *params)
        gv = fb.emit_output(out) if not isinstance(out, GraphTuple) else \
            fb.emit_output(GraphTuple(tuple(fb.emit(f) for f in out.fields)))
    return fb.finish(gv)


def _relu_or_neg_module(shape=(4, 8)):
    """main(c, x, w) = c ? relu(x @ w) : -(x @ w) + 1, the branches as private functions."""
    c = GraphVar("c", TensorType((), "bool"))
    x = GraphVar("x", TensorType(shape, F32))
    w = GraphVar("w", TensorType((shape[1], 3), F32))
    fb = FunctionBuilder([c, x, w])
    with fb.dataflow():
        y = fb.emit(ops.call("matmul", x, w))
        gv = fb.emit_output(call_if(c, "then_f", "else_f", [y], y.ty))
    main = fb.finish(gv)
    then_f = _branch(lambda fb, p: ops.call("relu", p), y.ty)
    else_f = _branch(lambda fb, p: ops.call("add", fb.emit(ops.call("neg", p)),
                                            Constant(np.float32(1))), y.ty)
    return IRModule({"main": main, "then_f": then_f, "else_f": else_f})


@pytest.mark.parametrize("pipeline", ["zero", "default"])
def test_if_picks_the_branch_at_run_time(pipeline):
    mod = _relu_or_neg_module()
    ex = kiln.compile(mod, pipeline=pipeline)
    assert ex.function_names == ["main"]            # the branches are private
    vm = VirtualMachine(ex, kiln.cpu())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(F32)
    w = rng.standard_normal((8, 3)).astype(F32)
    for flag in (True, False, True):
        got = vm["main"](kiln.nd.array(np.array(flag)), kiln.nd.array(x), kiln.nd.array(w)).numpy()
        want = np.maximum(x @ w, 0) if flag else -(x @ w) + 1
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        ref = interpret(mod, [np.array(flag), x, w], mod=mod)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="not found|no function"):
        vm["then_f"]


def test_integer_condition_and_tuple_result():
    c = GraphVar("c", TensorType((1,), "int64"))
    x = GraphVar("x", TensorType((5,), F32))
    tt = kiln.ir.TupleType((x.ty, x.ty))
    fb = FunctionBuilder([c, x])
    with fb.dataflow():
        gv = fb.emit_output(call_if(c, "swap", "keep", [x, x], tt))
    main = fb.finish(gv)

    def swap(fb, a, b):
        return GraphTuple((ops.call("multiply", b, Constant(np.float32(2))), a))

    def keep(fb, a, b):
        return GraphTuple((a, ops.call("add", b, Constant(np.float32(3)))))
    mod = IRModule({"main": main, "swap": _branch(swap, x.ty, x.ty), "keep": _branch(keep, x.ty, x.ty)})
    vm = VirtualMachine(kiln.compile(mod, pipeline="default"), kiln.cpu())
    xs = np.arange(5, dtype=F32)
    a, b = vm["main"](kiln.nd.array(np.array([7], "int64")), kiln.nd.array(xs))
    np.testing.assert_array_equal(a.numpy(), 2 * xs)
    np.testing.assert_array_equal(b.numpy(), xs)
    a, b = vm["main"](kiln.nd.array(np.array([0], "int64")), kiln.nd.array(xs))
    np.testing.assert_array_equal(a.numpy(), xs)      # 'keep' returns its argument unchanged
    np.testing.assert_array_equal(b.numpy(), xs + 3)


def test_branch_returning_an_argument_keeps_it_alive():
    """A branch that returns its argument hands the caller's intermediate back: the memory
    planner must not reuse that intermediate's storage while the result is still live."""
    c = GraphVar("c", TensorType((), "bool"))
    x = GraphVar("x", TensorType((64,), F32))
    fb = FunctionBuilder([c, x])
    with fb.dataflow():
        t0 = fb.emit(ops.call("exp", x))
        r = fb.emit(call_if(c, "ident", "twice", [t0], t0.ty))
        t1 = fb.emit(ops.call("add", x, Constant(np.float32(100))))   # may reuse t0's storage
        t2 = fb.emit(ops.call("multiply", t1, Constant(np.float32(1))))
        gv = fb.emit_output(ops.call("subtract", r, t2))
    main = fb.finish(gv)
    mod = IRModule({"main": main, "ident": _identity_branch(t0.ty),
                    "twice": _branch(lambda fb, p: ops.call("add", p, p), t0.ty)})
    vm = VirtualMachine(kiln.compile(mod, pipeline="zero"), kiln.cpu())
    xs = np.linspace(-1, 1, 64).astype(F32)
    for flag in (True, False):
        got = vm["main"](kiln.nd.array(np.array(flag)), kiln.nd.array(xs)).numpy()
        r = np.exp(xs) if flag else 2 * np.exp(xs)
        np.testing.assert_allclose(got, r - (xs + 100), rtol=1e-5, atol=1e-5)


def _identity_branch(ty):
    p = GraphVar("p", ty)
    fb = FunctionBuilder([p], attrs={"private": True})
    return fb.finish(p)


def test_condition_errors_name_the_instruction():
    mod = _relu_or_neg_module()
    vm = VirtualMachine(kiln.compile(mod, pipeline="default"), kiln.cpu())
    bad = kiln.nd.array(np.array([1.0], F32))
    x, w = kiln.nd.array(np.zeros((4, 8), F32)), kiln.nd.array(np.zeros((8, 3), F32))
    with pytest.raises(Exception, match="argument 0 'c' expected dtype bool"):
        vm["main"](bad, x, w)


def test_script_round_trip_prints_call_if():
    from kiln.ir.printer import to_text
    from kiln.script import assert_roundtrip
    mod = _relu_or_neg_module()
    assert "R.call_if(c, Module.then_f, Module.else_f, (lv0,)" in to_text(mod)
    assert_roundtrip(mod)


# ---- the format: IF operands, private functions, recursion ---------------------------------------
def _fn(name, code, nparams=1, private=False, regs=3):
    return FunctionSpec(name, [ParamSpec(f"x{i}", F32, [4]) for i in range(nparams)], [], regs, 0, code,
                        private=private)


def _spec(*functions):
    return ExecutableSpec("llvm", [], [], [], list(functions))


def test_format_round_trips_if_and_private_flag():
    spec = _spec(_fn("main", [Instruction(Op.IF, [1, 0, 1, 1, 1, 0]), Instruction(Op.RET, [1])]),
                 _fn("b", [Instruction(Op.RET, [0])], private=True))
    back = deserialize(serialize(spec))
    assert back == spec and back.functions[1].private and not back.functions[0].private


@pytest.mark.parametrize("code,msg", [
    ([Instruction(Op.IF, [1, 0, 5, 1, 1, 0]), Instruction(Op.RET, [1])], "function index 5 out of range"),
    ([Instruction(Op.IF, [1, 0, 1, 1, 0]), Instruction(Op.RET, [1])], "passes 0 arguments to 'b'"),
    ([Instruction(Op.IF, [1, 0, 0, 1, 1, 0]), Instruction(Op.RET, [1])], "cycle"),
    ([Instruction(Op.IF, [9, 0, 1, 1, 1, 0]), Instruction(Op.RET, [1])], "dst register 9 out of range"),
])
def test_format_refuses_bad_if(code, msg):
    spec = _spec(_fn("main", code), _fn("b", [Instruction(Op.RET, [0])], private=True))
    with pytest.raises(FormatError, match=msg):
        serialize(spec)


def test_bound_weights_move_into_the_branches():
    """bind_params on main binds the weights main passes to If branches into the branches."""
    from kiln.transform import bind_params
    c = GraphVar("c", TensorType((), "bool"))
    x = GraphVar("x", TensorType((2, 8), F32))
    w = GraphVar("w", TensorType((8, 3), F32))
    out_ty = TensorType((2, 3), F32)
    fb = FunctionBuilder([c, x, w])
    with fb.dataflow():
        gv = fb.emit_output(call_if(c, "mm", "mm_relu", [x, w], out_ty))
    mod = IRModule({"main": fb.finish(gv),
                    "mm": _branch(lambda fb, a, b: ops.call("matmul", a, b), x.ty, w.ty),
                    "mm_relu": _branch(lambda fb, a, b: ops.call("relu", fb.emit(ops.call("matmul", a, b))),
                                       x.ty, w.ty)})
    wv = np.random.default_rng(1).standard_normal((8, 3)).astype(F32)
    bound = bind_params("main", {"w": wv})(mod)
    assert [p.name for p in bound["main"].params] == ["c", "x"]
    assert [p.name for p in bound["mm"].params] == ["p0"] and [p.name for p in bound["mm_relu"].params] == ["p0"]
    vm = VirtualMachine(kiln.compile(bound, pipeline="default"), kiln.cpu())
    xs = np.random.default_rng(2).standard_normal((2, 8)).astype(F32)
    for flag in (True, False):
        got = vm["main"](kiln.nd.array(np.array(flag)), kiln.nd.array(xs)).numpy()
        want = xs @ wv if flag else np.maximum(xs @ wv, 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
