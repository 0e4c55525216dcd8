"""ONNX Loop and Scan (unrolled at import time) and the sequence/optional operators (import-time
values), checked against onnxruntime; a torch-scripted loop exported to ONNX among them."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402

F, I64, B = TP.FLOAT, TP.INT64, TP.BOOL
RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, opset=17, inits=()):
    g = h.make_graph(nodes, "main", inputs, outputs, [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _run_kiln(model, feeds, **import_kw):
    mod, params = from_onnx(model, **import_kw)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    out = vm["main"](*feeds)
    return [np.asarray(o.numpy() if hasattr(o, "numpy") else o)
            for o in (out if isinstance(out, (list, tuple)) else [out])]


def _run_ort(model, feeds: dict):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_torch_scripted_loop_matches_onnxruntime():
    """A real exporter's Loop: torch.jit.script of a Python for-loop over a tensor trip count,
    exported by the TorchScript ONNX exporter, compiled for two trip counts."""
    torch = pytest.importorskip("torch")

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, n: torch.Tensor):
            h_ = x
            for _ in range(int(n)):
                h_ = torch.tanh(self.lin(h_)) + x
            return h_

    import io
    import warnings
    torch.manual_seed(0)
    x = torch.randn(2, 8)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(Recurrent()), (x, torch.tensor(3)), buf, dynamo=False,
                          input_names=["x", "n"], output_names=["y"], opset_version=17)
    model = onnx.load_from_string(buf.getvalue())
    assert [n.op_type for n in model.graph.node if n.op_type == "Loop"] == ["Loop"]
    xs = x.numpy()
    for trips in (2, 5):
        (want,) = _run_ort(model, {"x": xs, "n": np.asarray(trips, np.int64)})
        (got,) = _run_kiln(model, [xs], const_inputs={"n": np.asarray(trips, np.int64)})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # without the trip count the error names the input to fix
    with pytest.raises(ONNXImportError, match="trip count M must be a constant") as ei:
        from_onnx(model)
    assert ei.value.needs_constant == "n" and "--const-input n=VALUE" in str(ei.value)


def test_scan_axes_and_directions():
    """Two states, a scan input read backwards along axis 1, a scan output stacked in reverse
    along axis 1 and one forwards along axis 0."""
    body = h.make_graph(
        [h.make_node("Add", ["s_in", "xt"], ["s_out"]), h.make_node("Mul", ["p_in", "xt"], ["p_out"]),
         h.make_node("Identity", ["s_out"], ["o1"]), h.make_node("Sub", ["p_out", "s_out"], ["o2"])],
        "body", [h.make_tensor_value_info(n, F, [3]) for n in ("s_in", "p_in", "xt")],
        [h.make_tensor_value_info(n, F, [3]) for n in ("s_out", "p_out", "o1", "o2")])
    scan = h.make_node("Scan", ["s0", "p0", "x"], ["s", "p", "ys", "zs"], body=body, num_scan_inputs=1,
                       scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1, 0],
                       scan_output_directions=[1, 0])
    model = _model([scan], [h.make_tensor_value_info("s0", F, [3]), h.make_tensor_value_info("p0", F, [3]),
                            h.make_tensor_value_info("x", F, [3, 4])],
                   [h.make_tensor_value_info(n, F, None) for n in ("s", "p", "ys", "zs")])
    s0, p0 = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    want = _run_ort(model, {"s0": s0, "p0": p0, "x": x})
    got = _run_kiln(model, [s0, p0, x])
    assert [g.shape for g in got] == [(3,), (3,), (3, 4), (4, 3)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loop_with_scan_output_and_early_exit():
    """A while loop whose condition folds at import time: it stops after 3 of at most 10
    iterations; the carried value and the stacked scan output match onnxruntime."""
    body = h.make_graph(
        [h.make_node("Add", ["y_in", "x"], ["y_out"]),
         h.make_node("Less", ["i", "two"], ["c_out"]),
         h.make_node("Identity", ["y_out"], ["scan"])],
        "body", [h.make_tensor_value_info("i", I64, []), h.make_tensor_value_info("c", B, []),
                 h.make_tensor_value_info("y_in", F, [2])],
        [h.make_tensor_value_info("c_out", B, []), h.make_tensor_value_info("y_out", F, [2]),
         h.make_tensor_value_info("scan", F, [2])])
    model = _model([h.make_node("Loop", ["M", "c0", "y0"], ["y", "ys"], body=body)],
                   [h.make_tensor_value_info("y0", F, [2]), h.make_tensor_value_info("x", F, [2])],
                   [h.make_tensor_value_info("y", F, None), h.make_tensor_value_info("ys", F, None)],
                   inits=[("M", np.int64(10)), ("c0", np.bool_(True)), ("two", np.int64(2))])
    y0, x = np.float32([1, 2]), np.float32([0.5, -1])
    want = _run_ort(model, {"y0": y0, "x": x})
    got = _run_kiln(model, [y0, x])
    assert got[1].shape == (3, 2)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def _while_model(trip_count=True, scan_output=False):
    """``for i in range(8): if not sum(y) < limit: break; y = y * 2 + w`` (w an outer
    initializer): the condition depends on the inputs, so it is only known at run time."""
    outs = [h.make_tensor_value_info("c_out", B, []), h.make_tensor_value_info("y_out", F, [3])]
    nodes = [h.make_node("Mul", ["y_in", "two"], ["y2"]), h.make_node("Add", ["y2", "w"], ["y_out"]),
             h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0), h.make_node("Less", ["s", "limit"], ["c_out"])]
    if scan_output:
        nodes.append(h.make_node("Identity", ["y_out"], ["row"]))
        outs.append(h.make_tensor_value_info("row", F, [3]))
    body = h.make_graph(nodes, "body", [h.make_tensor_value_info("i", I64, []), h.make_tensor_value_info("c", B, []),
                                        h.make_tensor_value_info("y_in", F, [3])], outs)
    loop_outs = ["y", "rows"] if scan_output else ["y"]
    return _model([h.make_node("ReduceSum", ["y0"], ["s0"], keepdims=0), h.make_node("Less", ["s0", "limit"], ["c0"]),
                   h.make_node("Loop", ["M" if trip_count else "", "c0", "y0"], loop_outs, body=body)],
                  [h.make_tensor_value_info("y0", F, [3]), h.make_tensor_value_info("limit", F, [])],
                  [h.make_tensor_value_info(n, F, None) for n in loop_outs],
                  inits=[("M", np.int64(8)), ("two", np.float32(2)), ("w", np.float32([0.5, -1, 1]))])


def test_loop_with_run_time_condition_matches_onnxruntime():
    """A condition known only at run time under a fixed trip count: one compiled body, called
    by the VM's IF while the condition holds; one executable runs 0, 1, 3 and all 8 iterations."""
    model = _while_model()
    mod, params = from_onnx(model)
    assert {"main_loop0_body", "main_loop0_body_skip"} <= set(mod.functions)
    mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    y0 = np.float32([0.1, 0.2, 0.3])
    for limit in (-1.0, 3.0, 20.0, 1e9):
        feeds = {"y0": y0, "limit": np.asarray(limit, np.float32)}
        (want,) = _run_ort(model, feeds)
        got = vm["main"](y0, feeds["limit"])
        np.testing.assert_allclose(np.asarray(got.numpy()), want, rtol=1e-6)


