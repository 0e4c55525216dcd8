"""Concats and slices done by the memory plan (executable/views.py): each concat part's kernel
writes it straight into the concat's storage, a slice is a view of its input, and neither
kernel runs; the outputs checked against the graph interpreter (numpy references of the
operators) at 1e-4."""
import math

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.executable.views import _concat_offsets, _slice_offset
from kiln.executable.format import Op
from kiln.ir import TensorType
from kiln.ir.graph_interp import interpret

F = nn.functional


class Fire(nn.Module):
    """SqueezeNet's fire module and a conv after it; ``wiring`` picks what is concatenated."""

    def __init__(self, wiring="fire", cin=3):
        super().__init__()
        self.wiring = wiring
        self.s = nn.Conv2d(cin, 16, 1)
        self.a = nn.Conv2d(16, 32, 1)
        self.b = nn.Conv2d(16, 32, 3, padding=1)
        self.c = nn.Conv2d(64, 16, 1)
        self.d = nn.Conv2d(96, 16, 1)
        self.e = nn.Conv2d(16, 32, 1)
        self.f = nn.Conv2d(32, 16, 1)

    def forward(self, x):
        s = F.relu(self.s(x))
        a, b = F.relu(self.a(s)), F.relu(self.b(s))
        w = self.wiring
        if w == "fire":
            return self.c(F.concat([a, b], dim=1))
        if w == "returned":                       # the concat is the function's result
            return F.concat([a, b], dim=1)
        if w == "input_part":                     # a part that no kernel of the function makes
            return self.c(F.concat([x, s, a, b[:, :13]], dim=1))
        if w == "same_part_twice":
            return self.c(F.concat([a, a], dim=1))
        if w == "nested":                         # the outer concat's part is the inner concat
            inner = F.concat([a, b], dim=1)
            return self.d(F.concat([inner, F.relu(self.e(s))], dim=1)) + self.c(inner)
        if w == "shared_part":                    # one part in two concats
            return self.c(F.concat([a, b], dim=1)) + self.c(F.concat([a, a + 1.0], dim=1))
        if w == "part_read_later":                # a part read again after the concat
            return self.c(F.concat([a, b], dim=1)) + self.f(a)
        if w == "split":                          # ShuffleNet's channel split, the halves apart
            return self.c(F.concat([self.a(a[:, :16]), self.a(a[:, 16:])], dim=1))
        if w == "strided_split":                  # every other channel: no contiguous range
            return self.c(F.concat([self.a(a[:, ::2]), self.a(a[:, 1::2])], dim=1))
        raise ValueError(w)


