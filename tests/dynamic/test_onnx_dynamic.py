"""ONNX models with symbolic dims compile once, with no shape_dict, and match onnxruntime at
every size tried: the operators that size tensors from symbolic values (Range, Slice,
Trilu, Resize, Expand, Tile, ConstantOfShape, Reshape(-1), Where; a conv after a Resize, Tile
with repeats from shapes), a dynamic-batch CNN and a GPT-2 decode step with past key/values
exported from PyTorch, magika's model, and the ``kiln compile`` command line on them; upper
bounds (``from_onnx(bounds=)``, ``--bound``) plan the intermediates at the bound."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402
from kiln.runtime import KilnError  # noqa: E402

RNG = np.random.default_rng(0)
F, I64 = TP.FLOAT, TP.INT64
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(*i) for i in inputs],
                     [h.make_tensor_value_info(*o) for o in outputs],
                     [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10  # onnxruntime refuses newer IR versions
    return m


def compile_vm(m):
    mod, params = from_onnx(m)  # no shape_dict: the symbolic dims stay symbolic
    mod = kiln.transform.bind_params("main", params)(mod)
    return kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())


def check(m, feeds_list, rtol=1e-4, atol=1e-4, vm=None):
    """Compile ``m`` once; for each dict of inputs, compare every output with onnxruntime."""
    vm = vm or compile_vm(m)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in m.graph.input]
    for feeds in feeds_list:
        want = sess.run(None, feeds)
        got = vm["main"](*[feeds[n] for n in names])
        got = got if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            g = g.numpy()
            assert g.shape == w.shape, (g.shape, w.shape, {k: v.shape for k, v in feeds.items()})
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return vm


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def shape_of(x_name, out, *idx):
    """Shape -> Gather(idx) nodes: ``out`` is x.shape[idx] as a 1-D int64 tensor."""
    return [h.make_node("Shape", [x_name], [out + "_s"]),
            h.make_node("Gather", [out + "_s", out + "_i"], [out], axis=0)], (out + "_i", np.array(idx, np.int64))


# ---- operators over symbolic sizes ---------------------------------------------------------
def test_range_over_a_symbolic_length():
    # y = x + arange(n) (as float), n = x.shape[0]: Range's limit is a symbolic dim
    nodes, init = shape_of("x", "n", 0)
    nodes += [h.make_node("Squeeze", ["n", "ax0"], ["ns"]),
              h.make_node("Range", ["zero", "ns", "one"], ["r"]),
              h.make_node("Cast", ["r"], ["rf"], to=F), h.make_node("Add", ["x", "rf"], ["y"])]
    m = model(nodes, [("x", F, ["n"])], [("y", F, ["n"])],
              [init, ("ax0", np.array([0], np.int64)), ("zero", np.array(0, np.int64)),
               ("one", np.array(1, np.int64))])
    check(m, [{"x": f32(k)} for k in (1, 4, 9)])


def test_slice_with_symbolic_bounds_and_reshape_minus_one():
    # x[:, 1:n-1] then reshape(-1): a derived length n - 2 and a product b * (n - 2)
    nodes, init = shape_of("x", "n", 1)
    nodes += [h.make_node("Sub", ["n", "one"], ["e"]),
              h.make_node("Slice", ["x", "one", "e", "ax1"], ["s"]),
              h.make_node("Reshape", ["s", "m1"], ["y"])]
    m = model(nodes, [("x", F, ["b", "n"])], [("y", F, ["k"])],
              [init, ("one", np.array([1], np.int64)), ("ax1", np.array([1], np.int64)),
               ("m1", np.array([-1], np.int64))])
    check(m, [{"x": f32(b, n)} for b, n in ((1, 3), (2, 7), (3, 12))])


def test_trilu_where_and_expand_over_symbolic_sizes():
    # a causal mask of the input's own size: Trilu(ConstantOfShape([n, n])) as bool, Where
    nodes, init = shape_of("x", "nn", 1, 1)
    nodes += [h.make_node("ConstantOfShape", ["nn"], ["ones"], value=h.make_tensor("v", F, [1], [1.0])),
              h.make_node("Trilu", ["ones"], ["tri"], upper=0),
              h.make_node("Cast", ["tri"], ["mask"], to=TP.BOOL),
              h.make_node("Shape", ["x"], ["xs"]),
              h.make_node("Expand", ["mask", "xs"], ["mb"]),
              h.make_node("Where", ["mb", "x", "neg"], ["y"])]
    m = model(nodes, [("x", F, ["b", "n", "n"])], [("y", F, ["b", "n", "n"])],
              [init, ("neg", np.array(-1e4, np.float32))])
    check(m, [{"x": f32(b, n, n)} for b, n in ((1, 1), (2, 4), (3, 6))])


def test_tile_and_resize_over_a_symbolic_batch():
    nodes = [h.make_node("Tile", ["x", "reps"], ["t"]),
             h.make_node("Resize", ["t", "", "scales"], ["y"], mode="nearest")]
    m = model(nodes, [("x", F, ["b", 2, 3, 3])], [("y", F, ["b", 2, 12, 6])],
              [("reps", np.array([1, 1, 2, 1], np.int64)), ("scales", np.array([1, 1, 2, 2], np.float32))])
    check(m, [{"x": f32(b, 2, 3, 3)} for b in (1, 2, 5)])


def test_tile_with_symbolic_repeats():
    # repeats computed from shapes: x (2, 3) tiled (n, b) by y (b, n); x (b, 3) tiled (b, 2)
    nodes, init = shape_of("y", "nb", 1, 0)
    m = model(nodes + [h.make_node("Tile", ["x", "nb"], ["t"])], [("x", F, [2, 3]), ("y", F, ["b", "n"])],
              [("t", F, None)], [init])
    check(m, [{"x": f32(2, 3), "y": f32(b, n)} for b, n in ((1, 2), (3, 1), (2, 4))])
    nodes, init = shape_of("x", "bb", 0)
    nodes += [h.make_node("Concat", ["bb", "two"], ["reps"], axis=0), h.make_node("Tile", ["x", "reps"], ["t"])]
    m = model(nodes, [("x", F, ["b", 3])], [("t", F, None)], [init, ("two", np.array([2], np.int64))])
    check(m, [{"x": f32(b, 3)} for b in (1, 2, 5)])
    # repeats that are data (a graph input): the output's size is not a function of shapes
    m = model([h.make_node("Tile", ["x", "r"], ["t"])], [("x", F, [2, 3]), ("r", I64, [2])], [("t", F, None)])
    with pytest.raises(Exception, match="repeats must be a constant"):
        from_onnx(m)


def test_resize_nearest_over_symbolic_spatial_dims():
    # an integer-scale nearest upsample of (1, 2, h, w): (h * 2, w * 3), derived dims
    nodes = [h.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest"), h.make_node("Relu", ["r"], ["y"])]
    m = model(nodes, [("x", F, [1, 2, "h", "w"])], [("y", F, None)],
              [("scales", np.array([1, 1, 2, 3], np.float32))])
    check(m, [{"x": f32(1, 2, a, b)} for a, b in ((1, 1), (3, 4), (5, 2))])


def test_conv_after_a_symbolic_resize():
    # the conv kernel sees h only as h * 2 (its schedule also writes (h * 2 + 2) * 2 as h * 4 + 4):
    # it solves h = floor((h * 2) / 2), which the VM's shape checks make exact
    nodes = [h.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest"),
             h.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
    m = model(nodes, [("x", F, [1, 2, "h", "w"])], [("y", F, None)],
              [("scales", np.array([1, 1, 2, 2], np.float32)), ("w", f32(4, 2, 3, 3))])
    check(m, [{"x": f32(1, 2, a, b)} for a, b in ((3, 4), (5, 2))])


def _bounded_model():
    # (b, 16) -> relu -> matmul (16, 32) -> tanh: intermediates of (b, 16) and (b, 32)
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("MatMul", ["r", "w"], ["m"]),
             h.make_node("Tanh", ["m"], ["y"])]
    return model(nodes, [("x", F, ["batch-size", 16])], [("y", F, ["batch-size", 32])], [("w", f32(16, 32))])


def test_from_onnx_bounds_plan_intermediates_at_the_bound(tmp_path):
    m = _bounded_model()
    mod, params = from_onnx(m, bounds={"batch-size": 8})  # the dim_param's name, as written
    assert dict(mod["main"].attr("kiln.bounds")) == {"batch_size": 8}
    mod = kiln.transform.bind_params("main", params)(mod)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    assert ex.spec.function("main").arena_size >= 8 * 16 * 4  # planned, not from the heap
    vm = check(m, [{"x": f32(b, 16)} for b in (1, 8)], vm=kiln.VirtualMachine(ex, kiln.cpu()))
    with pytest.raises(KilnError, match="'batch_size' = 9 exceeds its bound 8"):
        vm["main"](f32(9, 16))
    with pytest.raises(Exception, match="bounds: .*'seq'.*the symbolic dims are \\['batch_size'\\]"):
        from_onnx(m, bounds={"seq": 4})
    # the command line's --bound reaches the same place
    path, out = tmp_path / "m.onnx", tmp_path / "m.so"
    onnx.save(m, str(path))
    run = subprocess.run([sys.executable, "-m", "kiln.cli", "compile", str(path), "-o", str(out), "--quiet",
                          "--bound", "batch_size=4"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    vm = check(m, [{"x": f32(b, 16)} for b in (2, 4)], vm=kiln.VirtualMachine(str(out), kiln.cpu()))
    with pytest.raises(KilnError, match="'batch_size' = 5 exceeds its bound 4"):
        vm["main"](f32(5, 16))


def test_shape_returned_and_used_as_float_at_run_time():
    # y = x / float(n) and the shape itself as an output: values computed at run time
    nodes, init = shape_of("x", "n", 1)
    nodes += [h.make_node("Cast", ["n"], ["nf"], to=F), h.make_node("Div", ["x", "nf"], ["y"]),
              h.make_node("Shape", ["x"], ["s"])]
    m = model(nodes, [("x", F, ["b", "n"])], [("y", F, ["b", "n"]), ("s", I64, [2])], [init])
    check(m, [{"x": f32(b, n)} for b, n in ((1, 1), (2, 5), (4, 3))])


# ---- whole models ------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _export(module, args, path, names, dyn):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, path, input_names=names, output_names=["y"],
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
    return onnx.load(path)


def test_dynamic_batch_cnn(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 10))
    m = _export(net, (torch.zeros(2, 3, 16, 16),), str(tmp_path / "cnn.onnx"), ["x"], {"x": {0: "batch"}})
    check(m, [{"x": f32(b, 3, 16, 16)} for b in (1, 2, 5)], rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def gpt2_onnx(tmp_path_factory):
    from gpt2_reference import GPT2, export_decode_step
    path = str(tmp_path_factory.mktemp("gpt2") / "decode.onnx")
    model = GPT2()
    export_decode_step(model, path)
    return path, model


def _decode_feeds(batch, seq, past, layers=2, heads=4, hd=8, vocab=96):
    feeds = {"input_ids": RNG.integers(0, vocab, (batch, seq)).astype(np.int64)}
    for i in range(layers):
        for kind in ("key", "value"):
            feeds[f"past_{kind}_{i}"] = f32(batch, heads, past, hd)
    return feeds


def test_gpt2_decode_step_with_past_key_values(gpt2_onnx):
    path, _ = gpt2_onnx
    m = onnx.load(path)
    vm = check(m, [_decode_feeds(1, 5, 0), _decode_feeds(1, 1, 5), _decode_feeds(2, 1, 17),
                   _decode_feeds(1, 3, 60), _decode_feeds(1, 1, 127)], rtol=1e-3, atol=1e-4)
    # past + seq beyond the model's 128 positions: refused, naming the dims (onnxruntime fails too)
    feeds = _decode_feeds(1, 2, 127)
    with pytest.raises(KilnError, match=r"'past \+ seq' = 129 exceeds its bound 128"):
        vm["main"](*feeds.values())
    # a wrong past length in one input: which input, which dim, expected vs given
    feeds = _decode_feeds(1, 1, 4)
    feeds["past_value_1"] = f32(1, 4, 5, 8)
    with pytest.raises(KilnError, match="argument 4 'past_value_1' expected shape .* with past = 4"):
        vm["main"](*feeds.values())


def _magika_model():
    spec = importlib.util.find_spec("magika")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = os.path.join(list(spec.submodule_search_locations)[0], "models")
    for root, _, files in os.walk(base) if os.path.isdir(base) else ():
        if "model.onnx" in files:
            return os.path.join(root, "model.onnx")
    return None


@pytest.mark.skipif(_magika_model() is None, reason="magika's model ships in its wheel: pip install magika")
def test_magika_at_several_batch_sizes():
    m = onnx.load(_magika_model())
    feeds = [{m.graph.input[0].name: RNG.integers(0, 257, (b, 2048)).astype(np.int32)} for b in (1, 3, 8)]
    check(m, feeds, rtol=1e-4, atol=1e-5)


def test_cli_compiles_the_decode_step_with_no_pinned_shape(gpt2_onnx, tmp_path):
    path, _ = gpt2_onnx
    out = tmp_path / "decode.so"
    run = subprocess.run([sys.executable, "-m", "kiln.cli", "compile", path, "-o", str(out), "--quiet"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    vm = kiln.VirtualMachine(str(out), kiln.cpu())
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for b, s, p in ((1, 4, 0), (1, 1, 9)):
        feeds = _decode_feeds(b, s, p)
        want = sess.run(None, feeds)
        got = vm["main"](*feeds.values())
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-3, atol=1e-4)
