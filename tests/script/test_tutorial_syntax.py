"""The spellings of the tutorials users bring (SEED_FLOWS.md): T.handle + T.match_buffer,
T.Buffer[...] subscripts, T.func_attr, `cls = Module`, out_sinfo= (one output or a list).
Each parses to the same IR as Kiln's canonical form, which is what prints back."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.graph import TensorType, TupleType
from kiln.script import ScriptError, parse

CANONICAL = '''
@T.prim_func
def relu(X: T.Buffer((1, n), "float32"), Y: T.Buffer((1, n), "float32")):
    n = T.int64()
    T.func_attr({"global_symbol": "relu", "tir.noalias": True})
    for i, j in T.grid(1, n):
        with T.block("Y"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = T.max(X[vi, vj], T.float32(0))
'''

HANDLES = '''
@T.prim_func
def relu(x: T.handle, y: T.handle):
    T.func_attr({"global_symbol": "relu", "tir.noalias": True})
    n = T.int64()
    X = T.match_buffer(x, (1, n), "float32")
    Y = T.match_buffer(y, [1, n], dtype="float32")
    for i, j in T.grid(1, n):
        with T.block("Y"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = T.max(X[vi, vj], T.float32(0))
'''


def test_handles_with_match_buffer_are_the_canonical_buffers():
    func = parse(HANDLES)
    kiln.ir.assert_structural_equal(func, parse(CANONICAL))
    assert [p.name for p in func.params] == ["X", "Y"]
    text = kiln.ir.printer.to_text(func)
    assert 'def relu(X: T.Buffer((1, n), "float32"), Y: T.Buffer((1, n), "float32")):' in text
    kiln.script.assert_roundtrip(func)


def test_handle_order_follows_the_parameters_not_the_match_statements():
    text = HANDLES.replace('    X = T.match_buffer(x, (1, n), "float32")\n', "").replace(
        '    n = T.int64()\n', '    n = T.int64()\n    X = T.match_buffer(x, (1, n), "float32")\n', 1)
    swapped = text.replace('    Y = T.match_buffer(y, [1, n], dtype="float32")\n', "").replace(
        "    n = T.int64()\n", '    n = T.int64()\n    Y = T.match_buffer(y, [1, n], dtype="float32")\n', 1)
    assert [p.name for p in parse(swapped).params] == ["X", "Y"]


@pytest.mark.parametrize("annotation", ['T.Buffer[8, "float32"]', 'T.Buffer[(8,), "float32"]',
                                        'T.Buffer[[8], "float32"]'])
def test_old_subscript_buffer_spelling(annotation):
    old = parse(f'@T.prim_func\ndef f(A: {annotation}, B: T.Buffer((8,), "float32")):\n'
                "    for i in range(8):\n        with T.block('B'):\n"
                "            vi = T.axis.spatial(8, i)\n            B[vi] = A[vi] + 1.0\n")
    new = parse(kiln.ir.printer.to_text(old))
    kiln.ir.assert_structural_equal(old, new)
    assert old.params[0].shape[0].value == 8 and old.params[0].dtype == "float32"


def test_subscript_spelling_works_in_decorated_code(tmp_path):
    # Python evaluates the annotations when it defines the function: T.Buffer[...] must work
    # at run time too. (In a file: the decorator reads the source; and linters take strings
    # inside annotation subscripts for forward references.)
    import runpy
    path = tmp_path / "old_spelling.py"
    path.write_text("from kiln.script import T\n\n@T.prim_func\n"
                    'def f(A: T.Buffer[(4, 2), "int32"], B: T.Buffer[8, "int32"]):\n'
                    "    for i in range(8):\n        with T.block('B'):\n"
                    "            vi = T.axis.spatial(8, i)\n            B[vi] = A[vi // 2, vi % 2]\n")
    f = runpy.run_path(str(path))["f"]
    assert [tuple(d.value for d in p.shape) for p in f.params] == [(4, 2), (8,)]
    from kiln.script import T
    assert T.Buffer[8, "int32"] == T.Buffer((8,), "int32")


@pytest.mark.parametrize("body, line, words", [
    ("    pass\n", 2, "parameter 'a' is a T.handle without a buffer"),
    ('    A = T.match_buffer(b, (8,), "float32")\n', 3, "first argument is a T.handle parameter (a), got b"),
    ('    A = T.match_buffer(a, (8,), "float32")\n    B = T.match_buffer(a, (8,), "float32")\n', 4,
     "parameter 'a' is matched to a buffer twice"),
    ('    A = T.match_buffer(a, (8,), "float32", offset_factor=1)\n', 3, "unexpected keyword 'offset_factor'"),
    ('    A = T.match_buffer(a, (8,), "float32")\n    for i in range(8):\n'
     '        C = T.match_buffer(a, (8,), "float32")\n', 5, "belongs at the top of the function body"),
])
def test_match_buffer_errors(body, line, words):
    with pytest.raises(ScriptError) as e:
        parse("@T.prim_func\ndef f(a: T.handle):\n" + body)
    assert e.value.lineno == line and words in e.value.message, str(e.value)


GRAPH = '''
@kiln.script.ir_module
class Mod:
    @T.prim_func
    def split(X: T.Buffer((4,), "float32"), L: T.Buffer((2,), "float32"), H: T.Buffer((2,), "float32")):
        for i in range(2):
            with T.block("L"):
                vi = T.axis.spatial(2, i)
                L[vi] = X[vi]
        for i in range(2):
            with T.block("H"):
                vi = T.axis.spatial(2, i)
                H[vi] = X[vi + 2]

    @R.function
    def main(x: R.Tensor((4,), "float32")):
        cls = Mod
        with R.dataflow():
            lh = R.call_tir(cls.split, (x,), out_sinfo=[R.Tensor((2,), dtype="float32"),
                                                        R.Tensor((2,), dtype="float32")])
            lo = lh[0]
            s = R.call_dps_packed("test.swap_add", (lo, lh[1]), out_sinfo=[R.Tensor((2,), "float32"),
                                                                          R.Tensor((2,), "float32")])
            one = R.call_dps_packed("test.double", (x,), out_sinfo=[R.Tensor((4,), "float32")])
            R.output(s, one)
        return (s[0], s[1], one)
'''


def test_cls_alias_and_out_sinfo_lists_parse_to_the_canonical_form():
    mod = parse(GRAPH)
    calls = {b.var.name: b.value for blk in mod["main"].blocks for b in blk.bindings}
    assert isinstance(calls["lh"].ty, TupleType) and len(calls["lh"].ty.fields) == 2
    assert isinstance(calls["one"].ty, TensorType)          # a one-item list is one output
    text = mod.script()
    assert "cls" not in text and "out_sinfo" not in text
    assert "R.call_tir(Module.split, (x,), R.Tuple(" in text
    kiln.script.assert_roundtrip(mod)
    positional = parse(GRAPH.replace("out_sinfo=", "").replace("        cls = Mod\n", "")
                       .replace("cls.split", "Mod.split"))
    kiln.ir.assert_structural_equal(positional, mod)


def test_several_outputs_run_through_the_vm():
    @kiln.register_func("test.swap_add", override=True)
    def swap_add(a, b, out0, out1):
        np.add(np.from_dlpack(a), np.from_dlpack(b), out=np.from_dlpack(out0))
        np.subtract(np.from_dlpack(a), np.from_dlpack(b), out=np.from_dlpack(out1))

    @kiln.register_func("test.double", override=True)
    def double(x, out):
        np.multiply(np.from_dlpack(x), 2, out=np.from_dlpack(out))

    vm = kiln.VirtualMachine(kiln.compile(parse(GRAPH), target="llvm"), kiln.cpu())
    x = np.array([1, 2, 10, 20], "float32")
    s0, s1, one = vm["main"](x)
    np.testing.assert_array_equal(s0.numpy(), [11, 22])
    np.testing.assert_array_equal(s1.numpy(), [-9, -18])
    np.testing.assert_array_equal(one.numpy(), x * 2)


@pytest.mark.parametrize("call, words", [
    ('R.call_tir(Mod.split, (x,))', "takes the function, its argument tuple and the output type"),
    ('R.call_dps_packed("f", (x,), out_sinfo=[])', "out_sinfo lists at least one output type"),
    ('R.call_tir(other.split, (x,), R.Tensor((2,), "float32"))', "module functions are named Mod.<function>"),
])
def test_call_errors(call, words):
    text = ('@kiln.script.ir_module\nclass Mod:\n    @R.function\n    def main(x: R.Tensor((4,), "float32")):\n'
            f'        y = {call}\n        return y\n')
    with pytest.raises(ScriptError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]").replace(".", r"\.")):
        parse(text)