@pytest.mark.parametrize("trip_count,scan_output,message", [
    (False, False, "the loop is not bounded"), (True, True, "the condition must be a constant")])
def test_loop_run_time_iteration_count_is_refused(trip_count, scan_output, message):
    """No trip count (nor a condition that becomes provably false), or a scan output: the number
    of iterations (or rows) would be a run-time value; the error names the graph input behind
    the condition."""
    with pytest.raises(ONNXImportError, match=message) as ei:
        from_onnx(_while_model(trip_count, scan_output))
    assert ei.value.needs_constant in ("y0", "limit")


def test_torch_scripted_loop_with_break_matches_onnxruntime():
    """``for _ in range(10): if h.abs().sum() > limit: break`` through torch.jit.script and the
    TorchScript exporter: a Loop with M = INT64_MAX, the counter carried, ``cond = not_broken
    and counter < 10``. One executable runs 0 to 10 iterations, as the input decides."""
    torch = pytest.importorskip("torch")

    class EarlyExit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, limit):
            h_ = x
            for _ in range(10):
                if bool(h_.abs().sum() > limit):
                    break
                h_ = torch.tanh(self.lin(h_)) + h_
            return h_

    import io
    import warnings
    torch.manual_seed(0)
    net, x = EarlyExit(), torch.randn(2, 8)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(net), (x, torch.tensor(20.0)), buf, dynamo=False,
                          input_names=["x", "limit"], output_names=["y"], opset_version=17)
    model = onnx.load_from_string(buf.getvalue())
    assert [n.op_type for n in model.graph.node].count("Loop") == 1

    def iterations(limit):   # how many bodies the input makes run
        h_, n = x, 0
        with torch.no_grad():
            while n < 10 and not bool(h_.abs().sum() > limit):
                h_, n = torch.tanh(net.lin(h_)) + h_, n + 1
        return n
    mod, params = from_onnx(model)
    mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    xs = x.numpy()
    start = float(np.abs(xs).sum())
    limits = (start - 1, start + 2, start + 8, 1e9)
    assert [iterations(lim) for lim in limits][::3] == [0, 10]
    assert len({iterations(lim) for lim in limits}) == 4
    for limit in limits:
        feeds = {"x": xs, "limit": np.asarray(limit, np.float32)}
        (want,) = _run_ort(model, feeds)
        got = np.asarray(vm["main"](xs, feeds["limit"]).numpy())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sequence_ops_match_onnxruntime():
    nodes = [
        h.make_node("SplitToSequence", ["x"], ["seq"], axis=0, keepdims=0),    # 3 rows of (4,)
        h.make_node("SequenceInsert", ["seq", "y", "one"], ["seq2"]),          # 4 elements, y second
        h.make_node("SequenceErase", ["seq2", "minus1"], ["seq3"]),            # the last one gone
        h.make_node("SequenceLength", ["seq3"], ["n"]),
        h.make_node("SequenceAt", ["seq3", "one"], ["at"]),
        h.make_node("ConcatFromSequence", ["seq3"], ["stacked"], axis=-1, new_axis=1),
        h.make_node("ConcatFromSequence", ["seq3"], ["flat"], axis=0),
        h.make_node("SequenceConstruct", ["y", "at"], ["pair"]),
        h.make_node("ConcatFromSequence", ["pair"], ["pair_cat"], axis=0, new_axis=1),
    ]
    model = _model(nodes, [h.make_tensor_value_info("x", F, [3, 4]), h.make_tensor_value_info("y", F, [4])],
                   [h.make_tensor_value_info(n, t, None) for n, t in
                    (("n", I64), ("at", F), ("stacked", F), ("flat", F), ("pair_cat", F))],
                   inits=[("one", np.int64(1)), ("minus1", np.int64(-1))])
    x, y = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    want = _run_ort(model, {"x": x, "y": y})
    got = _run_kiln(model, [x, y])
    assert [g.shape for g in got] == [w.shape for w in want] == [(), (4,), (4, 3), (12,), (2, 4)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_sequence_input_and_output():
    """A sequence graph input is one parameter per element, its length fixed by shape_dict; a
    sequence output is a tuple of its elements."""
    seq_t = h.make_sequence_type_proto(h.make_tensor_type_proto(F, None))
    model = _model([h.make_node("SequenceInsert", ["s", "t"], ["out"])],
                   [h.make_value_info("s", seq_t), h.make_tensor_value_info("t", F, [2])],
                   [h.make_value_info("out", seq_t)])
    with pytest.raises(ONNXImportError, match=r"shape_dict=\{'s': \[shape0, shape1, \.\.\.\]\}"):
        from_onnx(model)
    a, b, t = np.float32([1, 2, 3]), np.float32([[4]]), np.float32([5, 6])
    got = _run_kiln(model, [a, b, t], shape_dict={"s": [(3,), (1, 1)]})
    assert len(got) == 3
    for g, w in zip(got, [a, b, t]):
        np.testing.assert_array_equal(g, w)


@pytest.mark.slow
def test_long_scan_compiles():
    """A 300-step Scan (a running sum): its rows are taken one by one and stacked by a tree of
    concats (one concat of 300 inputs overflowed Python's recursion in structural hashing)."""
    body = h.make_graph([h.make_node("Add", ["s_in", "xt"], ["s_out"]), h.make_node("Identity", ["s_out"], ["o"])],
                        "body", [h.make_tensor_value_info(n, F, [2]) for n in ("s_in", "xt")],
                        [h.make_tensor_value_info(n, F, [2]) for n in ("s_out", "o")])
    model = _model([h.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1)],
                   [h.make_tensor_value_info("s0", F, [2]), h.make_tensor_value_info("x", F, [300, 2])],
                   [h.make_tensor_value_info(n, F, None) for n in ("s", "ys")])
    s0, x = np.float32([1, -1]), RNG.standard_normal((300, 2)).astype(np.float32)
    s, ys = _run_kiln(model, [s0, x])
    want = s0 + np.cumsum(x, axis=0, dtype=np.float64)
    np.testing.assert_allclose(ys, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s, want[-1], rtol=1e-4, atol=1e-4)