def _run(wiring, shape=(1, 3, 12, 12), pipeline="default", bind=True):
    model = Fire(wiring, cin=shape[1])
    model.load_state_dict(model.init_params(seed=0))
    mod, spec = model.export(spec={"forward": {"x": nn.spec.Tensor(shape, "float32")}})
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype("float32")
    params = [] if bind else [v for _, v in sorted(model.state_dict().items(),
                                                   key=lambda kv: [n for n, _ in spec].index(kv[0]))]
    if bind:
        mod = kiln.transform.bind_params("forward", model.state_dict())(mod)
    expected = interpret(mod["forward"], [x, *params])
    ex = kiln.compile(kiln.get_pipeline(pipeline)(mod), "llvm")
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    got = vm["forward"](kiln.nd.array(x), *[kiln.nd.array(p) for p in params]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    return ex


def _concat_kernels(ex):
    return [k for k in ex.spec.kernels if "concat" in k]


def _slice_kernels(ex):
    return [k for k in ex.spec.kernels if "slice" in k]


def _arena_views(ex):
    """(offset, bytes) of every ALLOC_ARENA of the function, in order (float32 tensors here)."""
    views = []
    for ins in ex.spec.functions[0].code:
        if ins.opcode == Op.ALLOC_ARENA:
            ndim = ins.operands[5]
            views.append((ins.operands[1], 4 * math.prod(ins.operands[6:6 + ndim])))
    return views


@pytest.mark.parametrize("pipeline,bind", [("default", True), ("default", False), ("zero", True)])
def test_fire_module_concat_is_written_in_place(pipeline, bind):
    # Blocked (NCHW32c) with the weights bound, NCHW with the weights given at run time, and
    # the zero pipeline's lone concat kernel: each time no concat runs, and the two expand
    # convs write the two halves of the concat's storage.
    ex = _run("fire", pipeline=pipeline, bind=bind)
    assert _concat_kernels(ex) == []
    views = _arena_views(ex)
    k = next(k for k, (_, b) in enumerate(views) if b == 4 * 64 * 12 * 12)   # the concat's view
    start, nbytes = views[k]
    half = nbytes // 2
    # The first half is made where the concat's storage goes live; from then on the only other
    # tensor placed in it is the second half (tensors dead before may have used its bytes).
    first = max(j for j in range(k) if views[j] == (start, half))
    inside = [v for v in views[first + 1:k] if v[0] < start + nbytes and start < v[0] + v[1]]
    assert inside == [(start + half, half)]


@pytest.mark.parametrize("wiring", ["returned", "input_part", "same_part_twice"])
def test_concat_that_cannot_be_in_place_runs_its_kernel(wiring):
    ex = _run(wiring)
    assert len(_concat_kernels(ex)) == 1


def test_concat_over_a_batch_runs_its_kernel():
    # Batch 2: each part's bytes interleave with the other's in the result.
    ex = _run("fire", shape=(2, 3, 12, 12))
    assert len(_concat_kernels(ex)) == 1


@pytest.mark.parametrize("wiring", ["nested", "shared_part"])
def test_one_of_two_concats_is_in_place(wiring):
    # A nested concat: the inner one in place, the outer one copies it. One part in two
    # concats: it can live in one of them only.
    ex = _run(wiring)
    assert len(ex.spec.kernels) - len(_run_kernels_without_views(wiring)) == -1


def _run_kernels_without_views(wiring):
    import kiln.executable.lower as lower
    saved = lower.plan_views
    lower.plan_views = lambda *args: ({}, {})
    try:
        return _run(wiring).spec.kernels
    finally:
        lower.plan_views = saved


def test_part_read_after_the_concat_stays_intact():
    # The part `a` is read again after the concat: its storage (inside the concat's) must
    # stay live until then, and nothing else may be planned over it.
    ex = _run("part_read_later")
    assert _concat_kernels(ex) == []


def test_offsets_need_whole_cache_lines_and_a_contiguous_layout():
    t = lambda *shape: TensorType(shape, "float32")
    assert _concat_offsets(t(1, 32, 8, 8), [t(1, 16, 8, 8), t(1, 16, 8, 8)], 1) == [0, 4096]
    # 7 x 7 planes: the second part would start at byte 196, inside a cache line.
    assert _concat_offsets(t(1, 2, 7, 7), [t(1, 1, 7, 7), t(1, 1, 7, 7)], 1) is None
    # Along the last axis of a 2-row tensor the parts interleave.
    assert _concat_offsets(t(2, 32), [t(2, 16), t(2, 16)], 1) is None
    # Parts that do not add up to the result, or of another dtype.
    assert _concat_offsets(t(1, 48, 8, 8), [t(1, 16, 8, 8), t(1, 16, 8, 8)], 1) is None
    assert _concat_offsets(t(1, 32, 8, 8), [t(1, 16, 8, 8), TensorType((1, 16, 8, 8), "float16")], 1) is None


@pytest.mark.parametrize("pipeline,bind", [("default", True), ("default", False), ("zero", True)])
def test_channel_split_is_a_view_of_its_input(pipeline, bind):
    ex = _run("split", pipeline=pipeline, bind=bind)
    assert _slice_kernels(ex) == []
    # Each half a view at its offset in `a` (32 channels of 12 x 12): the second at +9216 bytes.
    views = _arena_views(ex)
    half = 4 * 16 * 12 * 12
    starts = {off for off, b in views if b == 2 * half}
    assert any({(s, half), (s + half, half)} <= set(views) for s in starts)


def test_strided_channel_split_runs_its_kernels():
    ex = _run("strided_split")
    assert len(_slice_kernels(ex)) == 2


def test_split_over_a_batch_runs_its_kernels():
    ex = _run("split", shape=(2, 3, 12, 12))
    assert len(_slice_kernels(ex)) == 2


def test_slice_offsets_need_whole_cache_lines():
    t = lambda *shape: TensorType(shape, "float32")
    assert _slice_offset(t(1, 32, 8, 8), t(1, 16, 8, 8), 16 * 64) == [4096]
    assert _slice_offset(t(1, 2, 7, 7), t(1, 1, 7, 7), 49) is None        # byte 196
    assert _slice_offset(t(1, 32, 8, 8), t(1, 16, 8, 8), 24 * 64) is None  # past the end


def test_the_tuner_skips_kernels_the_plan_does():
    from kiln.tune import extract_tasks
    model = Fire("fire")
    model.load_state_dict(model.init_params(seed=0))
    mod, _ = model.export(spec={"forward": {"x": nn.spec.Tensor((1, 3, 12, 12), "float32")}})
    mod = kiln.transform.bind_params("forward", model.state_dict())(mod)
    tasks, skipped = extract_tasks(mod, "llvm", threads=1)
    assert [why for name, why in skipped.items() if "concat" in name] == \
        ["never called: the memory plan does it (a concat or slice in place)"]
    assert tasks and not any("concat" in t.name for t in tasks)
