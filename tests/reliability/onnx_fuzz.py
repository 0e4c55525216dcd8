"""Fuzzing of the ONNX importer (issue 17 item 1) with hypothesis, over mutations of real models:
the bytes of a serialized model flipped, cut and spliced (malformed protobuf), and structural
mutations of its graph (an initializer removed, an attribute of another type, a cycle, a huge
or negative declared dim, a node input renamed to nothing, an unknown op, another opset, an
input dtype ONNX has but Kiln does not). kiln.frontend.onnx.from_onnx must return a module or
raise ONNXImportError: any other exception is a crash, an example over the deadline a hang,
and a MemoryError an attempt at a huge allocation (the process runs under an address-space
limit, see main()).

    .venv/bin/python tests/reliability/onnx_fuzz.py [--examples N] [--random]

prints one line per strategy (examples run, imported, refused) and exits 1 on the first
failure, with hypothesis's shrunk example. tests/reliability/test_onnx_fuzz.py runs it.
"""
from __future__ import annotations

import argparse
import pathlib
import resource
import sys
import tempfile

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto as TP, helper as h, numpy_helper as nh

from kiln.frontend.onnx import ONNXImportError, from_onnx

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, [nh.from_array(a, n) for n, a in inits])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def seed_models():
    """Small real models: an MLP (Gemm, Relu), a CNN (Conv, MaxPool, Flatten, MatMul, Softmax),
    shape arithmetic on a symbolic batch (Shape, Gather, Concat, Reshape, ConstantOfShape) and
    control flow (If with a MatMul branch)."""
    f = lambda *s: RNG.standard_normal(s).astype(np.float32)  # noqa: E731
    mlp = _model([h.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
                  h.make_node("Relu", ["h"], ["r"]),
                  h.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)],
                 [h.make_tensor_value_info("x", TP.FLOAT, [1, 16])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [1, 4])],
                 [("w1", f(8, 16)), ("b1", f(8)), ("w2", f(4, 8)), ("b2", f(4))])
    cnn = _model([h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
                  h.make_node("Relu", ["c"], ["r"]),
                  h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                  h.make_node("Flatten", ["p"], ["fl"], axis=1),
                  h.make_node("MatMul", ["fl", "fc"], ["l"]),
                  h.make_node("Softmax", ["l"], ["y"], axis=-1)],
                 [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
                 [h.make_tensor_value_info("y", TP.FLOAT, [1, 5])],
                 [("w", f(4, 3, 3, 3)), ("b", f(4)), ("fc", f(64, 5))])
    shapes = _model([h.make_node("Shape", ["x"], ["s"]),
                     h.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                     h.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
                     h.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
                     h.make_node("Reshape", ["x", "shape"], ["flat"]),
                     h.make_node("ConstantOfShape", ["shape2"], ["ones"],
                                 value=nh.from_array(np.array([1.0], np.float32))),
                     h.make_node("Add", ["flat", "ones"], ["y"])],
                    [h.make_tensor_value_info("x", TP.FLOAT, ["batch", 2, 3])],
                    [h.make_tensor_value_info("y", TP.FLOAT, ["batch", 6])],
                    [("zero", np.array(0, np.int64)), ("axes", np.array([0], np.int64)),
                     ("minus1", np.array([-1], np.int64)), ("shape2", np.array([1, 6], np.int64))])
    then_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", TP.FLOAT, [2, 3])])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e0"]), h.make_node("MatMul", ["e0", "W"], ["e"])],
                          "else", [], [h.make_tensor_value_info("e", TP.FLOAT, [2, 3])])
    cond = _model([h.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
                  [h.make_tensor_value_info("flag", TP.BOOL, []),
                   h.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
                  [h.make_tensor_value_info("y", TP.FLOAT, [2, 3])], [("W", f(4, 3))])
    return {"mlp": mlp, "cnn": cnn, "shapes": shapes, "if": cond}


SEEDS = seed_models()
for _name, _m in SEEDS.items():  # the seeds themselves import
    from_onnx(_m)


class Counter:
    def __init__(self):
        self.runs = self.imported = self.refused = 0


COUNTS = {}


def _import(model_or_path, kind):
    """from_onnx; ONNXImportError is a refusal, anything else propagates (a failure)."""
    c = COUNTS.setdefault(kind, Counter())
    c.runs += 1
    try:
        from_onnx(model_or_path)
        c.imported += 1
    except ONNXImportError as e:
        assert str(e), "an ONNXImportError with no message"
        c.refused += 1


# ---- byte-level mutations: malformed protobuf ----------------------------------------------------

_TMP = pathlib.Path(tempfile.mkdtemp(prefix="kiln-onnx-fuzz-"))


@st.composite
def mutated_bytes(draw):
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))].SerializeToString())
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 32))]
    return bytes(data)