def test_torch_scripted_loop_over_a_dynamic_dim():
    """``for t in range(x.size(0))`` with x's first dim dynamic (T): the trip count is a
    symbolic dim, so the loop runs as guarded IF calls while ``t < T``, up to 256 iterations,
    which the runtime enforces (T = 300 is refused by name). One executable, three lengths."""
    torch = pytest.importorskip("torch")

    class Recurrence(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.Linear(16, 8)

        def forward(self, x):
            h_ = torch.zeros(x.size(1), 8)
            for t in range(x.size(0)):
                h_ = torch.tanh(self.cell(torch.cat([x[t], h_], 1)))
            return h_

    import io
    import warnings
    torch.manual_seed(0)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(Recurrence()), (torch.randn(5, 2, 8),), buf, dynamo=False,
                          input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "T"}})
    model = onnx.load_from_string(buf.getvalue())
    assert [n.op_type for n in model.graph.node].count("Loop") == 1
    mod, params = from_onnx(model)
    mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    for steps in (1, 3, 17):
        x = RNG.standard_normal((steps, 2, 8)).astype(np.float32)
        (want,) = _run_ort(model, {"x": x})
        np.testing.assert_allclose(np.asarray(vm["main"](x).numpy()), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(kiln.KilnError, match="'T' = 300 exceeds its bound 256"):
        vm["main"](np.zeros((300, 2, 8), np.float32))


def test_if_with_sequence_outputs_at_run_time():
    """A run-time If whose branches both give a sequence of two (4,) tensors: the call_if
    returns the elements; one executable takes either branch."""
    seq_t = h.make_sequence_type_proto(h.make_tensor_type_proto(F, [4]))
    then_g = h.make_graph([h.make_node("SequenceConstruct", ["x", "y"], ["s1"])], "then", [],
                          [h.make_value_info("s1", seq_t)])
    else_g = h.make_graph([h.make_node("Add", ["y", "y"], ["yy"]), h.make_node("SequenceConstruct", ["yy", "x"], ["s2"])],
                          "else", [], [h.make_value_info("s2", seq_t)])
    model = _model([h.make_node("If", ["c"], ["s"], then_branch=then_g, else_branch=else_g),
                    h.make_node("ConcatFromSequence", ["s"], ["out"], axis=0, new_axis=1)],
                   [h.make_tensor_value_info("c", B, []), h.make_tensor_value_info("x", F, [4]),
                    h.make_tensor_value_info("y", F, [4])], [h.make_tensor_value_info("out", F, None)])
    mod, params = from_onnx(model)
    assert any(n.endswith("_then") for n in mod.functions)   # a run-time If, not folded
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    x, y = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    for c in (True, False):
        (want,) = _run_ort(model, {"c": np.asarray(c), "x": x, "y": y})
        np.testing.assert_array_equal(np.asarray(vm["main"](np.asarray(c), x, y).numpy()), want)
