"""default_schedule: every unscheduled kernel gets a schedule by kind and still computes the
same thing (compiled with kiln.build, compared with the unscheduled kernel)."""
import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import assert_structural_equal
from kiln.ir.graph import Constant
from kiln.script import T
from kiln.transform import PassContext, default_schedule, fold_constant, fuse_ops, legalize
from kiln.transform.default_schedule import needs_schedule, schedule_kernel

from transform_helpers import AVX2, AVX2_CTX, attr, check_same_results, graph_module, kernels, typed
from transform_models import conv_bn_relu, transformer_block


@kiln.script.ir_module
class Before:
    @T.prim_func
    def fused_exp_add(x: T.Buffer((64, 256), "float32"), y: T.Buffer((256,), "float32"),
                      add: T.Buffer((64, 256), "float32")):
        exp = T.alloc_buffer((64, 256), "float32")
        for i0, i1 in T.grid(64, 256):
            with T.block("exp"):
                vi0, vi1 = T.axis.remap("SS", [i0, i1])
                exp[vi0, vi1] = T.exp(x[vi0, vi1])
        for i0, i1 in T.grid(64, 256):
            with T.block("add"):
                vi0, vi1 = T.axis.remap("SS", [i0, i1])
                add[vi0, vi1] = exp[vi0, vi1] + y[vi1]


@kiln.script.ir_module
class Expected:
    @T.prim_func
    def fused_exp_add(x: T.Buffer((64, 256), "float32"), y: T.Buffer((256,), "float32"),
                      add: T.Buffer((64, 256), "float32")):
        T.func_attr({"kiln.decisions": "add.parallel=true", "kiln.schedule": "elementwise: vectorize 256, parallel", "kiln.scheduled_for": "x86_64 v256x16 fma2x4"})
        for i0 in T.parallel(64):
            for i1 in T.vectorized(256):
                with T.block("add"):
                    vi0, vi1 = T.axis.remap("SS", [i0, i1])
                    add[vi0, vi1] = T.exp(x[vi0, vi1]) + y[vi1]


def test_elementwise_before_expected():
    assert_structural_equal(default_schedule(AVX2_CTX)(Before), Expected)


def _single(op, arg_shapes, attrs=None, fuse=False, dtype="float32"):
    args = [typed(f"x{i}", s, dtype) for i, s in enumerate(arg_shapes)]
    mod = graph_module(args, lambda emit, *a: ops.call(op, *a, **(attrs or {})))
    return mod


def _kernels_of(mod):
    return [(k, mod[k]) for k in kernels(mod)]


CASES = [
    ("add", [(4, 33), (33,)], {}, "elementwise"),
    ("gelu", [(8, 1000)], {}, "elementwise"),
    ("permute_dims", [(2, 3, 4, 8)], {"axes": (0, 2, 1, 3)}, "elementwise"),
    ("reshape", [(2, 3, 4, 8)], {"shape": (6, 32)}, "elementwise"),
    ("concat", [(2, 3), (2, 5)], {"axis": 1}, "elementwise"),
    ("take", [(10, 16)], {}, None),
    ("softmax", [(8, 64)], {"axis": -1}, "reduction"),
    ("softmax", [(2, 4, 16, 16)], {"axis": -1}, "reduction"),
    ("layer_norm", [(2, 8, 64), (64,), (64,)], {}, "reduction"),
    ("sum", [(8, 16)], {"axis": 1}, None),
    ("mean", [(8, 16)], {"axis": 0}, None),
    ("max_pool2d", [(1, 4, 8, 8)], {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)},
     None),
    ("matmul", [(32, 64), (64, 48)], {}, "matmul: tile 4x16"),
    ("matmul", [(30, 20), (20, 12)], {}, "matmul: tile 6x12"),
    ("matmul", [(64, 20), (20, 12)], {}, "matmul: tile 6x12"),  # last tile guarded (64 = 10 x 6 + 4)
    ("matmul", [(7, 5), (5, 3)], {}, "matmul"),
    ("matmul", [(2, 4, 8, 16), (2, 4, 16, 8)], {}, "matmul: tile 8x8"),
    ("matmul", [(2, 16, 16), (16, 32)], {}, "matmul: tile 4x16"),
    # PyTorch's sequence-first attention projection, (L, 1, E) @ W: the L rows are tiled, not
    # the one row of each (which made each of L a one-row product, tile 1x2x16)
    ("matmul", [(37, 1, 24), (24, 32)], {}, "matmul: tile 5x16"),
    ("linear", [(2, 16, 64), (48, 64)], {}, "matmul: tile 4x16, epilogue none, pack per panel"),
    ("linear", [(1, 64), (10, 64)], {}, "matmul: tile 1x10"),
    ("conv2d", [(1, 8, 10, 10), (16, 8, 3, 3)], {"padding": (1, 1)}, "conv: tile 4x10"),
    ("conv2d", [(2, 4, 9, 9), (8, 4, 3, 3)], {"strides": (2, 2)}, "conv"),
    ("conv2d", [(1, 8, 8, 8), (8, 1, 3, 3)], {"padding": (1, 1), "groups": 8}, "conv"),
    ("conv2d", [(1, 16, 7, 7), (32, 16, 1, 1)], {}, "conv: tile 8x7"),
]


