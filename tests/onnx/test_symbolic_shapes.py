"""Shape computations over symbolic dims (frontend/onnx/symbolic.py): Shape -> Gather ->
Concat -> Reshape and friends carried as known symbolic values, so that a dynamic-axes model
imports with symbolic output shapes and one compiled artifact runs at several sizes (checked
against onnxruntime); and clear errors where a value would be needed at run time."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402
from kiln.frontend.onnx import symbolic  # noqa: E402
from kiln.ir import Var, substitute  # noqa: E402
from kiln.ir.graph import Call  # noqa: E402

F, I64 = TP.FLOAT, TP.INT64
RNG = np.random.default_rng(0)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(*i) for i in inputs],
                     [h.make_tensor_value_info(*o) for o in outputs],
                     [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10  # onnxruntime refuses newer IR versions
    return m


def compile_vm(m):
    mod, params = from_onnx(m)
    mod = kiln.transform.bind_params("main", params)(mod)
    return kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())


def check_sizes(m, shapes):
    """Compile ``m`` once; run it on an input of each shape in ``shapes`` against onnxruntime."""
    vm = compile_vm(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    name = m.graph.input[0].name
    for shape in shapes:
        x = RNG.standard_normal(shape).astype(np.float32)
        want = sess.run(None, {name: x})
        got = vm["main"](x)
        got = got if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-4)


def ops_of(m):
    mod, _ = from_onnx(m)
    return [b.value for b in mod["main"].bindings() if isinstance(b.value, Call)]


def i64(*v):
    """A 1-D int64 array (shapes, axes, starts...)."""
    return np.array(v, np.int64)


def s64(v):
    """A 0-D int64 array (a Gather index, a scalar operand)."""
    return np.array(v, np.int64)


def dims(shape):
    """A shape as strings: "12", "N" (a symbolic dim's name), or an expression."""
    return [str(d.value) if hasattr(d, "value") else getattr(d, "name", None) or d.script()
            for d in shape]


# ---- the shape-arithmetic lattice -------------------------------------------------------
def _flatten_batch_model():
    # x.view(x.shape[0], -1) then a matmul, as torch exports it
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             h.make_node("Unsqueeze", ["n", "ax0"], ["nu"]),
             h.make_node("Concat", ["nu", "m1"], ["shp"], axis=0),
             h.make_node("Reshape", ["x", "shp"], ["r"]), h.make_node("MatMul", ["r", "W"], ["y"])]
    inits = [("i0", s64(0)), ("ax0", i64(0)), ("m1", i64(-1)),
             ("W", RNG.standard_normal((12, 5)).astype(np.float32))]
    return model(nodes, [("x", F, ["N", 3, 4])], [("y", F, None)], inits)


def test_reshape_from_shape_of_symbolic_batch():
    m = _flatten_batch_model()
    (reshape,) = [c for c in ops_of(m) if c.op == "reshape"]
    assert dims(reshape.ty.shape) == ["N", "12"]
    check_sizes(m, [(2, 3, 4), (7, 3, 4)])


def test_arithmetic_reshape_zero_and_minus_one():
    # (B, T, 16) -> (B, T, 16 // 2, -1) via Shape/Slice/Div/Concat; then 0s copy B and T
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Slice", ["s", "z", "two", "z"], ["bt"]),
             h.make_node("Gather", ["s", "i2"], ["c"], axis=0),
             h.make_node("Div", ["c", "two_s"], ["half"]),
             h.make_node("Unsqueeze", ["half", "z"], ["hu"]),
             h.make_node("Concat", ["bt", "hu", "m1"], ["shp"], axis=0),
             h.make_node("Reshape", ["x", "shp"], ["r"]),
             h.make_node("Reshape", ["r", "zz"], ["y"])]
    inits = [("z", i64(0)), ("two", i64(2)), ("i2", s64(2)), ("two_s", s64(2)), ("m1", i64(-1)),
             ("zz", i64(0, 0, -1))]
    m = model(nodes, [("x", F, ["B", "T", 16])], [("y", F, None)], inits)
    assert [(c.op, dims(c.ty.shape)) for c in ops_of(m)] == [
        ("reshape", ["B", "T", "8", "2"]), ("reshape", ["B", "T", "16"])]
    check_sizes(m, [(2, 3, 16), (1, 5, 16)])


