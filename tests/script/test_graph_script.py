"""Graph functions in script (``@R.function``): printing, parsing, round trips and errors.

The canonical texts below are exactly what the printer writes, so they pin the printed syntax:
types with symbolic dimensions as strings, tuples, small constants, operator calls with
attributes of every kind, call_tir / call_dps_packed, several dataflow blocks, bindings outside
dataflow, annotated bindings, function attributes, and modules mixing tensor programs and
graph functions (which may refer to functions defined later in the class).
"""
import inspect

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import (Constant, FunctionBuilder, GlobalVar, GraphCall, GraphTuple, GraphVar,
                     IRModule, TensorType, TupleGetItem, TupleType, Var, structural_equal)
from kiln.ir.graph import Function
from kiln.script import R, ScriptError, T, assert_roundtrip, metadata, parse

H = "# from kiln.script import T, R\n\n@kiln.script.ir_module\nclass Module:\n"
CASES = {}

CASES["api_section_3"] = H + '''    @T.prim_func
    def linear0(X: T.Buffer((1, 784), "float32"), W: T.Buffer((128, 784), "float32"), B: T.Buffer((128,), "float32"), Z: T.Buffer((1, 128), "float32")):
        for i, j, k in T.grid(1, 128, 784):
            with T.block("Z"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(B[vj], Z[vi, vj], X[vi, vk], W[vj, vk])
                T.writes(Z[vi, vj])
                with T.init():
                    Z[vi, vj] = B[vj]
                Z[vi, vj] = Z[vi, vj] + X[vi, vk] * W[vj, vk]

    @R.function
    def main(x: R.Tensor((1, 784), "float32"), w0: R.Tensor((128, 784), "float32"), b0: R.Tensor((128,), "float32")) -> R.Tensor((1, 128), "float32"):
        with R.dataflow():
            lv0 = R.call_tir(Module.linear0, (x, w0, b0), R.Tensor((1, 128), "float32"))
            lv1 = R.call_dps_packed("env.relu", (lv0,), R.Tensor((1, 128), "float32"))
            gv = R.add(lv1, lv0)
            R.output(gv)
        return gv'''

CASES["symbolic_shapes"] = H + '''    @R.function
    def main(x: R.Tensor(("n", 784), "float32"), w: R.Tensor((784, "m"), "float32"), b: R.Tensor(("m",), "float32")) -> R.Tensor(("n * m",), "float32"):
        with R.dataflow():
            lv0 = R.matmul(x, w)
            lv1 = R.add(lv0, b)
            lv2 = R.call_tir(Module.relu, (lv1,), R.Tensor(("n", "m"), "float32"))
            gv = R.reshape(lv2, shape=(n * m,))
            R.output(gv)
        return gv

    @T.prim_func
    def relu(A: T.Buffer((n, m), "float32"), B: T.Buffer((n, m), "float32")):
        n = T.int32()
        m = T.int32()
        for i, j in T.grid(n, m):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = T.max(A[vi, vj], T.float32(0))'''

CASES["symbolic_int64"] = H + '''    @R.function
    def main(x: R.Tensor(("n", "m"), "float32")) -> R.Tensor(("n * m",), "float32"):
        n = T.int64()
        m = T.int64()
        with R.dataflow():
            gv = R.reshape(x, shape=(n * m,))
            R.output(gv)
        return gv

    @R.function
    def other(x: R.Tensor(("n", "T.int64(4)"), "float32"), y: R.Tensor(None, "int32")) -> R.Tensor(("n", "T.int64(4)"), "float32"):
        return x'''

CASES["tuples"] = H + '''    @R.function
    def main(p: R.Tuple(R.Tensor((2, 4), "float32"), R.Tensor((4,), "float32")), e: R.Tuple()) -> R.Tuple(R.Tuple(R.Tensor((2, 2), "float32"), R.Tensor((2, 4), "float32")), R.Tuple(R.Tensor((4,), "float32")), R.Tuple()):
        with R.dataflow():
            lv0 = p[0]
            lv1 = R.split(lv0, axis=1, indices_or_sections=2)
            lv2 = lv1[0]
            lv3 = R.add(lv0, p[1])
            gv = (lv2, lv3)
            R.output(gv)
        one = (p[1],)
        return (gv, one, e)'''

