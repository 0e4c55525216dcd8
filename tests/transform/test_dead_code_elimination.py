"""dead_code_elimination: unused bindings and tensor programs nobody calls are removed."""
import kiln
from kiln.ir import FunctionBuilder, IRModule, TensorType, assert_structural_equal
from kiln.ir.graph import call_dps_packed
from kiln.script import R, T
from kiln.transform import dead_code_elimination

from transform_helpers import typed


@kiln.script.ir_module
class Before:
    @T.prim_func
    def used(A: T.Buffer((2,), "float32"), B: T.Buffer((2,), "float32")):
        for i in range(2):
            with T.block("B"):
                vi = T.axis.spatial(2, i)
                B[vi] = A[vi] + 1.0

    @T.prim_func
    def unused(A: T.Buffer((2,), "float32"), B: T.Buffer((2,), "float32")):
        for i in range(2):
            with T.block("B"):
                vi = T.axis.spatial(2, i)
                B[vi] = A[vi] * 3.0

    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            lv0 = R.add(x, x)
            lv1 = R.call_tir(Before.unused, (lv0,), R.Tensor((2,), "float32"))
            gv = R.call_tir(Before.used, (x,), R.Tensor((2,), "float32"))
            R.output(gv)
        return gv


@kiln.script.ir_module
class Expected:
    @T.prim_func
    def used(A: T.Buffer((2,), "float32"), B: T.Buffer((2,), "float32")):
        for i in range(2):
            with T.block("B"):
                vi = T.axis.spatial(2, i)
                B[vi] = A[vi] + 1.0

    @R.function
    def main(x: R.Tensor((2,), "float32")):
        with R.dataflow():
            gv = R.call_tir(Expected.used, (x,), R.Tensor((2,), "float32"))
            R.output(gv)
        return gv


def test_before_expected():
    assert_structural_equal(dead_code_elimination()(Before), Expected)


def test_unused_block_output_goes_too():
    @kiln.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((2,), "float32")):
            with R.dataflow():
                gv0 = R.relu(x)
                gv1 = R.exp(x)
                R.output(gv0, gv1)
            return gv0

    after = dead_code_elimination()(Mod)
    block = after["main"].blocks[0]
    assert [b.var.name for b in block.bindings] == ["gv0"]
    assert [v.name for v in block.outputs] == ["gv0"]


def test_effects_are_kept():
    fb = FunctionBuilder([typed("x", (2,))])
    x = fb.params[0]
    fb.emit(call_dps_packed("env.log", (x,), TensorType((2,), "float32")))   # result unused
    gv = fb.emit(kiln.ops.call("relu", x))
    mod = IRModule({"main": fb.finish(gv)})
    after = dead_code_elimination()(mod)
    assert [b.value.op for b in after["main"].bindings()] == ["call_dps_packed", "relu"]


def test_a_library_of_tensor_programs_is_kept_whole():
    lib = IRModule({"a": Before["unused"], "b": Before["used"]})
    assert sorted(dead_code_elimination()(lib).functions) == ["a", "b"]


def test_every_graph_function_is_an_entry():
    @kiln.script.ir_module
    class Two:
        @T.prim_func
        def k(A: T.Buffer((2,), "float32"), B: T.Buffer((2,), "float32")):
            for i in range(2):
                with T.block("B"):
                    vi = T.axis.spatial(2, i)
                    B[vi] = A[vi]

        @R.function
        def prefill(x: R.Tensor((2,), "float32")):
            return x

        @R.function
        def decode(x: R.Tensor((2,), "float32")):
            with R.dataflow():
                gv = R.call_tir(Two.k, (x,), R.Tensor((2,), "float32"))
                R.output(gv)
            return gv

    assert sorted(dead_code_elimination()(Two).functions) == ["decode", "k", "prefill"]
