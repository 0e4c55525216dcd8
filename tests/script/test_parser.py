"""Parsing what users write: the decorators, the API.md section 2 block, literal typing, the
conveniences the printer never emits (omitted reads/writes, +=, chained comparisons, &/|/~,
x if c else y, builtin min/max), and that parsed programs compute the right thing."""
from __future__ import annotations  # lets T.Buffer((n, 4)) use a size declared in the body

import textwrap

import numpy as np
import pytest

import kiln
from kiln.ir import (BufferStore, Call, FloatImm, IRModule, IntImm, Max, Min, PrimFunc, Select,
                     structural_equal)
from kiln.ir.evaluator import evaluate
from kiln.script import T, assert_roundtrip, parse


@kiln.script.ir_module
class MyModule:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] + 1.0


API_TEXT = '''# from kiln.script import T

@kiln.script.ir_module
class Module:
    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + T.float32(1)'''
FUNC_TEXT = textwrap.dedent(API_TEXT.split("class Module:\n")[1])


def test_api_md_section_2_block():
    assert isinstance(MyModule, IRModule)
    assert MyModule.script() == API_TEXT
    assert kiln.ir.structural_equal(kiln.script.parse(MyModule.script()), MyModule)
    assert_roundtrip(MyModule)
    a, b = np.arange(8, dtype="float32"), np.empty(8, "float32")
    evaluate(MyModule, a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_show_prints_the_script(capsys):
    MyModule.show()
    assert capsys.readouterr().out == API_TEXT + "\n"
    assert repr(MyModule["main"]) == "# from kiln.script import T\n\n" + FUNC_TEXT


@T.prim_func
def standalone(A: T.Buffer((n, 4), "float16"), B: T.Buffer((n,), "float16")):
    n = T.int32()
    for i, k in T.grid(n, 4):
        with T.block("rowsum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = 0.0
            B[vi] += A[vi, vk]


def test_prim_func_decorator_with_symbolic_size_and_inferred_regions():
    assert isinstance(standalone, PrimFunc)
    text = standalone.script()
    assert "n = T.int32()" in text
    assert "T.reads(B[vi], A[vi, vk])" in text and "T.writes(B[vi])" in text
    assert "B[vi] = T.float16(0)" in text       # 0.0 stored into a float16 buffer is float16
    assert_roundtrip(standalone)
    a = np.random.default_rng(0).standard_normal((5, 4)).astype("float16")
    b = np.empty(5, "float16")
    evaluate(standalone, a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-2)


def test_decorators_inside_a_function_and_module_with_two_functions():
    @kiln.script.ir_module
    class Two:
        @T.prim_func
        def first(A: T.Buffer((4,), "int32")):
            for i in range(4):
                with T.block("A"):
                    vi = T.axis.spatial(4, i)
                    A[vi] = vi * 2

        @T.prim_func(root=False)
        def second(A: T.Buffer((4,), "int32")):
            for i in T.parallel(4):
                A[i] = A[i] + 1

    @T.prim_func
    def local(A: T.Buffer((2,), "float32")):
        A[0] = 1.0

    assert sorted(Two.functions) == ["first", "second"]
    assert not isinstance(Two["second"].body, kiln.ir.BlockRealize)
    assert_roundtrip(Two)
    assert isinstance(local, PrimFunc)
    a = np.zeros(4, "int32")
    evaluate(Two["first"], a)
    evaluate(Two["second"], a)
    np.testing.assert_array_equal(a, [1, 3, 5, 7])


def _store_value(text):
    func = parse(text)
    store = func.body.block.body
    while not isinstance(store, BufferStore):
        store = store.body if hasattr(store, "body") else store.block.body
    return store.value


def _func(dtype, value_src, extra=""):
    return (f'@T.prim_func\ndef f(A: T.Buffer((4,), "{dtype}"), I: T.Buffer((4,), "int64")):\n'
            f"{extra}    A[0] = {value_src}\n")


def test_literals_take_the_type_of_the_other_operand():
    v = _store_value(_func("float16", "A[1] + 1.0"))
    assert v.dtype == "float16" and v.b.dtype == "float16"
    v = _store_value(_func("float32", "T.Cast('float32', I[0] * 3)"))
    assert v.value.b.dtype == "int64"
    v = _store_value(_func("float32", "1.5"))
    assert isinstance(v, FloatImm) and v.dtype == "float32"
    v = _store_value(_func("int64", "2"))
    assert isinstance(v, IntImm) and v.dtype == "int64"
    v = _store_value(_func("float32", "T.float32(1) + 2 * 3"))   # 2 * 3 stays a product of ints
    assert v.b.dtype == "float32" and type(v.b).__name__ == "Cast"
    v = _store_value(_func("float32", "A[0] + I[0]"))              # int meeting float: cast
    assert v.dtype == "float32" and type(v.b).__name__ == "Cast"


def test_convenience_forms_parse_to_plain_nodes():
    v = _store_value(_func("float32", "A[1] if 0 <= A[2] < 1 else min(A[3], 2.0)"))
    assert isinstance(v, Select) and isinstance(v.false_value, Min)
    assert type(v.condition).__name__ == "And"
    v = _store_value(_func("bool", "~A[1] & A[2] | (A[3] == True)"))
    assert type(v).__name__ == "Or"
    v = _store_value(_func("float32", "max(T.exp(A[1]), -A[2])"))
    assert isinstance(v, Max) and isinstance(v.a, Call)
    func = parse(_func("float32", "A[0]").replace("A[0] = A[0]", "A[0] += 2.0\n    A[1] *= A[0]"))
    assert "A[0] = A[0] + T.float32(2)" in func.script()


def test_user_regions_are_kept_and_missing_ones_inferred():
    text = '''
@T.prim_func
def f(A: T.Buffer((16,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.block("B"):
            vi = T.axis.spatial(4, i)
            T.reads(A[0:16])
            for k in range(4):
                B[vi] = B[vi] + A[vi * 4 + k]
'''
    out = parse(text).script()
    assert "T.reads(A[0:16])" in out and "T.writes(B[vi])" in out
    out = parse(text.replace("T.reads(A[0:16])", "T.writes(B)")).script()
    assert "T.reads(B[vi], A[vi * 4:vi * 4 + 4])" in out and "T.writes(B[0:4])" in out


def test_runtime_T_builders_and_markers():
    x = kiln.ir.Var("x", "float32")
    assert structural_equal(T.exp(x), Call("exp", (x,)))
    assert T.float32(1).dtype == "float32" and T.int64(3).dtype == "int64" and T.bool(1).value == 1
    assert T.min(x, 1).b.dtype == "float32"
    assert T.Select(x > 0.0, x, 0).false_value.dtype == "float32"
    assert T.Cast("int32", x).dtype == "int32"
    assert T.Buffer((8, 4), "float32").shape == (8, 4)
    with pytest.raises(TypeError, match="script syntax"):
        T.block("B")
    with pytest.raises(TypeError, match="script syntax"):
        T.axis.spatial(8, 0)
    with pytest.raises(TypeError):
        kiln.script.ir_module(lambda: None)


def test_several_top_level_functions_make_a_module():
    mod = parse(FUNC_TEXT + "\n\n" + FUNC_TEXT.replace("def main", "def other"))
    assert isinstance(mod, IRModule) and sorted(mod.functions) == ["main", "other"]