@pytest.mark.parametrize("op,shapes,attrs,kind", CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1][0]))}" for c in CASES])
def test_each_kind_keeps_results(op, shapes, attrs, kind):
    if op == "take":
        x, idx = typed("x", shapes[0]), typed("i", (5,), "int32")
        mod = graph_module([x, idx], lambda emit, x, i: ops.call("take", x, i, axis=0))
    else:
        mod = _single(op, shapes, attrs)
    legal = legalize(AVX2_CTX)(mod)
    scheduled = default_schedule(AVX2_CTX)(legal)
    for name in kernels(legal):
        desc = attr(scheduled[name], "kiln.schedule")
        assert desc and not desc.startswith("none"), desc
        if kind:
            assert desc.startswith(kind), desc
        if op == "take":   # indices must be in range: check through the graph instead
            continue
        check_same_results(legal[name], scheduled[name])


@pytest.mark.parametrize("shapes,desc,outer", [
    # NCHW32c: the 32-float block vectorized, the 56-pixel rows serial in each parallel step
    ([(1, 8, 56, 56, 32), (1, 8, 56, 56, 32)], "elementwise: vectorize 32 in rows of 56, parallel", 448),
    # a long innermost loop: every outer loop fused into the parallel one, as before
    ([(8, 56, 256), (8, 56, 256)], "elementwise: vectorize 256, parallel", 448),
])
def test_short_vectors_keep_their_rows_serial(shapes, desc, outer):
    """An elementwise kernel whose innermost loop is a few vectors long keeps the loop above it
    serial inside the parallel loop: indices divided out once per row, not once per vector
    (``schedule_rules.ROW_INNER_ELEMENTS``)."""
    legal = legalize(AVX2_CTX)(_single("add", shapes))
    scheduled = default_schedule(AVX2_CTX)(legal)
    (name,) = kernels(legal)
    assert attr(scheduled[name], "kiln.schedule") == desc
    assert f"T.parallel({outer})" in str(scheduled[name])
    check_same_results(legal[name], scheduled[name])


def test_take_through_the_graph():
    from transform_helpers import run_vm
    x, idx = typed("x", (10, 16)), typed("i", (5,), "int32")
    mod = graph_module([x, idx], lambda emit, x, i: ops.call("take", x, i, axis=0))
    xs = np.arange(160, dtype="float32").reshape(10, 16)
    ids = np.array([3, 0, 9, 3, 1], "int32")
    scheduled = default_schedule(AVX2_CTX)(legalize(AVX2_CTX)(mod))
    (name,) = kernels(scheduled)
    rt = kiln.build(kiln.IRModule({"main": scheduled[name]}))
    out = kiln.nd.empty((5, 16), "float32")
    rt(kiln.nd.array(xs), kiln.nd.array(ids), out)
    np.testing.assert_array_equal(out.numpy(), xs[ids])


def test_fused_kernels_keep_results():
    mod = conv_bn_relu(as_scale_shift=True)
    fused = fuse_ops(AVX2_CTX)(mod)
    scheduled = default_schedule(AVX2_CTX)(fused)
    (name,) = kernels(fused)
    desc = attr(scheduled[name], "kiln.schedule")
    assert desc.startswith("conv: tile 4x16, epilogue inlined"), desc
    check_same_results(fused[name], scheduled[name])


def test_transformer_kernels_keep_results():
    fused = legalize(AVX2_CTX)(fuse_ops(AVX2_CTX)(transformer_block()))
    scheduled = default_schedule(AVX2_CTX)(fused)
    descs = {}
    for name in kernels(fused):
        descs[name] = attr(scheduled[name], "kiln.schedule")
        check_same_results(fused[name], scheduled[name])
    assert descs["fused_linear_add_gelu"].startswith("matmul: tile 4x16, epilogue inlined")
    assert descs["softmax"].startswith("reduction: rows 3")
    assert descs["layer_norm"].startswith("reduction: rows 2")


