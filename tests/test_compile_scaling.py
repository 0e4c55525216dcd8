"""Compile cost, asserted on deterministic counts (never on time):

- no compile-time step grows worse than linearly in the model size: each pass of the default
  pipeline and ``kiln.compile`` make about 4x the Python function calls (cProfile counts) for
  an MLP of 4x the layers, and codegen about 4x for 4x the kernels, where a quadratic step
  would make 16x;
- the weights are not copied on the way to the library: ``kiln.compile`` allocates (tracemalloc
  peak) far less than the weights it writes, and the pipeline about one packed copy of them;
- the weights a pass replaces are freed with the module before it, by reference counting,
  without waiting for the garbage collector.

``bench/compile_cost.py --scaling`` prints the same counts for larger models.
"""
from __future__ import annotations

import gc
import os
import sys
import tracemalloc
import weakref

import pytest

import kiln
from kiln.codegen import BuildOptions, build_library

# The measurements are bench/compile_cost.py's (one definition); these tests assert on them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from compile_cost import count_calls, deep_mlp, scale_kernels, step_calls  # noqa: E402


def _assert_linear(small: dict, big: dict, factor: int, what: str) -> None:
    assert small.keys() == big.keys()
    for step, calls in small.items():
        # factor x the model: linear is about factor x (less with fixed costs); quadratic would
        # be factor**2 x. The margin covers what varies with shapes, not a worse exponent.
        assert big[step] <= 1.5 * factor * calls, (
            f"{step}: {calls} calls for the small {what}, {big[step]} for {factor}x of it "
            f"({big[step] / calls:.1f}x)")


def test_graph_steps_grow_linearly_with_the_layers(tmp_path):
    step_calls(2, str(tmp_path / "warm"))   # caches (schedule rules, LLVM) warm first
    _assert_linear(step_calls(4, str(tmp_path / "a")), step_calls(16, str(tmp_path / "b")),
                   4, "MLP (4 layers)")


def test_codegen_grows_linearly_with_the_kernels(tmp_path):
    def calls(k):
        mod = scale_kernels(k)
        path, n = count_calls(lambda: build_library(mod, "llvm", BuildOptions(
            cache_dir=str(tmp_path / str(k)), jobs=1), lower=True))
        return {"build_library": n}
    calls(2)
    _assert_linear(calls(4), calls(16), 4, "module (4 kernels)")


@pytest.fixture
def traced():
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def _peak_during(fn):
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    out = fn()
    return out, tracemalloc.get_traced_memory()[1] - before


def test_weights_are_not_copied_on_the_way_to_the_library(tmp_path, traced):
    mod = deep_mlp(2, widths=[2048, 2048, 256])          # 18 MiB of weights; two small kernels
    weights = (2048 * 2048 + 2048 * 256 + 2048 + 256) * 4
    pipeline = kiln.get_pipeline("default")
    mod, pipeline_peak = _peak_during(lambda: pipeline(mod))
    # Packing makes one new copy of each weight (the originals are dropped with the old module).
    assert pipeline_peak < 1.3 * weights, f"pipeline: {pipeline_peak / weights:.2f}x the weights"
    ex, compile_peak = _peak_during(lambda: kiln.compile(mod, "llvm", options=BuildOptions(
        cache_dir=str(tmp_path), jobs=1)))
    assert ex.stats.constant_bytes >= weights
    # The blob streams from the constants' own memory into the object file: no copy of them.
    assert compile_peak < 0.25 * weights, f"kiln.compile: {compile_peak / weights:.2f}x the weights"


def test_the_pipeline_frees_the_weights_it_replaces_without_the_garbage_collector():
    """The weights that binding and the passes replace (packed, re-laid out) go with the module
    before them as soon as nothing refers to it, not at the garbage collector's next full run:
    no pass's helpers may hold them in a reference cycle. VGG-11 kept 500 MB of such garbage
    through code generation: the ``transform`` walker's recursive closure held ``bind_params``'s
    map to the weights, and legalize's held the module before it."""
    from kiln import nn
    from kiln.ir.functor import collect
    from kiln.ir.graph import Constant

    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 256))
    model.load_state_dict(model.init_params(seed=0))
    mod, _ = model.export(spec={"forward": {"x": nn.spec.Tensor((1, 512), "float32")}})
    params = model.state_dict()
    del model
    gc.collect()
    gc.disable()
    try:
        bound = kiln.transform.bind_params("forward", params)(mod)
        del params, mod
        originals = [weakref.ref(c.data) for c in collect(bound["forward"], Constant)
                     if c.data.nbytes >= 64 << 10]
        assert len(originals) == 2
        packed = kiln.get_pipeline("default")(bound)
        del bound
        alive = [r().shape for r in originals if r() is not None]
    finally:
        gc.enable()
    assert not alive, f"replaced weights still held, of shapes {alive}"
    assert "forward" in packed.functions
