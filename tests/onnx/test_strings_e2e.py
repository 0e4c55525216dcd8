"""String tensors through the whole compiler (docs/strings.md): a model mixing string and numeric
operators, compiled and run on the VM, checked against onnxruntime; a string output's DLPack
export refused; a model with string operators whose functions are not registered (the
string library absent) refused at init with a message naming the function."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import kiln  # noqa: E402
from kiln._ffi import lib  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402


def _mixed_model():
    """z = float(x == "cat") + y; w = x ++ "!"; c = LabelEncoder(x) (string keys -> int64) * 10;
    (StringNormalizer and StringSplit, whose outputs are data-sized, are in the node tests;
    onnxruntime's StringNormalizer needs an installed en_US.UTF-8 locale.)"""
    nodes = [
        helper.make_node("Constant", [], ["cat"], value=helper.make_tensor("cat", TensorProto.STRING, [], [b"cat"])),
        helper.make_node("Equal", ["x", "cat"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["eqf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["eqf", "y"], ["z"]),
        helper.make_node("Constant", [], ["bang"], value=helper.make_tensor("bang", TensorProto.STRING, [1], [b"!"])),
        helper.make_node("StringConcat", ["x", "bang"], ["w"]),
        helper.make_node("LabelEncoder", ["x"], ["code"], domain="ai.onnx.ml", keys_strings=["cat", "dog", "émeu"],
                         values_int64s=[1, 2, 3], default_int64=-1),
        helper.make_node("Constant", [], ["ten"], value=helper.make_tensor("ten", TensorProto.INT64, [], [10])),
        helper.make_node("Mul", ["code", "ten"], ["c"]),
    ]
    graph = helper.make_graph(
        nodes, "mixed",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [4]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("w", TensorProto.STRING, [4]),
         helper.make_tensor_value_info("c", TensorProto.INT64, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 2)])


def _vm(model):
    mod, params = from_onnx(model)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    return kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())


X = np.array(["cat", "dog", "émeu", "Cat"], dtype=object)
Y = np.array([0.5, 1.5, -2.0, 4.0], dtype=np.float32)


def test_mixed_string_and_numeric_model_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = _mixed_model()
    z, w, c = _vm(model)["main"](X, Y)
    ez, ew, ec = ort.InferenceSession(model.SerializeToString(),
                                          providers=["CPUExecutionProvider"]).run(None, {"x": X, "y": Y})
    np.testing.assert_allclose(z.numpy(), ez, rtol=0, atol=0)
    np.testing.assert_array_equal(c.numpy(), ec)
    assert w.dtype == "string" and w.numpy().tolist() == list(ew) == ["cat!", "dog!", "émeu!", "Cat!"]


def test_string_output_has_no_dlpack_form():
    w = _vm(_mixed_model())["main"](X, Y)[1]
    with pytest.raises(BufferError, match="string tensors have no DLPack form; use .numpy()"):
        w.__dlpack__()
    with pytest.raises(BufferError, match="no DLPack form"):
        np.from_dlpack(w)
    with pytest.raises(BufferError, match="no numpy view"):
        w.numpy(copy=False)


def test_string_argument_is_checked_like_any_argument():
    vm = _vm(_mixed_model())
    with pytest.raises(kiln.KilnError, match=r"argument 0 'x' expected shape \(4,\), got \(3,\)"):
        vm["main"](X[:3], Y)
    # The core runtime names the string dtype by its DLPack form (opaque handle, 128 bits).
    with pytest.raises(kiln.KilnError, match="argument 0 'x' expected dtype handle128, got float32"):
        vm["main"](Y, Y)
    with pytest.raises(TypeError, match="element 1 is bytes"):
        vm["main"](np.array(["a", b"b", "c", "d"], dtype=object), Y)


def test_missing_string_library_is_refused_at_init():
    """The functions libkiln_strings registers (kiln_strings_register) are what a C program
    without the library lacks: taking one away makes init name it."""
    ex = kiln.compile(kiln.get_pipeline("default")(from_onnx(_mixed_model())[0]), "llvm")
    assert lib.kiln_unregister_function(b"kiln_strings.equal") == 0
    try:
        with pytest.raises(kiln.KilnError, match="init: external function 'kiln_strings.equal' is not registered"):
            kiln.VirtualMachine(ex, kiln.cpu())
    finally:
        assert lib.kiln_strings_register() == 0
    assert kiln.VirtualMachine(ex, kiln.cpu())["main"](X, Y)[2].numpy().tolist() == [10, 20, 30, -10]


def test_string_model_from_c_with_and_without_the_string_library(runtime_make, tmp_path):
    """strings_model_test.c: the exported model run by a C program over libkiln_runtime.so; init
    fails naming 'kiln_strings.*' until it loads libkiln_strings.so and calls
    kiln_strings_register, then the outputs are checked (Equal and StringConcat on UTF-8)."""
    import pathlib
    import subprocess
    from string_models import equal_and_concat_model
    model = equal_and_concat_model()
    ex = kiln.compile(kiln.get_pipeline("default")(from_onnx(model)[0]), "llvm")
    ex.export_library(tmp_path / "model.so")
    runtime_make("strings", copy={"libkiln_strings.so": tmp_path / "libkiln_strings.so",
                                  "libkiln_runtime.so": tmp_path / "libkiln_runtime.so"})
    here = pathlib.Path(__file__).resolve().parent
    exe = tmp_path / "strings_model_test"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1",
                    f"-I{here.parents[1] / 'runtime_c' / 'include'}", str(here / "strings_model_test.c"),
                    f"-L{tmp_path}", "-lkiln_runtime", f"-Wl,-rpath,{tmp_path}", "-ldl", "-o", str(exe)],
                   check=True)
    run = subprocess.run([str(exe), str(tmp_path / "model.so"), str(tmp_path / "libkiln_strings.so")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ALL OK", run.stdout + run.stderr


def _chained_model():
    """StringNormalizer (its length depends on the data) feeding StringSplit (its width too)."""
    nodes = [helper.make_node("StringNormalizer", ["x"], ["n"], case_change_action="LOWER", stopwords=["the"]),
             helper.make_node("StringSplit", ["n"], ["t", "c"], delimiter="a", maxsplit=1)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.STRING, [5])],
                              [helper.make_tensor_value_info("t", TensorProto.STRING, None),
                               helper.make_tensor_value_info("c", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_data_sized_outputs_chained_match_the_onnx_reference():
    from onnx.reference import ReferenceEvaluator
    model = _chained_model()
    x = np.array(["BANANA", "The", "xyz", "the", "Alpha"], dtype=object)
    t, c = _vm(model)["main"](x)
    et, ec = ReferenceEvaluator(model).run(None, {"x": x})
    assert t.numpy().tolist() == et.tolist() and t.shape == et.shape == (3, 2)
    np.testing.assert_array_equal(c.numpy(), ec)


@pytest.mark.parametrize("make", [_mixed_model, _chained_model])
def test_string_module_prints_and_parses_back(make):
    from kiln.ir.structural import structural_equal
    mod, _ = from_onnx(make())
    text = mod.script()
    assert "R.call_packed(" in text and '"string"' in text
    assert structural_equal(kiln.script.parse(text), mod)
