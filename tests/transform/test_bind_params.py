"""bind_params: named parameters become constants and leave the signature."""
import numpy as np
import pytest

import kiln
from kiln.ir import Var, assert_structural_equal
from kiln.script import R
from kiln.transform import BindParamsError, bind_params

from transform_helpers import AVX2_CTX, graph_module, reference, run_vm, typed


@kiln.script.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((2,), "float32"), w: R.Tensor((2,), "float32")):
        with R.dataflow():
            lv0 = R.multiply(x, w)
            gv = R.add(lv0, w)
            R.output(gv)
        return gv


@kiln.script.ir_module
class Expected:
    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            lv0 = R.multiply(x, R.const([1.5, -2.0], "float32"))
            gv = R.add(lv0, R.const([1.5, -2.0], "float32"))
            R.output(gv)
        return gv


W = np.array([1.5, -2.0], "float32")


def test_before_expected():
    assert_structural_equal(bind_params("main", {"w": W})(Before), Expected)


def test_pure_and_runs():
    before_text = Before.script()
    bound = bind_params("main", {"w": W})(Before)
    assert Before.script() == before_text            # the input module is unchanged
    x = np.array([3.0, 4.0], "float32")
    np.testing.assert_allclose(run_vm(kiln.get_pipeline("zero", AVX2_CTX)(bound), [x]), x * W + W)


def test_accepts_ndarray():
    bound = bind_params("main", {"w": kiln.nd.array(W)})(Before)
    assert_structural_equal(bound, Expected)


def test_returning_a_parameter_directly():
    x, w = typed("x", (2,)), typed("w", (2,))
    from kiln.ir import FunctionBuilder, IRModule
    fb = FunctionBuilder([x, w])
    mod = IRModule({"main": fb.finish(w)})
    bound = bind_params("main", {"w": W})(mod)
    assert len(bound["main"].params) == 1
    np.testing.assert_array_equal(bound["main"].body.data, W)


def test_unknown_parameter_lists_the_parameters():
    with pytest.raises(BindParamsError, match=r"has no parameter 'w9'; its parameters are x, w"):
        bind_params("main", {"w9": W})(Before)


def test_unknown_function():
    with pytest.raises(BindParamsError, match="no function 'forward'"):
        bind_params("forward", {"w": W})(Before)


def test_dtype_mismatch_names_param_expected_and_given():
    with pytest.raises(BindParamsError, match=r"parameter 'w' of 'main' expects float32\(2,\), "
                                              r"got float64\(2,\) \(dtype differs\)"):
        bind_params("main", {"w": W.astype("float64")})(Before)


def test_shape_mismatch():
    with pytest.raises(BindParamsError, match=r"expects float32\(2,\), got float32\(3,\) "
                                              r"\(dimension 0 differs\)"):
        bind_params("main", {"w": np.zeros(3, "float32")})(Before)
    with pytest.raises(BindParamsError, match=r"rank differs"):
        bind_params("main", {"w": np.zeros((1, 2), "float32")})(Before)


def test_symbolic_dimension_takes_the_array_size():
    n = Var("n", "int64")
    x, w = typed("x", (n, 4)), typed("w", (n, 4))
    mod = graph_module([x, w], lambda emit, x, w: kiln.ops.call("add", x, w))
    w_np = np.ones((3, 4), "float32")
    bound = bind_params("main", {"w": w_np})(mod)
    assert bound["main"].params[0].ty.static_shape() == (3, 4)
    assert bound["main"].ret_type.static_shape() == (3, 4)
    x_np = np.arange(12, dtype="float32").reshape(3, 4)
    np.testing.assert_allclose(reference(bound, [x_np]), x_np + 1)


def test_symbolic_dimension_must_agree_across_arrays():
    n = Var("n", "int64")
    a, b, x = typed("a", (n,)), typed("b", (n,)), typed("x", (n,))
    mod = graph_module([x, a, b], lambda emit, x, a, b: kiln.ops.call("add", emit("add", x, a), b))
    with pytest.raises(BindParamsError, match=r"parameter 'b' of 'main' expects float32\(n,\), got "
                                              r"float32\(4,\) \(dimension 0 is n, which an earlier "
                                              r"array set to 3\)"):
        bind_params("main", {"a": np.zeros(3, "float32"), "b": np.zeros(4, "float32")})(mod)
