"""LSTM, GRU and RNN, unrolled over the time steps into linear, add and elementwise ops.

The input projection ``X W^T + biases`` of every time step is one ``linear`` per direction;
each step then adds ``H R^T`` and applies the gates (ONNX gate order: LSTM ``iofc``, GRU
``zrh``). Unrolling needs a static ``seq_length``. An omitted initial state is zero, and the
first step then skips the products with it (no zeros tensor is built, so the batch may be
symbolic). ``sequence_lens`` is accepted only when it is a constant equal to ``seq_length``
for every batch entry (the unpadded case).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, List, Optional

import numpy as np

from .common import Unsupported, converter, dim, fmt_shape, lookup, scalar_like

# ---- activations ---------------------------------------------------------------------------

# name (lower case) -> (ONNX op name or None, takes alpha, takes beta, default alpha, default beta)
_ACTIVATIONS = {
    "sigmoid": ("Sigmoid", False, False, None, None),
    "tanh": ("Tanh", False, False, None, None),
    "relu": ("Relu", False, False, None, None),
    "leakyrelu": ("LeakyRelu", True, False, 0.01, None),
    "thresholdedrelu": ("ThresholdedRelu", True, False, 1.0, None),
    "hardsigmoid": ("HardSigmoid", True, True, 0.2, 0.5),
    "elu": ("Elu", True, False, 1.0, None),
    "softsign": ("Softsign", False, False, None, None),
    "softplus": ("Softplus", False, False, None, None),
    "affine": (None, True, True, 1.0, 0.0),
    "scaledtanh": (None, True, True, 1.0, 1.0),
}


def _activation(ctx, name: str, alpha, beta) -> Callable:
    """``x -> act(x)`` for an ONNX RNN activation name (matched case-insensitively)."""
    key = name.lower()
    if key not in _ACTIVATIONS:
        raise Unsupported(f"activation {name!r} is not supported (supported: "
                          f"{', '.join(v[0] or k for k, v in _ACTIVATIONS.items())})")
    op_name = _ACTIVATIONS[key][0]
    if key == "affine":
        return lambda x: ctx.op("add", ctx.op("multiply", x, scalar_like(ctx, alpha, x)),
                                scalar_like(ctx, beta, x))
    if key == "scaledtanh":
        return lambda x: ctx.op("multiply", scalar_like(ctx, alpha, x),
                                ctx.op("tanh", ctx.op("multiply", x, scalar_like(ctx, beta, x))))
    # the elementwise converters already build these from their ONNX attributes
    fn = lookup(op_name, ctx.opset)
    attrs = {k: v for k, v in (("alpha", alpha), ("beta", beta)) if v is not None}
    return lambda x: fn(ctx, None, [x], attrs)


def _activations(ctx, attrs, defaults: List[str], num_dir: int) -> List[List[Callable]]:
    """Per direction, the activation functions, in the order the op uses them (e.g. f, g, h).
    ``activation_alpha``/``beta`` are consumed in order by the functions that take them; the
    others fall back to their ONNX defaults."""
    names = list(attrs.get("activations") or defaults * num_dir)
    n = len(defaults)
    if num_dir == 2 and len(names) == n:
        names = names * 2          # one direction's list applies to both (as onnxruntime does)
    if len(names) != n * num_dir:
        raise Unsupported(f"activations needs {n * num_dir} names ({n} per direction), got {names}")
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    funcs = []
    for name in names:
        spec = _ACTIVATIONS.get(name.lower(), (None, False, False, None, None))
        alpha = (alphas.pop(0) if alphas else spec[3]) if spec[1] else None
        beta = (betas.pop(0) if betas else spec[4]) if spec[2] else None
        funcs.append(_activation(ctx, name, alpha, beta))
    return [funcs[d * n:(d + 1) * n] for d in range(num_dir)]


# ---- shared parsing ------------------------------------------------------------------------

@dataclass
class _Rnn:
    """What every recurrent op needs, parsed from its inputs and attributes."""
    x: object                  # (seq, batch, input), layout 0 whatever the node's layout
    seq: int
    hidden: int
    num_dir: int
    reverse: List[bool]        # per direction: does it run backwards in time
    layout: int
    clip: Optional[float]
    acts: List[List[Callable]]


_DIRECTIONS = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}


def _parse(ctx, node, ins, attrs, default_acts) -> _Rnn:
    x, w, r = ins[0], ins[1], ins[2]
    direction = attrs.get("direction", "forward")
    if direction not in _DIRECTIONS:
        raise Unsupported(f"direction={direction!r} is not one of forward, reverse, bidirectional")
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        raise Unsupported(f"layout={layout} is not 0 or 1")
    if len(x.ty.shape) != 3:
        raise Unsupported(f"X must be 3-D, got {fmt_shape(x.ty.shape)}")
    if layout == 1:
        x = ctx.op("permute_dims", x, axes=(1, 0, 2))
    seq = dim(x.ty.shape[0])
    if not isinstance(seq, int):
        raise Unsupported(f"seq_length must be static to unroll the recurrence, got "
                          f"{fmt_shape(x.ty.shape)} (time first); pin the input shape with shape_dict")
    if seq == 0:
        raise Unsupported("seq_length is 0: there is no time step to run")
    hidden = attrs.get("hidden_size") or dim(r.ty.shape[-1])
    if not isinstance(hidden, int):
        raise Unsupported("hidden_size must be given or R's last dim static")
    num_dir = len(_DIRECTIONS[direction])
    if dim(w.ty.shape[0]) != num_dir:
        raise Unsupported(f"direction={direction} needs W with {num_dir} direction(s), got "
                          f"{fmt_shape(w.ty.shape)}")
    _check_sequence_lens(ctx, ins[4] if len(ins) > 4 else None, seq)
    clip = attrs.get("clip")
    return _Rnn(x, seq, hidden, num_dir, _DIRECTIONS[direction], layout, clip,
                _activations(ctx, attrs, default_acts, num_dir))


def _check_sequence_lens(ctx, lens, seq):
    """Every sequence must span all ``seq`` steps: padded batches are not supported."""
    if lens is None:
        return
    v = ctx.value(lens)
    if v is None:
        raise Unsupported("sequence_lens must be a constant equal to seq_length for every batch "
                          "entry (variable-length, padded batches are not supported)",
                          needs_constant=getattr(lens, "name", None))
    if not np.all(np.asarray(v) == seq):
        raise Unsupported(f"sequence_lens {np.asarray(v).tolist()} differs from seq_length {seq}: "
                          f"variable-length, padded batches are not supported")


def _at(ctx, t, i: int, axis: int = 0):
    """``t`` indexed at ``i`` along ``axis`` (that axis dropped)."""
    s = ctx.op("strided_slice", t, begin=(i,), end=(i + 1,), axes=(axis,))
    return ctx.op("squeeze", s, axis=(axis,))


def _rows(ctx, t, start: int, stop: int):
    """``t[start:stop]`` along axis 0 (a gate block of a weight or bias)."""
    return ctx.op("strided_slice", t, begin=(start,), end=(stop,), axes=(0,))


def _bias(ctx, b, d, width):
    """Direction ``d``'s (Wb, Rb), each of ``width``; None, None without B."""
    if b is None:
        return None, None
    bd = _at(ctx, b, d)
    return _rows(ctx, bd, 0, width), _rows(ctx, bd, width, 2 * width)