def test_constant_weight_kernel_reads_the_packed_panels():
    w = np.random.default_rng(0).standard_normal((64, 32)).astype("float32")
    mod = graph_module([typed("x", (32, 32))], lambda emit, x: ops.call(
        "relu", emit("linear", x, Constant(w))))
    out = default_schedule(AVX2_CTX)(fold_constant(AVX2_CTX)(fuse_ops(AVX2_CTX)(mod)))
    (name,) = kernels(out)
    desc = attr(out[name], "kiln.schedule")
    assert desc == "matmul: tile 4x16, epilogue inlined, packed weight", desc
    assert [tuple(int(s.value) for s in p.shape) for p in out[name].params] == \
        [(32, 32), (4, 32, 16), (32, 64)]


def test_scheduled_kernels_are_left_alone():
    legal = legalize(AVX2_CTX)(_single("add", [(4, 64), (64,)]))
    once = default_schedule(AVX2_CTX)(legal)
    assert default_schedule(AVX2_CTX)(once)["add"] is once["add"]
    # a hand-scheduled kernel (a parallel loop) without the attribute is kept too
    sch = kiln.Schedule(legal, "add")
    sch.parallel(sch.get_loops(sch.get_block("add"))[0])
    assert not needs_schedule(sch.mod["add"])
    assert default_schedule(AVX2_CTX)(sch.mod)["add"] is sch.mod["add"]


def test_a_kernel_no_rule_fits_is_marked():
    @T.prim_func
    def odd(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.block("B"):
                vi = T.axis.spatial(4, i)
                B[vi] = A[vi] + 1.0
    out = schedule_kernel(odd, AVX2_CTX)
    assert attr(out, "kiln.schedule").startswith("elementwise")
    check_same_results(odd, out)


def test_options():
    ctx = PassContext(target=AVX2, pack_lanes=8, tile_accumulators=2)
    legal = legalize(ctx)(_single("matmul", [(32, 64), (64, 48)]))
    out = default_schedule(ctx)(legal)
    desc = attr(out["matmul"], "kiln.schedule")
    assert desc.startswith("matmul: tile 2x8"), desc
    check_same_results(legal["matmul"], out["matmul"])


def test_constant_conv_weight_is_packed_by_output_channel_blocks():
    from transform_helpers import run_vm
    rng = np.random.default_rng(2)
    w = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    mod = graph_module([typed("x", (1, 16, 28, 28))], lambda emit, x: ops.call(
        "relu", emit("conv2d", x, Constant(w), padding=(1, 1))))
    # The NCHW schedule (the channel-blocked one is tested in test_conv_blocked.py).
    out = kiln.get_pipeline("default", PassContext(target=AVX2, conv_blocking=False))(mod)
    (name,) = kernels(out)
    desc = attr(out[name], "kiln.schedule")
    # width 28 -> 14-lane vectors, 4 rows of output channels; the weight as [O/4, I, 3, 3, 4]
    assert desc.startswith("conv: tile 4x14, epilogue inlined"), desc
    assert tuple(int(s.value) for s in out[name].params[1].shape) == (8, 16, 3, 3, 4)
    xs = rng.standard_normal((1, 16, 28, 28)).astype("float32")
    from transform_helpers import reference
    np.testing.assert_allclose(run_vm(out, [xs]), reference(mod, [xs]), rtol=1e-4, atol=1e-4)


def test_constant_matmul_weight_is_packed_into_panels():
    from transform_helpers import reference, run_vm
    rng = np.random.default_rng(3)
    b = rng.standard_normal((24, 40)).astype("float32")
    # (2 products of 36 rows: fewer would be flattened into one, flatten_matmul_rows)
    mod = graph_module([typed("a", (2, 36, 24))],
                       lambda emit, a: ops.call("matmul", a, Constant(b)))
    out = kiln.get_pipeline("default", AVX2_CTX)(mod)
    (name,) = kernels(out)
    assert tuple(int(s.value) for s in out[name].params[1].shape) == (5, 24, 8)
    assert "packed weight" in attr(out[name], "kiln.schedule")
    xs = rng.standard_normal((2, 36, 24)).astype("float32")
    np.testing.assert_allclose(run_vm(out, [xs]), reference(mod, [xs]), rtol=1e-4, atol=1e-4)