def test_size_max_equal_where_expand_constant_of_shape_tile():
    # torch's x.expand(B, -1) pattern: Where(Equal(shape, -1), 1, shape) -> Expand; plus Size,
    # Max, ConstantOfShape of a symbolic shape, Tile and a whole-dim Slice with a symbolic end
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
             h.make_node("Unsqueeze", ["b", "z"], ["bu"]),
             h.make_node("Concat", ["bu", "m1"], ["want"], axis=0),
             h.make_node("Equal", ["want", "m1s"], ["is_m1"]),
             h.make_node("Where", ["is_m1", "ones", "want"], ["eshape"]),
             h.make_node("Expand", ["row", "eshape"], ["e"]),
             h.make_node("Size", ["x"], ["sz"]),
             h.make_node("Div", ["sz", "b"], ["per"]),
             h.make_node("Max", ["per", "one"], ["per1"]),
             h.make_node("Unsqueeze", ["per1", "z"], ["pu"]),
             h.make_node("Concat", ["bu", "pu"], ["cshape"], axis=0),
             h.make_node("ConstantOfShape", ["cshape"], ["c"], value=nh.from_array(np.array([0.5], np.float32))),
             h.make_node("Add", ["x", "e"], ["xe"]),
             h.make_node("Add", ["xe", "c"], ["xc"]),
             h.make_node("Slice", ["xc", "z1", "bu", "z1"], ["sl"]),
             h.make_node("Tile", ["sl", "reps"], ["y"])]
    inits = [("i0", s64(0)), ("z", i64(0)), ("z1", i64(0)), ("m1", i64(-1)), ("m1s", i64(-1, -1)),
             ("ones", i64(1, 1)), ("row", RNG.standard_normal((1, 6)).astype(np.float32)),
             ("one", s64(1)), ("reps", i64(1, 2))]
    m = model(nodes, [("x", F, ["B", 6])], [("y", F, None)], inits)
    ops = ops_of(m)
    assert {c.op for c in ops} <= {"broadcast_to", "add", "reshape"}, [c.op for c in ops]
    assert dims(ops[-1].ty.shape) == ["B", "12"]
    check_sizes(m, [(3, 6), (1, 6)])


def test_reduce_prod_of_shape_cancels_symbolic_factors():
    # numel // B // T == 8 even though numel is B * T * 8: the scale folds to a constant
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("ReduceProd", ["s"], ["numel"], keepdims=0),
             h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
             h.make_node("Gather", ["s", "i1"], ["t"], axis=0),
             h.make_node("Div", ["numel", "b"], ["q"]), h.make_node("Div", ["q", "t"], ["c"]),
             h.make_node("Cast", ["c"], ["cf"], to=F), h.make_node("Mul", ["x", "cf"], ["y"])]
    m = model(nodes, [("x", F, ["B", "T", 8])], [("y", F, None)],
              [("i0", s64(0)), ("i1", s64(1))], opset=13)
    (mul,) = ops_of(m)
    assert mul.op == "multiply" and float(mul.args[1].data) == 8.0
    check_sizes(m, [(2, 3, 8), (4, 1, 8)])


def test_gather_at_symbolic_last_index():
    # x[:, x.shape[1] - 1]: the index T - 1 becomes -1, which take wraps at run time
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i1"], ["t"], axis=0),
             h.make_node("Sub", ["t", "one"], ["last"]),
             h.make_node("Gather", ["x", "last"], ["y"], axis=1)]
    m = model(nodes, [("x", F, ["B", "T", 4])], [("y", F, None)], [("i1", s64(1)), ("one", s64(1))])
    (take,) = ops_of(m)
    assert take.op == "take" and int(take.args[1].data) == -1
    check_sizes(m, [(2, 3, 4), (3, 6, 4)])


def test_reshape_that_holds_only_for_some_sizes_asks_for_a_pin():
    # (n, m) -> (n, m // 2, 2) is right only for even m
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i1"], ["m"], axis=0),
             h.make_node("Div", ["m", "two"], ["half"]), h.make_node("Unsqueeze", ["half", "z"], ["hu"]),
             h.make_node("Concat", ["z", "hu", "two1"], ["shp"], axis=0),
             h.make_node("Reshape", ["x", "shp"], ["y"], name="r")]
    m = model(nodes, [("x", F, ["n", "m"])], [("y", F, None)],
              [("i1", s64(1)), ("two", s64(2)), ("z", i64(0)), ("two1", i64(2))])
    with pytest.raises(ONNXImportError, match=r"node 'r' \(Reshape.*cannot reshape.*shape_dict"):
        from_onnx(m)
    from_onnx(m, shape_dict={"x": (3, 4)})  # pinned: the counts are known