def _initial(ctx, rnn: _Rnn, state, d):
    """Direction ``d``'s initial (batch, hidden) state, or None (zero) when not given."""
    if state is None:
        return None
    return _at(ctx, state, d, axis=1 if rnn.layout == 1 else 0)


def _input_projection(ctx, rnn: _Rnn, w, d, bias):
    """``X W^T (+ bias)`` for every step of direction ``d``, listed in the order it runs."""
    xw = ctx.op("linear", rnn.x, _at(ctx, w, d))
    if bias is not None:
        xw = ctx.op("add", xw, bias)
    steps = range(rnn.seq - 1, -1, -1) if rnn.reverse[d] else range(rnn.seq)
    return [(t, _at(ctx, xw, t)) for t in steps]


def _add(ctx, a, b):
    """``a + b`` where None stands for zero."""
    if a is None:
        return b
    if b is None:
        return a
    return ctx.op("add", a, b)


def _mul(ctx, a, b):
    """``a * b`` where None stands for zero."""
    if a is None or b is None:
        return None
    return ctx.op("multiply", a, b)


def _recur(ctx, h, r):
    """``h R^T``, None for a zero ``h``."""
    return None if h is None else ctx.op("linear", h, r)


def _gate(ctx, rnn: _Rnn, act, pre):
    """``act(clip(pre))``: ``clip`` bounds the activations' inputs."""
    if rnn.clip is not None:
        pre = ctx.op("clip", pre, min=-float(rnn.clip), max=float(rnn.clip))
    return act(pre)


