"""Model graphs the transform tests share, built with FunctionBuilder: an MLP, conv + batch
norm + relu, and a transformer encoder block (pre-norm attention + MLP)."""
import numpy as np

from kiln import ops
from kiln.ir import FunctionBuilder, GraphVar, IRModule, TensorType
from kiln.ir.graph import Constant


def typed(name, shape, dtype="float32"):
    return GraphVar(name, TensorType(tuple(shape), dtype))


def mlp(batch=1, sizes=(784, 256, 10)):
    """linear + bias + relu, linear + bias (API.md section 1)."""
    x = typed("x", (batch, sizes[0]))
    params = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        params += [typed(f"w{i}", (b, a)), typed(f"b{i}", (b,))]
    fb = FunctionBuilder([x] + params)
    last = len(sizes) - 2
    with fb.dataflow():
        h = x
        for i in range(last + 1):
            y = ops.call("add", fb.emit(ops.call("linear", h, params[2 * i])), params[2 * i + 1])
            h = fb.emit_output(y) if i == last else fb.emit(ops.call("relu", fb.emit(y)))
    return IRModule({"main": fb.finish(h)})


def transformer_block(S=16, D=64, H=4, F=128):
    """x + attention(layer_norm(x)), then + mlp(layer_norm(.)) with gelu; H heads."""
    dh = D // H
    x = typed("x", (1, S, D))
    shapes = {"ln1_g": (D,), "ln1_b": (D,), "wq": (D, D), "bq": (D,), "wk": (D, D), "bk": (D,),
              "wv": (D, D), "bv": (D,), "wo": (D, D), "bo": (D,), "ln2_g": (D,), "ln2_b": (D,),
              "w1": (F, D), "b1": (F,), "w2": (D, F), "b2": (D,)}
    p = {n: typed(n, s) for n, s in shapes.items()}
    fb = FunctionBuilder([x] + list(p.values()))

    def e(op, *args, **attrs):
        return fb.emit(ops.call(op, *args, **attrs))

    with fb.dataflow():
        h = e("layer_norm", x, p["ln1_g"], p["ln1_b"])

        def heads(w, b, perm):
            t = e("add", e("linear", h, p[w]), p[b])
            return e("permute_dims", e("reshape", t, shape=(1, S, H, dh)), axes=perm)
        q = heads("wq", "bq", (0, 2, 1, 3))
        k = heads("wk", "bk", (0, 2, 3, 1))
        v = heads("wv", "bv", (0, 2, 1, 3))
        scale = Constant(np.array(1.0 / np.sqrt(dh), "float32"))
        a = e("softmax", e("multiply", e("matmul", q, k), scale), axis=-1)
        o = e("reshape", e("permute_dims", e("matmul", a, v), axes=(0, 2, 1, 3)), shape=(1, S, D))
        x1 = e("add", e("add", e("linear", o, p["wo"]), p["bo"]), x)
        h2 = e("layer_norm", x1, p["ln2_g"], p["ln2_b"])
        f = e("gelu", e("add", e("linear", h2, p["w1"]), p["b1"]))
        out = fb.emit_output(ops.call("add", e("add", e("linear", f, p["w2"]), p["b2"]), x1))
    return IRModule({"main": fb.finish(out)})


def conv_bn_relu(N=1, C=8, H=16, W=16, O=16, as_scale_shift=False):
    """conv2d (3x3, pad 1) -> inference batch norm -> relu. With ``as_scale_shift`` the batch
    norm is ``x * scale + shift`` with per-channel (O, 1, 1) tensors, as frontends fold it."""
    x, w = typed("x", (N, C, H, W)), typed("w", (O, C, 3, 3))
    if as_scale_shift:
        bn = [typed("scale", (O, 1, 1)), typed("shift", (O, 1, 1))]
    else:
        bn = [typed(n, (O,)) for n in ("gamma", "beta", "mean", "var")]
    fb = FunctionBuilder([x, w] + bn)

    def e(op, *args, **attrs):
        return fb.emit(ops.call(op, *args, **attrs))

    with fb.dataflow():
        y = e("conv2d", x, w, padding=(1, 1))
        if as_scale_shift:
            y = e("add", e("multiply", y, bn[0]), bn[1])
        else:
            y = e("batch_norm", y, *bn)
        out = fb.emit_output(ops.call("relu", y))
    return IRModule({"main": fb.finish(out)})
