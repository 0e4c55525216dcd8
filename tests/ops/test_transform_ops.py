"""Data-movement operators (kiln/ops/transform.py) against numpy, through check_op: the shape
rule, the te definition (reference evaluator and compiled) and the numpy reference agree."""
import numpy as np
import pytest

from kiln import ops
from kiln.ir import BufferLoad, collect
from kiln.ir.graph import TupleType



# ---- reshape / flatten / squeeze / expand_dims ---------------------------------------------

@pytest.mark.parametrize("shape,target", [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)), ((2, 3, 4), (4, -1, 2)), ((6,), (1, 2, 1, 3)),
    ((2, 3, 4), (2, 12)), ((1,), ()), ((), (1, 1)), ((0, 3), (3, 0)), ((0, 3), (-1, 3)),
])
def test_reshape(check_op, shape, target, rand):
    check_op("reshape", [rand(shape)], {"shape": target})


def test_reshape_int_dtype(check_op, rand):
    check_op("reshape", [rand((3, 4), "int64", -100, 100)], {"shape": (2, 2, 3)})


def test_reshape_errors(op_error, typed):
    with op_error("reshape: cannot reshape (2, 3) to (4, -1)"):
        ops.call("reshape", typed((2, 3)), shape=(4, -1))
    with op_error("reshape: cannot reshape (2, 3) to (4, 2) (the element counts differ)"):
        ops.call("reshape", typed((2, 3)), shape=(4, 2))
    with op_error("only one dimension may be -1"):
        ops.call("reshape", typed((2, 3)), shape=(-1, -1))
    with op_error("reshape: attribute shape= is required"):
        ops.call("reshape", typed((2, 3)))
    with op_error("reshape: unknown attribute(s) newshape"):
        ops.call("reshape", typed((2, 3)), newshape=(6,))


def test_reshape_symbolic(check_op_symbolic):
    check_op_symbolic("reshape", [("n", 3, 4)], attrs={"shape": (-1, 12)}, expect_shape=("n", 12))


def test_reshape_symbolic_rules(typed):
    from kiln.ir import Var
    from kiln.ops.common import dims_equal
    n = Var("n", "int64")
    ty = ops.call("reshape", typed((n, 6)), shape=(-1, 3)).ty
    assert dims_equal(ty.shape[0], n * 2)
    ty = ops.call("reshape", typed((n, 6)), shape=(n, 2, -1)).ty
    assert ty.static_shape() is None and ty.shape[2].value == 3
    with pytest.raises(ops.OpError, match="cannot infer the -1"):
        ops.call("reshape", typed((n, 6)), shape=(-1, 4))
    with pytest.raises(ops.OpError, match="cannot prove"):
        ops.call("reshape", typed((n, 6)), shape=(6, 6))


@pytest.mark.parametrize("shape,start,end", [((2, 3, 4), 1, -1), ((2, 3, 4, 5), 1, 2), ((2, 3), 0, -1),
                                             ((2, 3, 4), -2, -1), ((5,), 0, 0), ((), 0, -1)])
def test_flatten(check_op, shape, start, end, rand):
    check_op("flatten", [rand(shape)], {"start_dim": start, "end_dim": end})


def test_flatten_symbolic(check_op_symbolic):
    check_op_symbolic("flatten", [("n", 3, 2)], expect_shape=("n", 6))


def test_flatten_error(op_error, typed):
    with op_error("flatten: start_dim 2 comes after end_dim 1 for (2, 3, 4)"):
        ops.call("flatten", typed((2, 3, 4)), start_dim=2, end_dim=1)


@pytest.mark.parametrize("shape,axis", [((1, 3, 1, 2), None), ((1, 3, 1, 2), 0), ((1, 3, 1, 2), -2),
                                        ((1, 3, 1, 2), (0, 2)), ((1, 1), None)])
def test_squeeze(check_op, shape, axis, rand):
    check_op("squeeze", [rand(shape)], {"axis": axis})


def test_squeeze_errors(op_error, typed):
    with op_error("squeeze: cannot squeeze axis 1 of (1, 3): its size is 3, not 1"):
        ops.call("squeeze", typed((1, 3)), axis=1)
    with op_error("squeeze: axis 2 is out of range for a 2-D input"):
        ops.call("squeeze", typed((1, 3)), axis=2)


@pytest.mark.parametrize("shape,axis", [((2, 3), 0), ((2, 3), -1), ((2, 3), (0, 3)), ((2, 3), (-1, 1)),
                                        ((), 0)])
def test_expand_dims(check_op, shape, axis, rand):
    check_op("expand_dims", [rand(shape)], {"axis": axis})