def _split(ctx, t, n):
    return list(ctx.op("split", t, indices_or_sections=n, axis=-1))


def _outputs(ctx, node, rnn: _Rnn, hs_per_dir, finals):
    """Y ``(seq, num_dir, batch, hidden)`` and the stacked final states ``(num_dir, batch,
    hidden)`` per state kind, transposed for layout 1; None for outputs the node leaves out."""
    outs = [None] * len(node.output)
    if node.output and node.output[0]:
        per_dir = []
        for hs in hs_per_dir:
            steps = [ctx.op("expand_dims", hs[t], axis=(0, 1)) for t in range(rnn.seq)]
            per_dir.append(ctx.op("concat", *steps, axis=0) if len(steps) > 1 else steps[0])
        y = ctx.op("concat", *per_dir, axis=1) if len(per_dir) > 1 else per_dir[0]
        outs[0] = ctx.op("permute_dims", y, axes=(2, 0, 1, 3)) if rnn.layout == 1 else y
    for k, states in enumerate(finals, start=1):
        if k < len(node.output) and node.output[k]:
            st = [ctx.op("expand_dims", s, axis=0) for s in states]
            y = ctx.op("concat", *st, axis=0) if len(st) > 1 else st[0]
            outs[k] = ctx.op("permute_dims", y, axes=(1, 0, 2)) if rnn.layout == 1 else y
    return outs


def _run(ctx, node, rnn: _Rnn, directions):
    """``directions``: per direction ``(inputs, step, states)``: the projected inputs in the
    order they run (``_input_projection``), ``step(x_t, states) -> states`` and the initial
    states (H first, None for zero). Runs the recurrence; returns the node's outputs."""
    hs_per_dir, finals = [], None
    for inputs, step, states in directions:
        hs = {}
        for t, x_t in inputs:
            states = step(x_t, states)
            hs[t] = states[0]
        hs_per_dir.append(hs)
        finals = [[s] for s in states] if finals is None else [f + [s] for f, s in zip(finals, states)]
    return _outputs(ctx, node, rnn, hs_per_dir, finals)


def _opt(ins, k):
    return ins[k] if len(ins) > k else None


# ---- RNN -----------------------------------------------------------------------------------

def _rnn_step(ctx, rnn: _Rnn, r, f, x_t, states):
    (h,) = states
    return [_gate(ctx, rnn, f, _add(ctx, x_t, _recur(ctx, h, r)))]


@converter("RNN")
def rnn_(ctx, node, ins, attrs):
    """ONNX RNN: ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``, f = Tanh by default."""
    rnn = _parse(ctx, node, ins, attrs, ["Tanh"])
    w, r, b, h0 = ins[1], ins[2], _opt(ins, 3), _opt(ins, 5)
    dirs = []
    for d in range(rnn.num_dir):
        wb, rb = _bias(ctx, b, d, rnn.hidden)
        inputs = _input_projection(ctx, rnn, w, d, _add(ctx, wb, rb))
        step = partial(_rnn_step, ctx, rnn, _at(ctx, r, d), rnn.acts[d][0])
        dirs.append((inputs, step, [_initial(ctx, rnn, h0, d)]))
    return _run(ctx, node, rnn, dirs)


# ---- LSTM ----------------------------------------------------------------------------------

def _lstm_step(ctx, rnn: _Rnn, r, peep, acts, x_t, states):
    """One LSTM step; ``peep`` is (Pi, Po, Pf) or None."""
    h, c = states
    f_act, g_act, h_act = acts
    i, o, f, g = _split(ctx, _add(ctx, x_t, _recur(ctx, h, r)), 4)
    pi, po, pf = peep or (None, None, None)
    i = _gate(ctx, rnn, f_act, _add(ctx, i, _mul(ctx, pi, c)))
    f = _gate(ctx, rnn, f_act, _add(ctx, f, _mul(ctx, pf, c)))
    g = _gate(ctx, rnn, g_act, g)
    c = _add(ctx, _mul(ctx, f, c), ctx.op("multiply", i, g))
    o = _gate(ctx, rnn, f_act, _add(ctx, o, _mul(ctx, po, c)))   # peeks at the new cell
    return [ctx.op("multiply", o, h_act(c)), c]


