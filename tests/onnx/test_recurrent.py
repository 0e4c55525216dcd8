"""LSTM, GRU and RNN import (kiln/frontend/onnx/recurrent.py) and Pad's reflect, edge and wrap
modes, on small onnx.helper graphs compiled with the default pipeline, against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h, numpy_helper as nh  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import ONNXImportError, from_onnx  # noqa: E402

F = TP.FLOAT
RNG = np.random.default_rng(0)
SEQ, BATCH, INPUT, HIDDEN = 4, 2, 5, 3
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def rand(*shape, scale=1.0):
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def model(nodes, inputs, outputs, inits=(), opset=17):
    """inputs/outputs: (name, elem type, shape or None); inits: (name, array)."""
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(*i) for i in inputs],
                     [h.make_tensor_value_info(*o) for o in outputs],
                     [nh.from_array(np.asarray(a), n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10  # onnxruntime refuses newer IR versions than it knows
    return m


def ort_run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def ort_run_batchwise(m, feeds):
    """onnxruntime has no layout=1 recurrent kernels: run the layout=0 twin of ``m`` on the
    transposed inputs and transpose its outputs back."""
    m0 = onnx.ModelProto()
    m0.CopyFrom(m)
    node = m0.graph.node[0]
    for a in node.attribute:
        if a.name == "layout":
            a.i = 0
    for vi in m0.graph.input:
        dims = vi.type.tensor_type.shape.dim
        dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    outs = ort_run(m0, {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in feeds.items()})
    return [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.swapaxes(0, 1) for o in outs]


def check(m, feeds, rtol=1e-4, atol=1e-4, shape_dict=None):
    batchwise = any(a.name == "layout" and a.i == 1 for a in m.graph.node[0].attribute)
    want = (ort_run_batchwise if batchwise else ort_run)(m, feeds)
    mod, params = from_onnx(m, shape_dict=shape_dict)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    out = vm["main"](*feeds.values())
    got = [np.asarray(o.numpy() if hasattr(o, "numpy") else o)
           for o in (out if isinstance(out, (list, tuple)) else [out])]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def recurrent_model(op, direction="forward", layout=0, bias=True, init_h=False, init_c=False,
                    peep=False, outputs=None, seq_lens=None, **attrs):
    """One ``op`` node with seeded weights as initializers; X (and the initial states when
    asked) are graph inputs. Returns (model, feeds)."""
    nd = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x_shape = (BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT)
    s_shape = (BATCH, nd, HIDDEN) if layout else (nd, BATCH, HIDDEN)
    inits = [("W", rand(nd, g * HIDDEN, INPUT, scale=0.5)), ("R", rand(nd, g * HIDDEN, HIDDEN, scale=0.5))]
    names = ["X", "W", "R", "", "", "", "", ""]
    feeds = {"X": rand(*x_shape)}
    inputs = [("X", F, list(x_shape))]
    if bias:
        inits.append(("B", rand(nd, 2 * g * HIDDEN, scale=0.5)))
        names[3] = "B"
    if seq_lens is not None:
        inits.append(("L", np.asarray(seq_lens, np.int32)))
        names[4] = "L"
    for k, (flag, nm) in enumerate(((init_h, "H0"), (init_c, "C0")), start=5):
        if flag:
            names[k] = nm
            feeds[nm] = rand(*s_shape)
            inputs.append((nm, F, list(s_shape)))
    if peep:
        inits.append(("P", rand(nd, 3 * HIDDEN, scale=0.5)))
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outs = outputs or (["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"])
    node = h.make_node(op, names, outs, hidden_size=HIDDEN, direction=direction, layout=layout, **attrs)
    return model([node], inputs, [(o, F, None) for o in outs if o], inits, opset=14), feeds


# ---- LSTM ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(),
    dict(bias=False),
    dict(direction="reverse", init_h=True, init_c=True),
    dict(direction="bidirectional", layout=1, init_h=True, init_c=True, peep=True),
    dict(direction="bidirectional", peep=True, clip=0.7),
    dict(layout=1, init_c=True),
    dict(activations=["Relu", "Tanh", "Sigmoid"]),
    dict(direction="bidirectional", activations=["HardSigmoid", "Tanh", "Tanh"] * 2,
         activation_alpha=[0.3, 0.25], activation_beta=[0.4, 0.6]),
    dict(outputs=["", "Y_h"]),
    dict(outputs=["Y"], seq_lens=[SEQ] * BATCH),
], ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "defaults")
def test_lstm(kw):
    m, feeds = recurrent_model("LSTM", **kw)
    check(m, feeds)


# ---- GRU -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(),
    dict(linear_before_reset=1),
    dict(linear_before_reset=1, bias=False, init_h=True),
    dict(direction="reverse", init_h=True),
    dict(direction="bidirectional", layout=1, init_h=True),
    dict(direction="bidirectional", linear_before_reset=1, layout=1, clip=0.5),
    dict(activations=["Sigmoid", "Relu"]),
], ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "defaults")
def test_gru(kw):
    m, feeds = recurrent_model("GRU", **kw)
    check(m, feeds)


# ---- RNN -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(),
    dict(direction="bidirectional", layout=1, init_h=True),
    dict(direction="reverse", activations=["Relu"], clip=1.0),
    dict(direction="bidirectional", activations=["Tanh", "Sigmoid"]),
], ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "defaults")
def test_rnn(kw):
    m, feeds = recurrent_model("RNN", **kw)
    check(m, feeds)


def test_rnn_weights_as_graph_inputs():
    """W, R and B need not be constants: the projections are then run-time linears."""
    w, r, b = rand(1, HIDDEN, INPUT), rand(1, HIDDEN, HIDDEN), rand(1, 2 * HIDDEN)
    node = h.make_node("RNN", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=HIDDEN)
    m = model([node], [("X", F, [SEQ, BATCH, INPUT]), ("W", F, list(w.shape)), ("R", F, list(r.shape)),
                       ("B", F, list(b.shape))], [("Y", F, None), ("Y_h", F, None)], opset=14)
    check(m, {"X": rand(SEQ, BATCH, INPUT), "W": w, "R": r, "B": b})


# ---- what is refused ---------------------------------------------------------------------

def test_padded_sequence_lens_are_refused():
    m, _ = recurrent_model("LSTM", seq_lens=[SEQ, SEQ - 1])
    with pytest.raises(ONNXImportError, match=r"sequence_lens \[4, 3\] differs from seq_length 4"):
        from_onnx(m)


def test_symbolic_seq_length_is_refused():
    m, _ = recurrent_model("GRU")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "T"
    with pytest.raises(ONNXImportError, match="seq_length must be static to unroll the recurrence"):
        from_onnx(m)
    from_onnx(m, shape_dict={"X": (SEQ, BATCH, INPUT)})   # pinned: fine


def test_unknown_activation_is_refused():
    m, _ = recurrent_model("RNN", activations=["Gelu"])
    with pytest.raises(ONNXImportError, match="activation 'Gelu' is not supported"):
        from_onnx(m)


# ---- Pad modes -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [
    ([1, 2, 2, 1], None),
    ([0, 2, 1, 0, 2, 3], None),
    ([2, 3], [-1]),
    ([0, -1, 2, 1], None),            # a negative pad crops first (as onnxruntime does)
])
def test_pad_modes(mode, pads, axes):
    x = rand(2, 3, 4) if len(pads) == 6 else rand(3, 4)
    inits = [("pads", np.asarray(pads, np.int64))]
    names = ["x", "pads"]
    if axes is not None:
        inits.append(("axes", np.asarray(axes, np.int64)))
        names += ["", "axes"]
    node = h.make_node("Pad", names, ["y"], mode=mode)
    m = model([node], [("x", F, list(x.shape))], [("y", F, None)], inits, opset=18)
    check(m, {"x": x})