def test_expand_dims_errors(op_error, typed):
    with op_error("expand_dims: axis (0, 0) repeats an axis"):
        ops.call("expand_dims", typed((2, 3)), axis=(0, 0))
    with op_error("expand_dims: axis 4 is out of range for a 4-D input"):
        ops.call("expand_dims", typed((2, 3)), axis=(4, 0))


# ---- permute_dims / broadcast_to -----------------------------------------------------------

@pytest.mark.parametrize("shape,axes", [((2, 3), None), ((2, 3, 4), (1, 0, 2)), ((2, 3, 4), (-1, 0, 1)),
                                        ((2, 1, 3, 2), (3, 2, 1, 0)), ((5,), (0,))])
def test_permute_dims(check_op, shape, axes, rand):
    check_op("permute_dims", [rand(shape)], {"axes": axes})


def test_permute_dims_errors(op_error, typed):
    with op_error("permute_dims: axes (0, 0) is not a permutation of the 2 axes of (2, 3)"):
        ops.call("permute_dims", typed((2, 3)), axes=(0, 0))
    with op_error("permute_dims: axes entry 2 is out of range"):
        ops.call("permute_dims", typed((2, 3)), axes=(0, 2))


def test_permute_dims_symbolic(check_op_symbolic):
    check_op_symbolic("permute_dims", [("n", 3, 2)], attrs={"axes": (2, 0, 1)}, expect_shape=(2, "n", 3))


@pytest.mark.parametrize("shape,target", [((3,), (2, 3)), ((2, 1), (2, 4)), ((1, 1), (3, 2, 2)), ((), (2, 2)),
                                          ((2, 3), (2, 3))])
def test_broadcast_to(check_op, shape, target, rand):
    check_op("broadcast_to", [rand(shape)], {"shape": target})


def test_broadcast_to_errors(op_error, typed):
    with op_error("broadcast_to: cannot broadcast (2, 3) to (3, 3)"):
        ops.call("broadcast_to", typed((2, 3)), shape=(3, 3))
    with op_error("broadcast_to: cannot broadcast (2, 3) to (3,)"):
        ops.call("broadcast_to", typed((2, 3)), shape=(3,))


def test_broadcast_to_symbolic(check_op_symbolic, typed):
    from kiln.ir import Var
    n = Var("n", "int64")
    ty = ops.call("broadcast_to", typed((1, 3)), shape=(n, 3)).ty
    assert ty.shape[0] is n


# ---- concat / split ------------------------------------------------------------------------

@pytest.mark.parametrize("shapes,axis", [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 2)], 1),
                                         ([(2, 3), (2, 1), (2, 2)], -1), ([(2, 0, 3), (2, 2, 3)], 1),
                                         ([(3,)], 0), ([(1, 2, 3), (1, 2, 3), (2, 2, 3), (1, 2, 3)], 0)])
def test_concat(check_op, shapes, axis, rand):
    check_op("concat", [rand(s, seed=k) for k, s in enumerate(shapes)], {"axis": axis})


def test_concat_never_reads_out_of_bounds():
    """Every load of the concat compute is clamped into its input (codegen's Select evaluates
    both sides)."""
    from kiln import te
    from kiln.ops.common import placeholders
    from kiln.ir.graph import TensorType
    phs = placeholders([TensorType((2, 3)), TensorType((2, 1))])
    out = ops.get("concat").compute(phs, {"axis": 1})
    func = te.create_prim_func(phs + [out])
    loads = collect(func.body, BufferLoad)
    assert loads and all("min" in repr(l.indices[1]) or "max" in repr(l.indices[1]) for l in loads)


def test_concat_errors(op_error, typed):
    with op_error("concat: shapes (2, 3), (3, 2) differ outside axis 0"):
        ops.call("concat", typed((2, 3)), typed((3, 2)))
    with op_error("concat: input 1 int32(2, 3) does not match input 0 float32(2, 3)"):
        ops.call("concat", typed((2, 3)), typed((2, 3), "int32"), axis=0)
    with op_error("concat: needs at least one input"):
        ops.call("concat")


def test_concat_symbolic(check_op_symbolic):
    check_op_symbolic("concat", [("n", 2), ("n", 3)], attrs={"axis": 1}, expect_shape=("n", 5))


@pytest.mark.parametrize("shape,ios,axis", [((6, 2), 3, 0), ((2, 6), [1, 4], 1), ((2, 6), [2, 10], -1),
                                            ((5,), [-2], 0), ((5,), [3, 1], 0), ((4,), 1, 0)])
def test_split(check_op, shape, ios, axis, rand):
    check_op("split", [rand(shape)], {"indices_or_sections": ios, "axis": axis})