CASES["constants"] = H + '''    @R.function
    def main(x: R.Tensor((2, 4), "float32")) -> R.Tuple(R.Tensor((2, 4), "float32"), R.Tensor((3,), "int64"), R.Tensor((2,), "bool"), R.Tensor((0, 3), "float16"), R.Tensor((1,), "int32")):
        with R.dataflow():
            lv0 = R.add(x, R.const([0.5], "float32"))
            lv1 = R.multiply(lv0, R.const([[1.5, -2.0, 3.0, 0.1], [1e-08, -0.0, float("inf"), 3.4028235e+38]], "float32"))
            gv = R.subtract(lv1, R.const([1.0, 2.0, 3.0, 4.0], "float32"))
            R.output(gv)
        c0 = R.const([-1, 0, 9007199254740993], "int64")
        c1 = R.const([True, False], "bool")
        c2 = R.const([], "float16", shape=(0, 3))
        return (gv, c0, c1, c2, R.const([7], "int32"))'''

CASES["attrs"] = H + '''    @R.function
    def main(x: R.Tensor((2, 3, 4), "float32")) -> R.Tuple(R.Tensor((1, 1, 4), "float32"), R.Tensor((4, 3, 2), "float16"), R.Tensor((2, 3, 4), "float32"), R.Tensor((2, 3, 4), "float32")):
        with R.dataflow():
            lv0 = R.sum(x, axis=(0, 1), keepdims=True)
            lv1 = R.clip(x, max=6.0, min=-0.5)
            lv2 = R.cast(lv1, dtype="float16")
            lv3 = R.permute_dims(lv2, axes=(2, 1, 0))
            lv4 = R.softmax(x, axis=-1)
            lv5 = R.clip(lv4, max=float("inf"), min=0.0)
            gv = (lv0, lv3, lv4, lv5)
            R.output(gv)
        return gv'''

CASES["blocks"] = H + '''    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        R.func_attr({"global_symbol": "main", "num_input": 1, "tags": ("a", 2, 0.5, True, None)})
        gv0 = R.call_dps_packed("env.log", (x,), R.Tensor((4,), "float32"))
        with R.dataflow():
            lv0 = R.relu(gv0)
            gv1 = R.exp(lv0)
            R.output(gv1)
        gv2: R.Tensor(None, "float32") = R.call_dps_packed("env.print", (gv1,), R.Tensor((4,), "float32"))
        gv3 = R.call_dps_packed("env.id", (gv2,), R.Tensor((4,), "float32"), inplace=True)
        with R.dataflow():
            lv1 = R.add(gv1, gv1)
            R.output()
        with R.dataflow():
            gv4 = R.neg(gv1)
            R.output(gv4)
        return gv4'''

CASES["functions_in_any_order"] = H + '''    @R.function
    def main(x: R.Tensor((8,), "float32")) -> R.Tensor((8,), "float32"):
        with R.dataflow():
            lv0 = R.call_tir(Module.add_one, (x,), R.Tensor((8,), "float32"))
            gv = R.call_tir(R.GlobalVar("add-two"), (lv0,), R.Tensor((8,), "float32"), tag="fused")
            R.output(gv)
        return gv

    @T.prim_func
    def add_one(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + T.float32(1)

    @T.prim_func(name="add-two")
    def add_two(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + T.float32(2)'''


@pytest.mark.parametrize("name", sorted(CASES))
def test_canonical_text_is_a_fixed_point(name):
    text = CASES[name]
    mod = parse(text)
    assert mod.script() == text
    assert_roundtrip(mod)


