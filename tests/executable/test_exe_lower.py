"""Lowering graph functions to bytecode: expected instruction lists and clear errors."""
import numpy as np
import pytest

from kiln import te
from kiln.executable import compile as kiln_compile
from kiln.executable.format import Instruction as I, Op, ParamSpec, deserialize, serialize
from kiln.executable.lower import LowerError, lower_module
from kiln.ir import (Constant, FunctionBuilder, GraphTuple, GraphVar, IRModule, TensorType, TupleGetItem,
                     TupleType, Var, call_dps_packed, call_tir)
from kiln.ir.graph import Call

F32 = (2, 32, 1)  # DLPack float32


def ty(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def add_func(shape=(4,)):
    A = te.placeholder(shape, "float32", name="A")
    B = te.placeholder(shape, "float32", name="B")
    C = te.compute(shape, lambda *i: A[i] + B[i], name="C")
    return te.create_prim_func([A, B, C])


def split_func():
    """One input, two outputs (a tuple result)."""
    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((4,), lambda i: A[i] * 2.0, name="C")
    return te.create_prim_func([A, B, C])


def lower(funcs, **graph):
    spec, plans = lower_module(IRModule({**funcs, **graph}), "llvm")
    assert deserialize(serialize(spec)) == spec  # every lowered spec is a valid blob
    return spec, plans


def test_two_kernels_and_a_constant():
    x, y = GraphVar("x", ty(4)), GraphVar("y", ty(4))
    c = np.arange(4, dtype="float32")
    fb = FunctionBuilder([x, y])
    with fb.dataflow():
        lv0 = fb.emit(call_tir("add", [x, Constant(c)], ty(4)))
        gv = fb.emit_output(call_tir("add", [lv0, y], ty(4)))
    spec, plans = lower({"add": add_func()}, main=fb.finish(gv))
    f = spec.function("main")
    assert spec.kernels == ["add"] and spec.externs == []
    assert len(spec.constants) == 1 and np.array_equal(spec.constants[0], c)
    assert f.params == [ParamSpec("x", "float32", [4]), ParamSpec("y", "float32", [4])]
    assert f.code == [
        I(Op.LOAD_CONST, [2, 0]),
        I(Op.ALLOC_ARENA, [3, 0, *F32, 1, 4]),
        I(Op.CALL_KERNEL, [0, 3, 0, 2, 3]),
        I(Op.ALLOC_OUTPUT, [4, *F32, 1, 4]),        # returned: owned by the caller
        I(Op.CALL_KERNEL, [0, 3, 3, 1, 4]),
        I(Op.RET, [4]),
    ]
    assert f.num_registers == 5 and f.arena_size == 64
    assert plans["main"].arena_size == 64


def test_tuple_output_and_get_item():
    x = GraphVar("x", ty(4))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        pair = fb.emit(call_tir("split", [x], TupleType((ty(4), ty(4)))))
        second = fb.emit(TupleGetItem(pair, 1))
        gv = fb.emit_output(call_tir("add", [second, x], ty(4)))
    spec, _ = lower({"add": add_func(), "split": split_func()}, main=fb.finish(gv))
    assert spec.kernels == ["split", "add"]
    assert spec.function("main").code == [
        I(Op.ALLOC_ARENA, [1, 0, *F32, 1, 4]),
        I(Op.ALLOC_ARENA, [2, 64, *F32, 1, 4]),
        I(Op.CALL_KERNEL, [0, 3, 0, 1, 2]),
        I(Op.MAKE_TUPLE, [3, 2, 1, 2]),
        I(Op.GET_ITEM, [4, 3, 1]),
        I(Op.ALLOC_OUTPUT, [5, *F32, 1, 4]),
        I(Op.CALL_KERNEL, [1, 3, 4, 0, 5]),
        I(Op.RET, [5]),
    ]


def test_extern_call_and_returned_tuple():
    x = GraphVar("x", ty(2, 3))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        a = fb.emit(call_dps_packed("env.relu", [x], ty(2, 3)))
        b = fb.emit(call_dps_packed("env.relu", [a], ty(2, 3)))
        c = fb.emit(call_dps_packed("env.neg", [b], ty(2, 3)))
        out = fb.emit_output(GraphTuple((a, c)))
    spec, _ = lower({}, main=fb.finish(out))
    assert spec.kernels == [] and spec.externs == ["env.relu", "env.neg"]
    assert spec.function("main").code == [
        I(Op.ALLOC_OUTPUT, [1, *F32, 2, 2, 3]),     # a escapes through the returned tuple
        I(Op.CALL_EXTERN, [0, 2, 0, 1]),
        I(Op.ALLOC_ARENA, [2, 0, *F32, 2, 2, 3]),   # b does not
        I(Op.CALL_EXTERN, [0, 2, 1, 2]),
        I(Op.ALLOC_OUTPUT, [3, *F32, 2, 2, 3]),
        I(Op.CALL_EXTERN, [1, 2, 2, 3]),
        I(Op.MAKE_TUPLE, [4, 2, 1, 3]),
        I(Op.RET, [4]),
    ]


def test_escape_through_alias_and_item():
    x = GraphVar("x", ty(4))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        pair = fb.emit(call_tir("split", [x], TupleType((ty(4), ty(4)))))
        alias = fb.emit(pair)
        first = fb.emit_output(TupleGetItem(alias, 0))
    spec, plans = lower({"split": split_func()}, main=fb.finish(first))
    code = spec.function("main").code
    # Item 0 is returned (ALLOC_OUTPUT); item 1 is not (arena).
    assert code[0] == I(Op.ALLOC_OUTPUT, [1, *F32, 1, 4])
    assert code[1] == I(Op.ALLOC_ARENA, [2, 0, *F32, 1, 4])
    assert code[-1].opcode == Op.RET


def test_symbolic_shapes():
    n = Var("n", "int64")
    x = GraphVar("x", ty(n, 4))
    A = te.placeholder((n, 4), "float32", name="A")
    B = te.compute((n, 4), lambda i, j: A[i, j] * 2.0, name="B")
    fb = FunctionBuilder([x])
    with fb.dataflow():
        lv = fb.emit(call_tir("double", [x], ty(n, 4)))
        gv = fb.emit_output(call_tir("double", [lv], ty(n, 4)))
    spec, plans = lower({"double": te.create_prim_func([A, B])}, main=fb.finish(gv))
    f = spec.function("main")
    assert f.sym_names == ["n"] and f.params[0].shape == ["n", 4]
    # Symbolic size: not planned, both ALLOC_OUTPUT with dim -1 (symbolic 0).
    assert f.code[0] == I(Op.ALLOC_OUTPUT, [1, *F32, 2, -1, 4])
    assert f.code[2] == I(Op.ALLOC_OUTPUT, [2, *F32, 2, -1, 4])
    assert f.arena_size == 0 and plans["main"].naive_size == 0


def test_constants_deduplicated_and_loaded_once():
    x = GraphVar("x", ty(4))
    w = np.ones(4, dtype="float32")
    fb = FunctionBuilder([x])
    with fb.dataflow():
        a = fb.emit(call_tir("add", [x, Constant(w.copy())], ty(4)))
        b = fb.emit(call_tir("add", [a, Constant(w.copy())], ty(4)))
        c = fb.emit(call_tir("add", [b, Constant(np.zeros(4, "float32"))], ty(4)))
        gv = fb.emit_output(call_tir("add", [c, Constant(w.astype("float64").astype("float32"))], ty(4)))
    spec, _ = lower({"add": add_func()}, main=fb.finish(gv))
    assert len(spec.constants) == 2
    loads = [ins for ins in spec.function("main").code if ins.opcode == Op.LOAD_CONST]
    assert loads == [I(Op.LOAD_CONST, [1, 0]), I(Op.LOAD_CONST, [4, 1])]


def test_constant_binding_and_param_return():
    x = GraphVar("x", ty(3))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        c = fb.emit(Constant(np.array([1, 2, 3], dtype="int32")))
        t = fb.emit_output(GraphTuple((x, c)))
    spec, _ = lower({}, main=fb.finish(t))
    assert spec.function("main").code == [I(Op.LOAD_CONST, [1, 0]), I(Op.MAKE_TUPLE, [2, 2, 0, 1]),
                                          I(Op.RET, [2])]


def test_several_functions_share_tables():
    def graph():
        x = GraphVar("x", ty(4))
        fb = FunctionBuilder([x])
        with fb.dataflow():
            gv = fb.emit_output(call_tir("add", [x, Constant(np.ones(4, "float32"))], ty(4)))
        return fb.finish(gv)
    spec, _ = lower({"add": add_func()}, prefill=graph(), decode=graph())
    assert [f.name for f in spec.functions] == ["prefill", "decode"]
    assert spec.kernels == ["add"] and len(spec.constants) == 1


# ---- errors --------------------------------------------------------------------------------
def _single(value, params, funcs=None):
    fb = FunctionBuilder(params)
    with fb.dataflow():
        gv = fb.emit_output(value)
    return IRModule({**(funcs or {}), "main": fb.finish(gv)})


def test_operator_call_left_asks_for_a_pipeline():
    x = GraphVar("x", ty(4))
    mod = _single(Call("relu", (x,), (), ty(4)), [x])
    with pytest.raises(LowerError, match=r"binding 'gv0': operator call 'relu' must be legalized.*"
                                         r"get_pipeline\('zero'\)"):
        lower_module(mod, "llvm")
    with pytest.raises(LowerError, match="must be legalized"):
        kiln_compile(mod)


def test_compile_runs_the_pipeline_hook():
    x = GraphVar("x", ty(4))
    mod = _single(Call("relu", (x,), (), ty(4)), [x])
    seen = []

    def pipeline(m):
        seen.append(m)
        return _single(call_tir("add", [x, x], ty(4)), [x], {"add": add_func()})
    ex = kiln_compile(mod, pipeline=pipeline)
    assert seen == [mod] and ex.kernel_names == ["add"]


@pytest.mark.parametrize("make, message", [
    (lambda x: call_tir("nope", [x], ty(4)), "calls 'nope', which is not a tensor program"),
    (lambda x: call_tir("add", [x], ty(4)), "1 inputs and 1 outputs, but the tensor program has 3"),
    (lambda x: call_tir("add", [x, x], ty(Var("m", "int64"))), "dimension 'm' is bound by no parameter"),
    (lambda x: call_tir("add", [x, x], ty(Var("m", "int64") * 2)), "dimension 'm' is bound by no parameter"),
    (lambda x: call_tir("add", [x, x], ty(Var("m", "int64") < 2)), "LT, which a derived dimension cannot"),
    (lambda x: call_tir("add", [x, x], TensorType(None)), "unknown rank"),
    (lambda x: call_tir("add", [x, x], TupleType((ty(4), TupleType((ty(4),))))), "tuple of tensors"),
    (lambda x: call_tir("add", [x, GraphTuple((x,))], ty(4)), "argument 1 is not a tensor"),
    (lambda x: call_tir("add", [x, Call("relu", (x,), (), ty(4))], ty(4)), "nested call 'relu'"),
    (lambda x: Call("call_tir", (x, GraphTuple((x,))), (), ty(4)), "callee must be a GlobalVar"),
    (lambda x: Call("call_dps_packed", (x, GraphTuple((x,))), (), ty(4)), "callee must be an ExternFunc"),
    (lambda x: GraphVar("ghost", ty(4)), "uses 'ghost' before it is defined"),
])
def test_lowering_errors(make, message):
    x = GraphVar("x", ty(4))
    with pytest.raises(LowerError, match=message):
        lower_module(_single(make(x), [x], {"add": add_func()}), "llvm")


def test_param_must_be_tensor():
    p = GraphVar("p", TupleType((ty(4),)))
    with pytest.raises(LowerError, match="parameter 0 'p' has type"):
        lower_module(_single(TupleGetItem(p, 0), [p]), "llvm")


def test_module_without_graph_function():
    with pytest.raises(LowerError, match="no graph functions"):
        lower_module(IRModule({"add": add_func()}), "llvm")


def test_init_is_reserved():
    x = GraphVar("x", ty(4))
    fb = FunctionBuilder([x])
    with pytest.raises(LowerError, match="may not be named 'init'"):
        lower_module(IRModule({"init": fb.finish(x)}), "llvm")


def test_symbolic_intermediates_are_freed_after_their_last_use():
    """Symbolic-size intermediates live in ALLOC_OUTPUT (heap) tensors: each is released by FREE
    right after its last reader, so a deep dynamic-shape model does not hold them all until
    the call returns. What the call returns is never freed."""
    n = Var("n", "int64")
    x = GraphVar("x", ty(n))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        a = fb.emit(call_tir("add", [x, x], ty(n)))
        b = fb.emit(call_tir("add", [a, x], ty(n)))
        c = fb.emit(call_tir("add", [b, a], ty(n)))
        gv = fb.emit_output(call_tir("add", [c, x], ty(n)))
    spec, _ = lower({"add": add_func((n,))}, main=fb.finish(gv))
    assert spec.function("main").code == [
        I(Op.ALLOC_OUTPUT, [1, *F32, 1, -1]), I(Op.CALL_KERNEL, [0, 3, 0, 0, 1]),   # a
        I(Op.ALLOC_OUTPUT, [2, *F32, 1, -1]), I(Op.CALL_KERNEL, [0, 3, 1, 0, 2]),   # b
        I(Op.ALLOC_OUTPUT, [3, *F32, 1, -1]), I(Op.CALL_KERNEL, [0, 3, 2, 1, 3]),   # c
        I(Op.FREE, [1]), I(Op.FREE, [2]),                                           # a, b dead
        I(Op.ALLOC_OUTPUT, [4, *F32, 1, -1]), I(Op.CALL_KERNEL, [0, 3, 3, 0, 4]),
        I(Op.FREE, [3]),
        I(Op.RET, [4]),
    ]