def test_static_shapes_still_fold_to_constants():
    m = _flatten_batch_model()
    mod, _ = from_onnx(m, shape_dict={"x": (2, 3, 4)})
    (reshape,) = [c for c in (b.value for b in mod["main"].bindings()) if getattr(c, "op", "") == "reshape"]
    assert [int(d.value) for d in reshape.ty.shape] == [2, 12]


@pytest.mark.parametrize("n,b", [(17, 2), (3, 2), (17, -2), (4, -3), (10, 5)])
def test_integer_div_truncates_like_onnx(n, b):
    # (n - 10) / b may be negative either side: ONNX Div rounds toward zero
    nv = Var("n", "int64")
    q = symbolic._truncdiv(nv - 10, symbolic.as_expr(b))
    got = symbolic.simplify(substitute(q, {nv: symbolic.as_expr(n)}))
    assert got.value == int(np.trunc((n - 10) / b))


# ---- errors: a symbolic value needed at run time ----------------------------------------
def test_symbolic_value_used_as_a_tensor_is_computed_at_run_time():
    nodes = [h.make_node("Shape", ["x"], ["s"], name="sh"),
             h.make_node("Cast", ["s"], ["sf"], to=F, name="to_float"),
             h.make_node("Add", ["x", "sf"], ["y"])]
    m = model(nodes, [("x", F, ["n", 2])], [("y", F, None)])
    check_sizes(m, [(1, 2), (3, 2), (7, 2)])
    from_onnx(m, shape_dict={"x": (3, 2)})  # pinned: folds


def test_symbolic_value_as_graph_output():
    m = model([h.make_node("Shape", ["x"], ["s"]), h.make_node("Relu", ["x"], ["y"])],
              [("x", F, ["n", 3])], [("s", I64, None), ("y", F, None)])
    check_sizes(m, [(1, 3), (5, 3)])


def test_slice_with_symbolic_bounds_inside_a_static_dim():
    # w[0:n] of an (8, 3) constant: n <= 8 is recorded as a limit the runtime checks
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             h.make_node("Unsqueeze", ["n", "z"], ["nu"]),
             h.make_node("Slice", ["w", "z1", "nu", "z1"], ["c"], name="cut"),
             h.make_node("Add", ["x", "c"], ["y"])]
    m = model(nodes, [("x", F, ["n", 3])], [("y", F, None)],
              [("i0", s64(0)), ("z", i64(0)), ("z1", i64(0)),
               ("w", RNG.standard_normal((8, 3)).astype(np.float32))])
    vm = compile_vm(m)
    check_sizes(m, [(1, 3), (5, 3), (8, 3)])
    with pytest.raises(kiln.runtime.KilnError, match="'n' = 9 exceeds its bound 8"):
        vm["main"](np.zeros((9, 3), np.float32))


# ---- models exported from torch with dynamic axes ---------------------------------------
torch = pytest.importorskip("torch")


def _export(module, example, axes, path):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), str(path), input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": axes, "y": axes},
                          opset_version=17, dynamo=False)
    m = onnx.load(str(path))
    m.ir_version = min(m.ir_version, 10)
    return m


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(12, 16), torch.nn.Linear(16, 5)

    def forward(self, x):
        x = x.view(x.shape[0], -1)
        return self.fc2(torch.relu(self.fc1(x)))


class _Block(torch.nn.Module):
    """A pre-norm transformer block whose head split reads B, T, C from x.shape."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax((q @ k.transpose(-2, -1)) * (k.size(-1) ** -0.5), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def test_torch_mlp_dynamic_batch(tmp_path):
    torch.manual_seed(0)
    m = _export(_MLP(), torch.randn(2, 3, 4), {0: "N"}, tmp_path / "mlp.onnx")
    check_sizes(m, [(2, 3, 4), (9, 3, 4)])


@pytest.mark.slow
def test_torch_transformer_block_dynamic_batch_and_seq(tmp_path):
    torch.manual_seed(0)
    m = _export(_Block(), torch.randn(2, 5, 16), {0: "B", 1: "T"}, tmp_path / "block.onnx")
    reshapes = [c for c in ops_of(m) if c.op == "reshape"]
    assert reshapes and all(dims(c.ty.shape)[:2] == ["B", "T"] for c in reshapes)
    check_sizes(m, [(2, 5, 16), (3, 7, 16)])
