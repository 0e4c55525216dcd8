"""eliminate_common_subexpr: identical pure calls in a block are bound once."""
import numpy as np

import kiln
from kiln.ir import FunctionBuilder, IRModule, TensorType, assert_structural_equal
from kiln.ir.graph import Constant, call_dps_packed
from kiln.script import R
from kiln.transform import eliminate_common_subexpr

from transform_helpers import typed


@kiln.script.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            lv0 = R.add(x, y)
            lv1 = R.add(x, y)
            lv2 = R.add(y, x)
            gv = R.multiply(lv0, lv1)
            gv1 = R.multiply(gv, lv2)
            R.output(gv1)
        return gv1


@kiln.script.ir_module
class Expected:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            lv0 = R.add(x, y)
            lv2 = R.add(y, x)
            gv = R.multiply(lv0, lv0)
            gv1 = R.multiply(gv, lv2)
            R.output(gv1)
        return gv1


def test_before_expected():
    assert_structural_equal(eliminate_common_subexpr()(Before), Expected)


def test_attributes_and_constants_matter():
    x = typed("x", (2, 3))
    c1, c2 = Constant(np.ones(3, "float32")), Constant(np.ones(3, "float32"))
    c3 = Constant(np.zeros(3, "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        outs = [fb.emit_output(kiln.ops.call("sum", x, axis=0)),
                fb.emit_output(kiln.ops.call("sum", x, axis=1)),
                fb.emit_output(kiln.ops.call("sum", x, axis=0)),
                fb.emit_output(kiln.ops.call("add", x, c1)),
                fb.emit_output(kiln.ops.call("add", x, c2)),    # equal constant: merged
                fb.emit_output(kiln.ops.call("add", x, c3))]
    mod = IRModule({"main": fb.finish(kiln.ir.GraphTuple(tuple(outs)))})
    after = eliminate_common_subexpr()(mod)
    left = [(b.value.op, dict(b.value.attrs)) for b in after["main"].bindings()]
    assert left == [("sum", {"axis": 0}), ("sum", {"axis": 1}), ("add", {}), ("add", {})]
    ret = after["main"].body.fields
    assert ret[0] is ret[2] and ret[3] is ret[4] and ret[3] is not ret[5]


def test_not_across_blocks_and_not_effects():
    x = typed("x", (2,))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        a = fb.emit_output(kiln.ops.call("relu", x))
    b = fb.emit(kiln.ops.call("relu", x))            # another block: kept
    t = TensorType((2,), "float32")
    e1 = fb.emit(call_dps_packed("env.f", (x,), t))
    e2 = fb.emit(call_dps_packed("env.f", (x,), t))  # may have effects: kept
    out = fb.emit(kiln.ops.call("add", a, b))
    mod = IRModule({"main": fb.finish(kiln.ir.GraphTuple((out, e1, e2)))})
    after = eliminate_common_subexpr()(mod)
    assert len(list(after["main"].bindings())) == 5
