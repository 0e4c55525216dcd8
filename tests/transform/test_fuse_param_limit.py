"""fuse_ops never builds a kernel with more parameters than the runtime loads (256)."""
from kiln import ops
from kiln.ir.graph import GraphVar, TensorType
from kiln.ir.graph_builder import FunctionBuilder
from kiln.transform.fuse_ops import MAX_KERNEL_PARAMS, _num_params, find_groups


def _concat_tree(leaves: int, fan_in: int):
    """``leaves`` (1, 4) inputs concatenated in groups of ``fan_in``, then the groups."""
    xs = [GraphVar(f"x{i}", TensorType((1, 4), "float32")) for i in range(leaves)]
    fb = FunctionBuilder(xs)
    with fb.dataflow():
        parts = [fb.emit(ops.call("concat", *xs[k:k + fan_in], axis=0)) for k in range(0, leaves, fan_in)]
        out = fb.emit_output(ops.call("concat", *parts, axis=0))
    return fb.finish(out)


def test_groups_stop_at_the_kernel_parameter_limit():
    groups = find_groups(_concat_tree(300, 100))   # fused whole: 300 inputs + 1 output
    assert all(_num_params(g) <= MAX_KERNEL_PARAMS for g in groups)
    assert max(len(g) for g in groups) == 3        # the outer concat still takes two inner ones
    assert len(find_groups(_concat_tree(200, 100))[-1]) == 3   # under the limit: one kernel