@converter("LSTM")
def lstm(ctx, node, ins, attrs):
    """ONNX LSTM (gates iofc, peepholes iof): Y, Y_h, Y_c."""
    if attrs.get("input_forget", 0):
        raise Unsupported("input_forget=1 (coupled input and forget gates) is not supported")
    rnn = _parse(ctx, node, ins, attrs, ["Sigmoid", "Tanh", "Tanh"])
    w, r, b = ins[1], ins[2], _opt(ins, 3)
    h0, c0, p = _opt(ins, 5), _opt(ins, 6), _opt(ins, 7)
    dirs = []
    for d in range(rnn.num_dir):
        wb, rb = _bias(ctx, b, d, 4 * rnn.hidden)
        inputs = _input_projection(ctx, rnn, w, d, _add(ctx, wb, rb))
        peep = None if p is None else _split(ctx, _at(ctx, p, d), 3)
        step = partial(_lstm_step, ctx, rnn, _at(ctx, r, d), peep, rnn.acts[d])
        dirs.append((inputs, step, [_initial(ctx, rnn, h0, d), _initial(ctx, rnn, c0, d)]))
    return _run(ctx, node, rnn, dirs)


# ---- GRU -----------------------------------------------------------------------------------

def _gru_step(ctx, rnn: _Rnn, r, rb_h, lbr, acts, x_t, states):
    """One GRU step. ``r`` is R for all three gates when ``lbr`` (linear_before_reset), else
    the pair (R for z and r, R for h); ``rb_h`` is Rbh when ``lbr`` (it is then scaled by the
    reset gate; otherwise it is in the input projection)."""
    (h,) = states
    f_act, g_act = acts
    xz, xr, xh = _split(ctx, x_t, 3)
    if lbr:
        rec = _recur(ctx, h, r)
        hz, hr, hh = _split(ctx, rec, 3) if rec is not None else (None, None, None)
    else:
        rec = _recur(ctx, h, r[0])
        hz, hr = _split(ctx, rec, 2) if rec is not None else (None, None)
    z = _gate(ctx, rnn, f_act, _add(ctx, xz, hz))
    reset = _gate(ctx, rnn, f_act, _add(ctx, xr, hr))
    if lbr:
        n = _gate(ctx, rnn, g_act, _add(ctx, xh, _mul(ctx, reset, _add(ctx, hh, rb_h))))
    else:
        n = _gate(ctx, rnn, g_act, _add(ctx, xh, _recur(ctx, _mul(ctx, reset, h), r[1])))
    # H = (1 - z) * n + z * H, written with one multiply
    if h is None:
        return [ctx.op("subtract", n, ctx.op("multiply", z, n))]
    return [ctx.op("add", n, ctx.op("multiply", z, ctx.op("subtract", h, n)))]


@converter("GRU")
def gru(ctx, node, ins, attrs):
    """ONNX GRU (gates zrh), with or without linear_before_reset: Y, Y_h."""
    rnn = _parse(ctx, node, ins, attrs, ["Sigmoid", "Tanh"])
    w, r, b, h0 = ins[1], ins[2], _opt(ins, 3), _opt(ins, 5)
    lbr = bool(attrs.get("linear_before_reset", 0))
    hsz = rnn.hidden
    dirs = []
    for d in range(rnn.num_dir):
        wb, rb = _bias(ctx, b, d, 3 * hsz)
        rb_h = None
        if lbr and rb is not None:
            # Rbh goes inside the reset gate's product; the z and r parts join the projection
            rb_h = _rows(ctx, rb, 2 * hsz, 3 * hsz)
            rb = ctx.op("pad", _rows(ctx, rb, 0, 2 * hsz), pad_width=((0, hsz),))
        inputs = _input_projection(ctx, rnn, w, d, _add(ctx, wb, rb))
        rd = _at(ctx, r, d)
        rmat = rd if lbr else (_rows(ctx, rd, 0, 2 * hsz), _rows(ctx, rd, 2 * hsz, 3 * hsz))
        step = partial(_gru_step, ctx, rnn, rmat, rb_h, lbr, rnn.acts[d])
        dirs.append((inputs, step, [_initial(ctx, rnn, h0, d)]))
    return _run(ctx, node, rnn, dirs)