def test_split_type_and_errors(op_error, typed):
    ty = ops.call("split", typed((6, 2)), indices_or_sections=3).ty
    assert isinstance(ty, TupleType) and [f.static_shape() for f in ty.fields] == [(2, 2)] * 3
    with op_error("split: dimension 0 of (5, 2) (5) does not split into 2 equal sections"):
        ops.call("split", typed((5, 2)), indices_or_sections=2)


def test_split_symbolic(check_op_symbolic):
    check_op_symbolic("split", [("n", 4)], attrs={"indices_or_sections": 2, "axis": 1},
                      expect_shape=("n", 2))


# ---- strided_slice -------------------------------------------------------------------------

@pytest.mark.parametrize("shape,begin,end,strides,axes", [
    ((5, 4), (1,), (4,), None, None),
    ((5, 4), (1, 0), (4, 3), (2, 1), None),
    ((5, 4), (-3,), (100,), None, (1,)),
    ((6,), (5,), (1,), (-1,), None),                  # stride -1
    ((6,), (-1,), (-100,), (-2,), None),              # reversed, end clamps to -1
    ((6,), (10,), (-10,), (-1,), None),               # whole axis reversed
    ((6,), (4,), (2,), None, None),                   # empty: clamps to a 0-size dim
    ((6,), (7,), (9,), None, None),                   # begin past the end: empty
    ((2, 3, 4), (1, -1), (3, 0), (1, -1), (2, 0)),    # axes in any order
])
def test_strided_slice(check_op, shape, begin, end, strides, axes, rand):
    check_op("strided_slice", [rand(shape)], {"begin": begin, "end": end, "strides": strides, "axes": axes})


def test_strided_slice_matches_numpy_on_ordinary_slices(rand):
    x = rand((7,))
    for b, e, s in [(1, 5, 2), (-5, -1, 1), (6, 0, -2), (0, 100, 3)]:
        got = ops.get("strided_slice").reference(x, begin=(b,), end=(e,), strides=(s,))
        np.testing.assert_array_equal(got, x[b:e:s])


def test_strided_slice_errors(op_error, typed):
    with op_error("strided_slice: strides must not be 0"):
        ops.call("strided_slice", typed((4,)), begin=(0,), end=(2,), strides=(0,))
    with op_error("strided_slice: end= needs 1 value(s), got 2"):
        ops.call("strided_slice", typed((4,)), begin=(0,), end=(2, 3))


def test_strided_slice_symbolic(check_op_symbolic):
    check_op_symbolic("strided_slice", [("n", 6)], attrs={"begin": (1,), "end": (6,), "strides": (2,), "axes": (1,)},
                      expect_shape=("n", 3))


# ---- take ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,ind_shape,axis,dtype", [((5, 3), (4,), 0, "int64"), ((5, 3), (2, 2), 1, "int32"),
                                                        ((2, 5, 3), (), 1, "int64"), ((4, 3), (3,), -1, "int32")])
def test_take(check_op, shape, ind_shape, axis, dtype, rand):
    n = shape[axis]
    ind = rand(ind_shape, dtype, -n, n - 1, seed=3)     # negative indices wrap
    check_op("take", [rand(shape), ind], {"axis": axis})


def test_take_errors(op_error, typed):
    with op_error("take: indices must be int32 or int64, got float32"):
        ops.call("take", typed((3,)), typed((2,), "float32", "i"))


# ---- pad -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,pads,value", [((2, 3), ((1, 0), (2, 1)), 0.0), ((3,), ((0, 2),), -1.5),
                                              ((1, 2, 3, 3), ((0, 0), (0, 0), (1, 1), (2, 2)), 0.0),
                                              ((4, 3), ((-1, 2), (1, -2)), 7.0)])
def test_pad(check_op, shape, pads, value, rand):
    check_op("pad", [rand(shape)], {"pad_width": pads, "pad_value": value})


def test_pad_int(check_op, rand):
    check_op("pad", [rand((2, 2), "int32", -5, 5)], {"pad_width": ((1, 1), (0, 1)), "pad_value": 3})


def test_pad_errors(op_error, typed):
    with op_error("pad: pad_width needs one (before, after) pair per dimension of (2, 3)"):
        ops.call("pad", typed((2, 3)), pad_width=((1, 1),))


# ---- topk ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,k,axis,largest", [((2, 7), 3, -1, True), ((2, 7), 3, 1, False),
                                                  ((5, 3), 5, 0, True), ((2, 4, 3), 2, 1, True), ((6,), 0, 0, True)])
def test_topk(check_op, shape, k, axis, largest, rand):
    check_op("topk", [rand(shape)], {"k": k, "axis": axis, "largest": largest})