def fuzz_bytes(examples, derandomize):
    @settings(max_examples=examples, deadline=10_000, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated_bytes())
    def run(data):
        path = _TMP / "model.onnx"
        path.write_bytes(data)
        _import(str(path), "bytes: flips, cuts, splices")
    run()


# ---- structural mutations ---------------------------------------------------------------------

def _all_nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)


@st.composite
def mutated_model(draw):
    m = onnx.ModelProto()
    m.CopyFrom(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    g = m.graph
    nodes = list(_all_nodes(g))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop_init", "attr_type", "cycle", "huge_dim", "bad_dim",
                                     "drop_input", "unknown_op", "opset", "input_dtype",
                                     "init_dims", "dup_output", "drop_node", "empty_name"]))
        node = nodes[draw(st.integers(0, len(nodes) - 1))]
        if kind == "drop_init" and g.initializer:
            del g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
        elif kind == "attr_type" and node.attribute:
            a = node.attribute[draw(st.integers(0, len(node.attribute) - 1))]
            new = draw(st.sampled_from(["f", "i", "s", "ints", "floats", "t"]))
            name = a.name
            a.Clear()
            a.name = name
            if new == "f":
                a.type, a.f = onnx.AttributeProto.FLOAT, draw(st.floats(allow_nan=True))
            elif new == "i":
                a.type, a.i = onnx.AttributeProto.INT, draw(st.integers(-2**63, 2**63 - 1))
            elif new == "s":
                a.type, a.s = onnx.AttributeProto.STRING, b"x"
            elif new == "ints":
                a.type = onnx.AttributeProto.INTS
                a.ints.extend(draw(st.lists(st.integers(-2**40, 2**40), max_size=6)))
            elif new == "floats":
                a.type = onnx.AttributeProto.FLOATS
                a.floats.extend([1.5, -2.0])
            else:
                a.type = onnx.AttributeProto.TENSOR
                a.t.CopyFrom(nh.from_array(np.zeros((2, 2), np.float32)))
        elif kind == "cycle" and len(g.node) >= 2:
            i = draw(st.integers(0, len(g.node) - 2))
            later = g.node[draw(st.integers(i + 1, len(g.node) - 1))]
            if g.node[i].input and later.output:
                g.node[i].input[0] = later.output[0]
        elif kind in ("huge_dim", "bad_dim") and g.input:
            vi = g.input[draw(st.integers(0, len(g.input) - 1))]
            dims = vi.type.tensor_type.shape.dim
            if dims:
                d = dims[draw(st.integers(0, len(dims) - 1))]
                d.Clear()
                d.dim_value = (draw(st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1])) if kind == "huge_dim"
                               else draw(st.sampled_from([0, -1, -5])))
        elif kind == "drop_input" and node.input:
            node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(["", "nowhere"]))
        elif kind == "unknown_op":
            node.op_type = draw(st.sampled_from(["NoSuchOp", "", "conv", "Loop"]))
        elif kind == "opset":
            m.opset_import[0].version = draw(st.sampled_from([0, 1, 6, 99999, -1]))
        elif kind == "input_dtype" and g.input:
            g.input[draw(st.integers(0, len(g.input) - 1))].type.tensor_type.elem_type = draw(
                st.sampled_from([TP.STRING, TP.COMPLEX64, TP.UNDEFINED, 999, TP.FLOAT16, TP.INT8]))
        elif kind == "init_dims" and g.initializer:
            t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
            t.dims[:] = draw(st.lists(st.integers(-3, 2**40), min_size=0, max_size=4))
        elif kind == "dup_output" and len(g.node) >= 2:
            g.node[0].output[0] = g.node[1].output[0]
        elif kind == "drop_node" and len(g.node) >= 2:
            del g.node[draw(st.integers(0, len(g.node) - 1))]
        elif kind == "empty_name" and node.output:
            node.output[0] = ""
    return m


def fuzz_structure(examples, derandomize):
    @settings(max_examples=examples, deadline=10_000, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated_model())
    def run(m):
        _import(m, "graph: missing initializers, attribute types, cycles, dims, ops, opsets, dtypes")
    run()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=200, help="per strategy")
    p.add_argument("--random", action="store_true", help="a fresh random run (default: derandomized)")
    p.add_argument("--memory-gb", type=float, default=8, help="address-space limit of this process")
    args = p.parse_args(argv)
    # An attempt to allocate a huge array fails at once (MemoryError, a test failure) instead of
    # swapping the machine: the limit is far above what importing these small models needs.
    limit = int(args.memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    failed = False
    for fuzz in (fuzz_bytes, fuzz_structure):
        try:
            fuzz(args.examples, not args.random)
        except BaseException as e:  # hypothesis re-raises the shrunk failure
            import traceback
            traceback.print_exc()
            print(f"FAILED {fuzz.__name__}: {type(e).__name__}: {e}", flush=True)
            failed = True
    for kind, c in COUNTS.items():
        print(f"{kind}: {c.runs} examples, {c.imported} imported, {c.refused} refused with ONNXImportError")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