# ---- API.md section 3, written as a user would ------------------------------------------------
@kiln.script.ir_module
class Net:
    @T.prim_func
    def linear0(X: T.Buffer((1, 784), "float32"), W: T.Buffer((128, 784), "float32"),
                B: T.Buffer((128,), "float32"), Z: T.Buffer((1, 128), "float32")):
        for i, j, k in T.grid(1, 128, 784):
            with T.block("Z"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    Z[vi, vj] = B[vj]
                Z[vi, vj] = Z[vi, vj] + X[vi, vk] * W[vj, vk]

    @R.function
    def main(x: R.Tensor((1, 784), "float32"), w0: R.Tensor((128, 784), "float32"),
             b0: R.Tensor((128,), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(Net.linear0, (x, w0, b0), R.Tensor((1, 128), "float32"))
            lv1 = R.call_dps_packed("env.relu", (lv0,), R.Tensor((1, 128), "float32"))
            R.output(lv1)
        return lv1


def test_api_section_3_module():
    main = Net["main"]
    assert isinstance(main, Function) and [p.name for p in main.params] == ["x", "w0", "b0"]
    (block,) = main.blocks
    assert block.dataflow and block.outputs == (main.body,)
    tir_call, packed = (b.value for b in block.bindings)
    assert tir_call.op == "call_tir" and tir_call.args[0].name == "linear0"
    assert packed.op == "call_dps_packed" and packed.args[0].name == "env.relu"
    assert main.ret_type.static_shape() == (1, 128)
    again = assert_roundtrip(Net)
    assert kiln.ir.structural_equal(parse(Net.script()), Net) and structural_equal(again, Net)
    assert "lv0 = R.call_tir(Module.linear0, (x, w0, b0)" in Net.script()


def test_standalone_decorated_function_and_cls_references():
    @R.function
    def f(x: R.Tensor(("n", 4), "float32"), y: R.Tensor(("n", 4), "float32")):
        with R.dataflow():
            lv = R.call_tir(cls.g, (x, y), R.Tensor(("n", 4), "float32"))  # noqa: F821
            gv = R.add(lv, y)
            R.output(gv)
        return gv
    assert isinstance(f, Function)
    x, y = f.params
    n = x.ty.shape[0]
    assert isinstance(n, Var) and n.name == "n" and y.ty.shape[0] is n   # one variable per name
    assert f.body.ty.shape[0] is n and f.blocks[0].bindings[0].value.args[0].name == "g"
    assert_roundtrip(f)


# ---- IR built in Python -----------------------------------------------------------------------
def test_builder_function_round_trips():
    n = Var("n")
    x = GraphVar("x", TensorType((n, 4), "float32"))
    y = GraphVar("y", TensorType((n, 4), "float32"))
    fb = FunctionBuilder([x, y], {"global_symbol": "main"})
    pair = fb.emit(GraphTuple((x, y)), "pair")
    first = fb.emit(TupleGetItem(pair, 0))
    with fb.dataflow():
        s = fb.emit(ops.call("add", first, y))
        c = fb.emit(ops.call("clip", s, min=-1.0, max=6.0))
        r = fb.emit(ops.call("sum", c, axis=1, keepdims=True))
        sp = fb.emit(ops.call("split", c, indices_or_sections=2, axis=1))
        k = fb.emit(ops.call("cast", c, dtype="float16"))
        m = fb.emit(ops.call("multiply", s, Constant(np.array([1.5, -0.0, 3.0, 1e-8], "float32"))))
        out = fb.emit_output(GraphTuple((r, TupleGetItem(sp, 1), k, m)))
    shaped = fb.emit(ops.call("reshape", x, shape=(n * 2, 2)))
    f = fb.finish(GraphTuple((out, shaped)))
    text = f.script()
    assert 'def main(x: R.Tensor(("n", 4), "float32"), y: R.Tensor(("n", 4), "float32"))' in text
    assert "gv8 = R.reshape(x, shape=(n * 2, 2))" in text and "return (gv7, gv8)" in text
    assert_roundtrip(f)
    assert_roundtrip(IRModule({"main": f}))


def test_large_constants_print_as_metadata():
    x = GraphVar("x", TensorType((100,), "float32"))
    w = np.arange(100, dtype="float32")
    fb = FunctionBuilder([x])
    with fb.dataflow():
        gv = fb.emit_output(ops.call("add", x, Constant(w)))
    mod = IRModule({"main": fb.finish(gv)})
    text = mod.script()
    (key,) = metadata(mod)
    assert key.startswith("float32[100]#") and f'R.const(metadata["{key}"])' in text
    np.testing.assert_array_equal(metadata(mod)[key], w)
    assert_roundtrip(mod)                        # passes the metadata along
    with pytest.raises(ScriptError, match="is not in the text"):
        parse(text)
    # 64 elements still print inline
    small = Constant(np.ones((8, 8), "float32"))
    assert "metadata" not in repr(small) and repr(small).startswith("R.const([[1.0, 1.0")


def test_nan_constant_round_trips_through_text():
    c = Constant(np.array([float("nan"), 1.0], "float32"))
    text = H + ("    @R.function\n    def main() -> R.Tensor((2,), \"float32\"):\n"
                f"        return {c!r}")
    assert 'R.const([float("nan"), 1.0], "float32")' in text
    mod = parse(text)
    assert mod.script() == text
    np.testing.assert_array_equal(mod["main"].body.data, c.data)  # NaN == NaN here


def test_scalar_constant():
    c = Constant(np.array(0.5, "float32"))
    assert c.data.shape == () and repr(c) == 'R.const(0.5, "float32")'
    assert_roundtrip(Function((), (), c))


def test_symbolic_size_shared_between_functions():
    # legalize gives the graph function and its tensor programs the very same Var n
    n = Var("n")
    x = GraphVar("x", TensorType((n,), "float32"))
    f = Function((x,), (), ops.call("relu", x))
    y = GraphVar("y", TensorType((n,), "float32"))
    assert_roundtrip(IRModule({"a": f, "b": Function((y,), (), y)}))


def test_binding_annotation_only_when_type_differs():
    x = GraphVar("x", TensorType((4,), "float32"))
    v = GraphVar("v", TensorType(None, "float32"))
    from kiln.ir.graph import Binding, BindingBlock
    f = Function((x,), (BindingBlock((Binding(v, ops.call("relu", x)),), False),), v)
    assert 'v: R.Tensor(None, "float32") = R.relu(x)' in f.script()
    assert_roundtrip(f)


def test_operator_name_that_is_not_an_identifier():
    x = GraphVar("x", TensorType((4,), "float32"))
    call = GraphCall("my-op", (x,), {"k": 1}, TensorType((4,), "float32"))
    assert repr(call) == 'R.call_op("my-op", x, k=1)'
    odd = GraphCall("relu", (x,), {"class": 1}, x.ty)
    assert repr(odd) == 'R.relu(x, **{"class": 1})'


def test_names_do_not_clash():
    # a graph variable and a symbolic size both called n, and variables named like syntax
    n = Var("n")
    x = GraphVar("n", TensorType((n,), "float32"))
    y = GraphVar("Module", TensorType((n,), "float32"))
    f = Function((x, y), (), GraphTuple((x, y)))
    text = f.script()
    assert 'def main(n: R.Tensor(("n_1",), "float32"), Module_1: R.Tensor(("n_1",), "float32"))' in text
    assert_roundtrip(f)
    mod = IRModule({"my-main": f})                # a function name that is not an identifier
    assert '@R.function(name="my-main")\n    def my_main(' in mod.script()
    assert list(assert_roundtrip(mod).functions) == ["my-main"]


# ---- the R namespace at run time ---------------------------------------------------------------
def test_r_namespace_at_run_time():
    assert R.Tensor((1, "n"), "float32") == R.TensorSpec((1, "n"), "float32")
    assert R.Tuple(R.Tensor((2,))).fields[0].dtype == "float32"
    for fn in (R.add, R.dataflow, R.nn.conv2d, R.call_tir):
        with pytest.raises(TypeError, match="is script syntax"):
            fn(1)
    with pytest.raises(ValueError, match="unknown dtype"):
        R.Tensor((1,), "f32")


def test_reprs_of_graph_nodes():
    x = GraphVar("x", TensorType((Var("n"), 4), "float32"))
    assert repr(x.ty) == 'R.Tensor(("n", 4), "float32")'
    assert repr(TupleType((x.ty,))) == 'R.Tuple(R.Tensor(("n", 4), "float32"))'
    assert repr(ops.call("relu", x)) == "R.relu(x)"
    assert repr(GlobalVar("f")) == "Module.f"


# ---- errors ------------------------------------------------------------------------------------
FN = '@R.function\ndef main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((4, 5), "float32")):\n'
DF = "    with R.dataflow():\n"
ERRORS = [
    (DF + "        gv = R.frobnicate(x)\n        R.output(gv)\n    return gv\n", 4, "unknown operator 'frobnicate'"),
    (DF + "        gv = R.add(x, y)\n        R.output(gv)\n    return gv\n", 4, "add"),
    (DF + "        gv = R.matmul(x, y)\n        R.output(gv)\n    return gv\n", 4, "matmul"),
    (DF + "        gv = R.sum(x, axs=1)\n        R.output(gv)\n    return gv\n", 4, "unknown attribute(s) axs"),
    (DF + "        gv = R.sum(x, 1)\n        R.output(gv)\n    return gv\n", 4, "attributes are keyword arguments"),
    (DF + "        gv = R.relu(z)\n        R.output(gv)\n    return gv\n", 4, "undefined name 'z'"),
    (DF + "        lv = R.relu(x)\n        gv = R.relu(lv)\n        R.output(gv)\n    return lv\n", 7,
     "'lv' is local to the dataflow block at line 3; list it in that block's R.output"),
    (DF + "        R.output()\n        gv = R.relu(x)\n    return x\n", 4, "must be the last statement"),
    (DF + "        R.output(x)\n    return x\n", 4, "R.output takes variables bound in this dataflow block"),
    ("    R.output(x)\n    return x\n", 3, "R.output(...) ends a with R.dataflow(): block"),
    ("    gv = R.call_tir(R.ExternFunc('f'), (x,), R.Tensor((2, 3), 'float32'))\n    return gv\n", 3,
     "R.call_tir calls a tensor program"),
    ("    gv = R.call_tir(f, x, R.Tensor((2, 3), 'float32'))\n    return gv\n", 3, "undefined name 'f'"),
    ("    gv = R.call_dps_packed('f', x, R.Tensor((2, 3), 'float32'))\n    return gv\n", 3,
     "the arguments of R.call_dps_packed are a tuple"),
    ("    gv = R.call_dps_packed('f', (x,), R.Tensr((2, 3)))\n    return gv\n", 3, "expected a type R.Tensor"),
    ("    gv = x[0]\n    return gv\n", 3, "cannot take item 0"),
    ("    gv = R.const([[1, 2], [3]], 'float32')\n    return gv\n", 3, "bad constant value"),
    ("    gv = R.const(metadata['k'])\n    return gv\n", 3, "large constant 'k' is not in the text"),
    ("    gv = 1.0\n    return gv\n", 3, 'constants are R.const(value, "float32")'),
    ("    gv = foo(x)\n    return gv\n", 3, "unknown function foo"),
    ("    gv = R.relu(x)\n", 2, "does not end with return"),
    ("    return x\n    gv = R.relu(x)\n", 4, "statements after return"),
    ("    for i in range(2):\n        pass\n    return x\n", 3, "expected a binding"),
    ("    with open('f'):\n        pass\n    return x\n", 3, "expected with R.dataflow():"),
    ("    R.func_attr({'a': 1})\n    R.func_attr({'b': 1})\n    return x\n", 4, "R.func_attr(...) is given twice"),
    ("    gv = R.relu(x, k=y)\n    return gv\n", 3, "graph value 'y' cannot be an attribute"),
]


@pytest.mark.parametrize("body,line,words", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_errors_name_the_line(body, line, words):
    text = FN + body
    with pytest.raises(ScriptError) as info:
        parse(text)
    err = info.value
    assert err.lineno == line, str(err)
    assert words in err.message, str(err)


@pytest.mark.parametrize("text,line,words", [
    ('@R.function\ndef main(x):\n    return x', 2, "parameter 'x' needs a type"),
    ('@R.function\ndef main(x: R.Tensor((1, "n +"), "float32")):\n    return x', 2,
     "symbolic size 'n +' is not an expression"),
    ('@R.function\ndef main(x: R.Tensor((1.5,), "float32")):\n    return x', 2, "expected an integer expression"),
    ('@R.function\ndef main(x: R.Tensor((2,), "float32")) -> R.Tensor((3,), "float32"):\n    return x', 2,
     'does not match the type of the returned value, R.Tensor((2,), "float32")'),
    ('@R.function(fast=True)\ndef main(x: R.Tensor((2,), "float32")):\n    return x', 2, "unknown arguments ['fast']"),
    ('@kiln.script.ir_module\nclass M:\n    @R.function\n    def main(x: R.Tensor((2,), "float32")):\n'
     '        gv = R.call_tir(M.nope, (x,), R.Tensor((2,), "float32"))\n        return gv', 5,
     "module 'M' has no function 'nope'; it has main"),
    ('@kiln.script.ir_module\nclass M:\n    @R.function\n    def main(x: R.Tensor((2,), "float32")):\n'
     '        gv = R.call_tir(Other.main, (x,), R.Tensor((2,), "float32"))\n        return gv', 5,
     "module functions are named M.<function> (or cls.<function>)"),
])
def test_header_and_module_errors(text, line, words):
    with pytest.raises(ScriptError) as info:
        parse(text)
    assert info.value.lineno == line and words in info.value.message, str(info.value)


def test_decorated_errors_use_the_line_in_the_file():
    with pytest.raises(ScriptError) as info:
        @kiln.script.ir_module
        class Bad:
            @R.function
            def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((4, 5), "float32")):
                with R.dataflow():
                    gv = R.add(x, y)
                    R.output(gv)
                return gv
    here = inspect.currentframe().f_lineno
    assert info.value.lineno == here - 3 and info.value.filename == __file__
    assert "gv = R.add(x, y)" in str(info.value)


def test_parameter_names_that_are_not_identifiers_survive_a_round_trip():
    """nn modules name weights "fc1.weight": printed as fc1_weight, the real name rides in the
    "kiln.param_names" attribute, so bind_params by the original names works after parsing."""
    x = GraphVar("x", TensorType((1, 4), "float32"))
    w = GraphVar("fc1.weight", TensorType((4, 4), "float32"))
    fb = FunctionBuilder([x, w], attrs={"num_input": 1})
    with fb.dataflow():
        gv = fb.emit_output(ops.call("matmul", x, w))
    mod = IRModule({"main": fb.finish(gv)})
    text = mod.script()
    assert 'R.func_attr({"kiln.param_names": {"fc1_weight": "fc1.weight"}, "num_input": 1})' in text or \
        'R.func_attr({"num_input": 1, "kiln.param_names": {"fc1_weight": "fc1.weight"}})' in text
    back = assert_roundtrip(mod)
    assert [p.name for p in back["main"].params] == ["x", "fc1.weight"]
    assert dict(back["main"].attrs) == {"num_input": 1}
    kiln.transform.bind_params("main", {"fc1.weight": np.eye(4, dtype="float32")})(back)