def test_topk_ties_keep_index_order(check_op):
    x = np.array([[1, 3, 3, 2, 3, 1], [0, 0, 0, 0, 0, 0]], dtype="int32")
    check_op("topk", [x], {"k": 4})
    check_op("topk", [x], {"k": 4, "largest": False})


def test_topk_errors(op_error, typed):
    with op_error("topk: k=5 is out of range for axis 1 of size 4 in (2, 4)"):
        ops.call("topk", typed((2, 4)), k=5)


def test_topk_symbolic_rows(check_op_symbolic):
    check_op_symbolic("topk", [("n", 5)], attrs={"k": 2}, expect_shape=("n", 2))


def test_strided_slice_and_topk_match_onnx(rand):
    pytest.importorskip("onnx")
    from onnx import helper, TensorProto
    from onnx.reference import ReferenceEvaluator

    def run(node, inputs):
        vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
               for k, v in inputs.items()]
        outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
        return ReferenceEvaluator(helper.make_model(helper.make_graph([node], "g", vis, outs))).run(None, inputs)
    x = rand((5, 6))
    ref = ops.get("strided_slice").reference
    for b, e, s in [(-10, -20, -1), (10, -20, -2), (-2, 100, 1), (4, -7, -1), (1, 1, 1), (7, 0, -1)]:
        node = helper.make_node("Slice", ["x", "b", "e", "a", "s"], ["y"])
        want = run(node, {"x": x, "b": np.array([b]), "e": np.array([e]), "a": np.array([1]), "s": np.array([s])})[0]
        np.testing.assert_array_equal(ref(x, begin=(b,), end=(e,), strides=(s,), axes=(1,)), want, err_msg=f"{b}:{e}:{s}")
    xt = np.array([[1, 3, 3, 2, 3, 1], [5, 4, 5, 4, 0, 0]], "float32")
    for largest in (0, 1):
        node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)
        v, i = run(node, {"x": xt, "k": np.array([4])})
        got_v, got_i = ops.get("topk").reference(xt, k=4, axis=1, largest=bool(largest))
        np.testing.assert_array_equal(got_v, v)
        np.testing.assert_array_equal(got_i, i)


@pytest.mark.parametrize("name,types,attrs", [
    ("concat", [(2, 3), (2, 2)], {"axis": 1}),
    ("split", [(6, 2)], {"indices_or_sections": 3}),
    ("take", [(5, 3), ((4,), "int64")], {"axis": 0}),
    ("pad", [(2, 3)], {"pad_width": ((1, 1), (0, 2))}),
    ("topk", [(2, 5)], {"k": 2}),
])
def test_prim_funcs_are_well_formed_and_round_trip(name, types, attrs):
    import kiln
    from kiln.ir import IRModule, structural_equal, verify
    from kiln.ir.graph import TensorType
    types = [TensorType(*t) if isinstance(t[0], tuple) else TensorType(t) for t in types]
    func = _prim_func(name, types, attrs)
    verify(func)
    mod = IRModule({"main": func})
    assert structural_equal(kiln.script.parse(mod.script()), mod)


def test_bool_and_int_data(check_op, rand):
    b = rand((2, 3), "bool")
    check_op("concat", [b, rand((2, 1), "bool", seed=1)], {"axis": -1})
    check_op("pad", [b], {"pad_width": ((1, 0), (0, 1))})
    check_op("permute_dims", [b], {})
    check_op("take", [rand((4, 2), "uint8", 0, 255), np.array([3, -1, 0], "int32")], {})
    check_op("topk", [rand((3, 6), "uint8", 0, 4)], {"k": 3})


def test_empty_inputs(check_op, op_error, typed):
    check_op("pad", [np.zeros((0, 3), "float32")], {"pad_width": ((1, 1), (0, 0)), "pad_value": 2.0})
    check_op("take", [np.zeros((0, 3), "float32"), np.zeros((0,), "int64")], {})
    with op_error("take: cannot take indices (2,) from the empty axis 0 of (0, 3)"):
        ops.call("take", typed((0, 3)), typed((2,), "int64", "i"))


def _prim_func(name, types, attrs):
    """The PrimFunc of one call (placeholders -> compute or tir), outputs last."""
    from kiln import te
    from kiln.ir.graph import GraphVar
    from kiln.ops.common import placeholders
    op = ops.get(name)
    call = ops.call(name, *[GraphVar(f"x{i}", t) for i, t in enumerate(types)], **attrs)
    if op.tir is not None:
        return op.tir(list(types), dict(call.attrs), call.ty)
    phs = placeholders(types)
    outs = op.compute(phs, dict(call.attrs))
    return te.create_prim_func(phs + (list(outs) if isinstance(outs, (list, tuple)) else [outs]))
