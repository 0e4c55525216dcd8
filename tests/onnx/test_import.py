"""The ONNX importer on small onnx.helper graphs, one per op family, against onnxruntime
(compiled with Kiln's default pipeline), plus errors, shape_dict, symbolic dims and folding."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402
from kiln.ir.graph import Call  # noqa: E402

F = TP.FLOAT
I64 = TP.INT64
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def model(nodes, inputs, outputs, inits=(), opset=17):
    """inputs/outputs: (name, elem type, shape or None)."""
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(*i) for i in inputs],
                     [h.make_tensor_value_info(*o) for o in outputs],
                     [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10  # onnxruntime 1.31 refuses IR > 13; onnx 1.23 writes 14
    return m


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def kiln_run(m, feeds, shape_dict=None):
    mod, params = from_onnx(m, shape_dict=shape_dict)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    out = vm["main"](*feeds.values())
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [o.numpy() if hasattr(o, "numpy") else np.asarray(o) for o in outs]


def check(m, feeds, rtol=1e-4, atol=1e-4, shape_dict=None):
    want = ort_run(m, feeds)
    got = kiln_run(m, feeds, shape_dict)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ---- CNN family ------------------------------------------------------------------------
def test_cnn_block():
    W, B = rand(8, 3, 3, 3), rand(8)
    inits = [("W", W), ("B", B), ("g", np.abs(rand(8)) + .5), ("be", rand(8)), ("mu", rand(8)),
             ("var", np.abs(rand(8)) + .5), ("FW", rand(10, 8)), ("FB", rand(10)),
             ("shp", np.array([0, -1], np.int64))]
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"]),
             h.make_node("Relu", ["bn"], ["r"]),
             h.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("GlobalAveragePool", ["mp"], ["gap"]),
             h.make_node("Reshape", ["gap", "shp"], ["fl"]),
             h.make_node("Gemm", ["fl", "FW", "FB"], ["fc"], transB=1),
             h.make_node("Softmax", ["fc"], ["y"], axis=1)]
    m = model(nodes, [("x", F, [2, 3, 8, 8])], [("y", F, None)], inits)
    check(m, {"x": rand(2, 3, 8, 8)})


@pytest.mark.parametrize("attrs", [
    dict(group=2, dilations=[2, 2], strides=[2, 1], pads=[1, 0, 2, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="VALID"),
    dict(group=4),
])
def test_conv_attrs(attrs):
    wshape = (4, 4 // attrs.get("group", 1), 3, 3)
    m = model([h.make_node("Conv", ["x", "W"], ["y"], **attrs)], [("x", F, [1, 4, 9, 8])],
              [("y", F, None)], [("W", rand(*wshape))])
    check(m, {"x": rand(1, 4, 9, 8)})


def test_conv_transpose():
    m = model([h.make_node("ConvTranspose", ["x", "W", "B"], ["y"], strides=[2, 2], pads=[1, 1, 0, 0],
                           output_padding=[1, 1])],
              [("x", F, [1, 3, 5, 5])], [("y", F, None)], [("W", rand(3, 2, 3, 3)), ("B", rand(2))])
    check(m, {"x": rand(1, 3, 5, 5)})


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("GlobalMaxPool", {}),
])
def test_pools(op, attrs):
    m = model([h.make_node(op, ["x"], ["y"], **attrs)], [("x", F, [1, 2, 7, 7])], [("y", F, None)])
    check(m, {"x": rand(1, 2, 7, 7)})


@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", dict(alpha=0.2)),
    ("HardSigmoid", {}), ("HardSwish", {}), ("Elu", {}), ("Softplus", {}), ("Erf", {}),
    ("Neg", {}), ("Exp", {}), ("Abs", {}), ("Clip", {}),
])
def test_activations(op, attrs):
    m = model([h.make_node(op, ["x"], ["y"], **attrs)], [("x", F, [3, 4])], [("y", F, None)])
    check(m, {"x": rand(3, 4)})


def test_clip_input_form_and_unary_math():
    nodes = [h.make_node("Clip", ["x", "lo", "hi"], ["c"]),
             h.make_node("Abs", ["c"], ["a"]),
             h.make_node("Add", ["a", "one"], ["a1"]),
             h.make_node("Sqrt", ["a1"], ["s"]), h.make_node("Reciprocal", ["s"], ["r"]),
             h.make_node("Log", ["r"], ["l"]), h.make_node("Pow", ["l", "two"], ["y"])]
    m = model(nodes, [("x", F, [3, 4])], [("y", F, None)],
              [("lo", np.float32(-0.5)), ("hi", np.float32(0.7)), ("one", np.float32(1)),
               ("two", np.float32(2))])
    check(m, {"x": rand(3, 4)})


def test_binary_broadcast_and_compare():
    nodes = [h.make_node("Sub", ["a", "b"], ["s"]), h.make_node("Mul", ["s", "b"], ["m"]),
             h.make_node("Div", ["m", "b"], ["d"]), h.make_node("Max", ["d", "a", "b"], ["mx"]),
             h.make_node("Min", ["mx", "a"], ["mn"]), h.make_node("Sum", ["mn", "a", "b"], ["sm"]),
             h.make_node("Greater", ["sm", "a"], ["g"]), h.make_node("Less", ["sm", "b"], ["l"]),
             h.make_node("Or", ["g", "l"], ["o"]), h.make_node("Not", ["o"], ["n"]),
             h.make_node("Equal", ["a", "a"], ["e"]), h.make_node("And", ["n", "e"], ["an"]),
             h.make_node("Where", ["an", "a", "sm"], ["y"])]
    m = model(nodes, [("a", F, [2, 3, 4]), ("b", F, [4])], [("y", F, None)])
    check(m, {"a": rand(2, 3, 4), "b": np.abs(rand(4)) + 0.5})


def test_integer_div_truncates():
    m = model([h.make_node("Div", ["a", "b"], ["y"])], [("a", I64, [5]), ("b", I64, [5])], [("y", I64, None)])
    check(m, {"a": np.array([7, -7, 9, -9, 0], np.int64), "b": np.array([2, 2, -4, -4, 3], np.int64)})


# ---- transformer family ------------------------------------------------------------------
def test_transformer_block():
    D, H = 8, 2
    inits = [("Wq", rand(D, D)), ("Wk", rand(D, D)), ("g", rand(D)), ("bt", rand(D)),
             ("W1", rand(D, 16)), ("W2", rand(16, D)),
             ("sh", np.array([0, 0, H, D // H], np.int64)), ("sh2", np.array([0, 0, D], np.int64)),
             ("scale", np.float32(0.5)), ("zero", np.float32(0)), ("ninf", np.float32(-1e9)),
             ("one", np.array(1, np.int64)), ("ax", np.array([-1], np.int64))]
    nodes = [
        h.make_node("LayerNormalization", ["x", "g", "bt"], ["ln"], epsilon=1e-5),
        h.make_node("MatMul", ["ln", "Wq"], ["q0"]), h.make_node("MatMul", ["ln", "Wk"], ["k0"]),
        h.make_node("Reshape", ["q0", "sh"], ["q1"]), h.make_node("Reshape", ["k0", "sh"], ["k1"]),
        h.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        h.make_node("Transpose", ["k1"], ["k"], perm=[0, 2, 3, 1]),
        h.make_node("MatMul", ["q", "k"], ["att0"]), h.make_node("Mul", ["att0", "scale"], ["att1"]),
        # causal mask from the shape subgraph: Shape -> Gather -> ConstantOfShape -> Trilu
        h.make_node("Shape", ["x"], ["xs"]), h.make_node("Gather", ["xs", "one"], ["T"]),
        h.make_node("Unsqueeze", ["T", "zax"], ["T1"]),
        h.make_node("Concat", ["T1", "T1"], ["TT"], axis=0),
        h.make_node("ConstantOfShape", ["TT"], ["ones"], value=nh.from_array(np.array([1], np.float32))),
        h.make_node("Trilu", ["ones"], ["tril"], upper=0),
        h.make_node("Equal", ["tril", "zero"], ["masked"]),
        h.make_node("Where", ["masked", "ninf", "att1"], ["att2"]),
        h.make_node("Softmax", ["att2"], ["p"], axis=-1),
        h.make_node("Transpose", ["k1"], ["v"], perm=[0, 2, 1, 3]),
        h.make_node("MatMul", ["p", "v"], ["o0"]), h.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["o1", "sh2"], ["o"]),
        h.make_node("Add", ["o", "x"], ["r1"]),
        h.make_node("MatMul", ["r1", "W1"], ["f1"]),
        h.make_node("Div", ["f1", "sqrt2"], ["f2"]), h.make_node("Erf", ["f2"], ["f3"]),
        h.make_node("Add", ["f3", "onef"], ["f4"]), h.make_node("Mul", ["f1", "f4"], ["f5"]),
        h.make_node("Mul", ["f5", "half"], ["f6"]), h.make_node("MatMul", ["f6", "W2"], ["f7"]),
        h.make_node("ReduceMean", ["f7", "ax"], ["rm"], keepdims=1),
        h.make_node("Sub", ["f7", "rm"], ["y"]),
    ]
    inits += [("zax", np.array([0], np.int64)), ("sqrt2", np.float32(np.sqrt(2))),
              ("onef", np.float32(1)), ("half", np.float32(0.5))]
    m = model(nodes, [("x", F, [2, 5, D])], [("y", F, None)], inits, opset=18)
    check(m, {"x": rand(2, 5, D)})


def test_gather_slice_expand_concat_split():
    nodes = [h.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             h.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["s"]),
             h.make_node("Expand", ["b", "eshape"], ["e"]),
             h.make_node("Concat", ["s", "e"], ["c"], axis=1),
             h.make_node("Split", ["c", "spl"], ["p0", "p1"], axis=1),
             h.make_node("Squeeze", ["g", "sqax"], ["gs"]),
             h.make_node("Unsqueeze", ["gs", "sqax"], ["gu"])]
    inits = [("idx", np.array([2], np.int64)), ("st", np.array([3, 0], np.int64)),
             ("en", np.array([0, 9], np.int64)), ("axs", np.array([1, 2], np.int64)),
             ("stp", np.array([-1, 2], np.int64)), ("eshape", np.array([2, 1, 5], np.int64)),
             ("spl", np.array([1, 3], np.int64)), ("sqax", np.array([1], np.int64))]
    m = model(nodes, [("x", F, [2, 4, 9]), ("b", F, [5])], [("p0", F, None), ("p1", F, None), ("gu", F, None)],
              inits)
    check(m, {"x": rand(2, 4, 9), "b": rand(5)})


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions(op, opset):
    axes = [1, -1]
    as_input = opset >= 18 or (op == "ReduceSum")
    node = (h.make_node(op, ["x", "axes"], ["y"], keepdims=0) if as_input
            else h.make_node(op, ["x"], ["y"], axes=axes, keepdims=0))
    inits = [("axes", np.array(axes, np.int64))] if as_input else []
    m = model([node], [("x", F, [2, 3, 4])], [("y", F, None)], inits, opset=opset)
    check(m, {"x": rand(2, 3, 4)})


def test_cast_topk_argmax_pad_tile_range():
    nodes = [h.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
             h.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
             h.make_node("Cast", ["am"], ["amf"], to=F),
             h.make_node("Pad", ["x", "pads", "pv"], ["p"]),
             h.make_node("Tile", ["x", "reps"], ["t"]),
             h.make_node("Range", ["r0", "r1", "r2"], ["r"]),
             h.make_node("Cast", ["r"], ["rf"], to=F),
             h.make_node("Add", ["amf", "rf"], ["y"])]
    inits = [("k", np.array([2], np.int64)), ("pads", np.array([0, 1, 1, 2], np.int64)),
             ("pv", np.float32(3)), ("reps", np.array([2, 1], np.int64)),
             ("r0", np.array(0, np.int64)), ("r1", np.array(3, np.int64)), ("r2", np.array(1, np.int64))]
    m = model(nodes, [("x", F, [3, 5])],
              [("v", F, None), ("i", I64, None), ("p", F, None), ("t", F, None), ("y", F, None)], inits)
    check(m, {"x": rand(3, 5)})


def test_resize():
    nodes = [h.make_node("Resize", ["x", "", "scales"], ["a"], mode="nearest"),
             h.make_node("Resize", ["x", "", "", "sizes"], ["b"], mode="linear",
                         coordinate_transformation_mode="align_corners")]
    inits = [("scales", np.array([1, 1, 2, 2], np.float32)), ("sizes", np.array([1, 2, 7, 5], np.int64))]
    m = model(nodes, [("x", F, [1, 2, 4, 3])], [("a", F, None), ("b", F, None)], inits, opset=13)
    check(m, {"x": rand(1, 2, 4, 3)})


# ---- shapes: symbolic dims, shape_dict, folding -------------------------------------------
def _flatten_model():
    nodes = [h.make_node("Flatten", ["x"], ["f"], axis=1), h.make_node("MatMul", ["f", "W"], ["y"])]
    return model(nodes, [("x", F, ["batch", 3, 4])], [("y", F, ["batch", 5])], [("W", rand(12, 5))])


def test_symbolic_batch():
    m = _flatten_model()
    mod, params = from_onnx(m)
    func = mod["main"]
    x = func.params[0]
    assert x.name == "x" and type(x.ty.shape[0]).__name__ == "Var" and x.ty.shape[0].name == "batch"
    assert list(params) == ["W"]
    mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    for n in (1, 3):
        xv = rand(n, 3, 4)
        got = vm["main"](xv)
        got = got.numpy() if hasattr(got, "numpy") else got
        np.testing.assert_allclose(got, ort_run(m, {"x": xv})[0], rtol=1e-4, atol=1e-4)


def test_shared_dim_param_is_one_var():
    nodes = [h.make_node("Add", ["a", "b"], ["y"])]
    m = model(nodes, [("a", F, ["n", 4]), ("b", F, ["n", 4])], [("y", F, None)])
    mod, _ = from_onnx(m)
    a, b = mod["main"].params
    assert a.ty.shape[0] is b.ty.shape[0]


def test_shape_dict_pins():
    m = _flatten_model()
    mod, _ = from_onnx(m, shape_dict={"x": (2, 3, 4)})
    assert mod["main"].params[0].ty.static_shape() == (2, 3, 4)
    check(m, {"x": rand(2, 3, 4)}, shape_dict={"x": (2, 3, 4)})
    with pytest.raises(ONNXImportError, match="not graph inputs"):
        from_onnx(m, shape_dict={"nope": (1,)})


def test_shape_subgraph_folds():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape: with shapes known, no shape ops remain
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i0"], ["d0"]),
             h.make_node("Unsqueeze", ["d0", "ax0"], ["d0u"]),
             h.make_node("Concat", ["d0u", "m1"], ["shp"], axis=0),
             h.make_node("Reshape", ["x", "shp"], ["r"]),
             h.make_node("Range", ["z", "d0", "o"], ["rg"]),
             h.make_node("Cast", ["rg"], ["rgf"], to=F),
             h.make_node("Unsqueeze", ["rgf", "ax1"], ["rgu"]),
             h.make_node("Add", ["r", "rgu"], ["y"])]
    inits = [("i0", np.array(0, np.int64)), ("ax0", np.array([0], np.int64)),
             ("m1", np.array([-1], np.int64)), ("z", np.array(0, np.int64)),
             ("o", np.array(1, np.int64)), ("ax1", np.array([1], np.int64))]
    m = model(nodes, [("x", F, [3, 2, 2])], [("y", F, None)], inits)
    mod, params = from_onnx(m)
    ops_used = {b.value.op for b in mod["main"].bindings() if isinstance(b.value, Call)}
    assert ops_used <= {"reshape", "add"}, ops_used
    assert params == {}
    check(m, {"x": rand(3, 2, 2)})


def test_constant_node():
    nodes = [h.make_node("Constant", [], ["c"], value=nh.from_array(np.arange(4, dtype=np.float32))),
             h.make_node("Add", ["x", "c"], ["y"])]
    m = model(nodes, [("x", F, [2, 4])], [("y", F, None)])
    check(m, {"x": rand(2, 4)})


# ---- errors name the node --------------------------------------------------------------
def test_error_names_node_and_op():
    m = model([h.make_node("Conv", ["x", "W"], ["y"], name="Conv_3", auto_pad="SAME_WRONG")],
              [("x", F, [1, 1, 4, 4])], [("y", F, None)], [("W", rand(1, 1, 3, 3))], opset=13)
    with pytest.raises(ONNXImportError, match=r"node 'Conv_3' \(Conv, opset 13\): auto_pad=SAME_WRONG is not supported"):
        from_onnx(m)


def test_error_unsupported_op():
    m = model([h.make_node("Bernoulli", ["x"], ["y"], name="coin")], [("x", F, [1])], [("y", F, None)])
    with pytest.raises(ONNXImportError, match=r"node 'coin' \(Bernoulli, opset 17\): operator Bernoulli is not supported"):
        from_onnx(m)


def test_error_shape_mismatch_names_node():
    m = model([h.make_node("Add", ["a", "b"], ["y"], name="add_1")], [("a", F, [2, 3]), ("b", F, [4])],
              [("y", F, None)])
    with pytest.raises(ONNXImportError, match=r"node 'add_1' \(Add, opset 17\): add: shapes"):
        from_onnx(m)


def test_error_symbolic_shape_needs_pin():
    # a shape computation over symbolic dims imports (the reshape target is (n, 3)) ...
    m = model([h.make_node("Shape", ["x"], ["s"], name="sh"), h.make_node("Reshape", ["x", "s"], ["y"])],
              [("x", F, ["n", 3])], [("y", F, None)])
    (reshape,) = [b.value for b in from_onnx(m)[0]["main"].bindings() if isinstance(b.value, Call)]
    assert reshape.ty.shape[0].name == "n"
    # ... and using its value as a run-time tensor computes it at run time from the dims
    # (tests/dynamic/test_onnx_dynamic.py runs such models against onnxruntime)
    m = model([h.make_node("Shape", ["x"], ["s"]), h.make_node("Cast", ["s"], ["f"], to=F, name="cf"),
               h.make_node("Mul", ["x", "f"], ["y"])], [("x", F, ["n", 2])], [("y", F, None)])
    ops = [b.value.op for b in from_onnx(m)[0]["main"].bindings() if isinstance(b.value, Call)]
    assert "shape_values" in ops and "cast" in ops
    pinned = [b.value.op for b in from_onnx(m, shape_dict={"x": (3, 2)})[0]["main"].bindings()
              if isinstance(b.value, Call)]
    assert "shape_values" not in pinned  # pinned: folds to a constant


def test_error_dtype():
    m = model([h.make_node("Relu", ["x"], ["y"])], [("x", TP.COMPLEX64, [2])], [("y", F, None)])
    with pytest.raises(ONNXImportError, match="COMPLEX64"):
        from_onnx(m)


# ---- composed families: losses, attention, misc -------------------------------------------
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_and_nll(reduction):
    nodes = [h.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["l", "lp"], reduction=reduction,
                         ignore_index=1),
             h.make_node("NegativeLogLikelihoodLoss", ["lp", "t"], ["n"], reduction=reduction)]
    m = model(nodes, [("x", F, [4, 5, 3]), ("t", I64, [4, 3])],
              [("l", F, None), ("lp", F, None), ("n", F, None)], [("w", np.abs(rand(5)) + 0.1)], opset=13)
    check(m, {"x": rand(4, 5, 3), "t": RNG.integers(0, 5, (4, 3)).astype(np.int64)})


@pytest.mark.parametrize("attrs", [dict(is_causal=1), dict(q_num_heads=4, kv_num_heads=2, softcap=3.0)])
def test_attention_op(attrs):
    three_d = "q_num_heads" in attrs
    if three_d:
        ins = [("q", F, [2, 5, 16]), ("k", F, [2, 6, 8]), ("v", F, [2, 6, 8])]
        feeds = {"q": rand(2, 5, 16), "k": rand(2, 6, 8), "v": rand(2, 6, 8)}
    else:
        ins = [("q", F, [2, 3, 5, 4]), ("k", F, [2, 3, 5, 4]), ("v", F, [2, 3, 5, 4])]
        feeds = {n: rand(2, 3, 5, 4) for n in "qkv"}
    m = model([h.make_node("Attention", ["q", "k", "v"], ["y"], **attrs)], ins, [("y", F, None)], opset=23)
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(kiln_run(m, feeds)[0], want, rtol=1e-4, atol=1e-4)


def test_misc_composed_ops():
    nodes = [h.make_node("GatherElements", ["x", "gi"], ["ge"], axis=1),
             h.make_node("CumSum", ["x", "ax"], ["cs"], exclusive=1),
             h.make_node("Hardmax", ["x"], ["hm"]),
             h.make_node("InstanceNormalization", ["x4", "s", "b"], ["inn"]),
             h.make_node("DepthToSpace", ["x4"], ["d2s"], blocksize=2, mode="CRD"),
             h.make_node("Mod", ["ia", "ib"], ["md"])]
    m = model(nodes, [("x", F, [3, 4]), ("x4", F, [1, 4, 2, 3]), ("ia", I64, [4]), ("ib", I64, [4])],
              [("ge", F, None), ("cs", F, None), ("hm", F, None), ("inn", F, None), ("d2s", F, None),
               ("md", I64, None)],
              [("gi", np.array([[0, 3], [1, 1], [-1, 2]], np.int64)), ("ax", np.array(1, np.int64)),
               ("s", rand(4)), ("b", rand(4))], opset=14)
    check(m, {"x": rand(3, 4), "x4": rand(1, 4, 2, 3), "ia": np.array([7, -7, 7, -7], np.int64),
              "ib": np.array([3, 3, -3, -3], np.int64)})


def test_backend_specialises_runtime_shape_inputs():
    # Reshape's shape fed as a graph input: the backend compiles once the value is known.
    from kiln.frontend.onnx.backend import KilnBackend
    m = model([h.make_node("Reshape", ["x", "s"], ["y"])], [("x", F, [2, 6]), ("s", I64, [2])], [("y", F, ["a", "b"])])
    rep = KilnBackend.prepare(m)
    x = rand(2, 6)
    np.testing.assert_array_equal(rep.run([x, np.array([3, 4], np.int64)])[0], x.reshape(3, 4))
    np.testing.assert_array_equal(rep.run([x, np.array([4, 3], np.int64)])[0], x.reshape(4, 3))


def test_old_opsets_are_upgraded_on_import(caplog):
    """An opset-9 model (Upsample, BatchNormalization of its time) is converted to opset 11 with
    onnx.version_converter, saying so in the log, and matches onnxruntime."""
    m = model([h.make_node("Upsample", ["x", "scales"], ["u"], mode="nearest"),
               h.make_node("Relu", ["u"], ["y"])],
              [("x", F, (1, 2, 3, 3))], [("y", F, None)],
              inits=[("scales", np.array([1, 1, 2, 2], "float32"))], opset=9)
    x = rand(1, 2, 3, 3)
    with caplog.at_level("WARNING", logger="kiln.frontend.onnx"):
        got = kiln_run(m, {"x": x})
    assert "opset 9: upgrading it to opset 11" in caplog.text
    np.testing.assert_allclose(got[0], np.maximum(x.repeat(2, 2).repeat(2, 3), 0))


def test_an_old_model_the_converter_cannot_carry_says_so():
    # an operator with no schema: the converter stops at it and its message names it
    bad = model([h.make_node("Frobnicate", ["x"], ["y"])], [("x", F, (1, 1, 2, 2))],
                [("y", F, None)], opset=9)
    with pytest.raises(ONNXImportError, match=r"opset 9 -> 11 upgrade failed: .*Frobnica"):
        from_onnx(bad)
