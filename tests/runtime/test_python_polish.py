"""Python conveniences the tutorials assume: vm.time_evaluator, kiln.target.Target objects
wherever a target string goes."""
import numpy as np
import pytest

import kiln
from kiln.script import R, T


@kiln.script.ir_module
class AddOne:
    @T.prim_func
    def add_one(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (8,), "float32")
        B = T.match_buffer(b, (8,), "float32")
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                B[vi] = A[vi] + 1.0

    @R.function
    def main(x: R.Tensor((8,), "float32")):
        with R.dataflow():
            y = R.call_tir(AddOne.add_one, (x,), out_sinfo=R.Tensor((8,), "float32"))
            z = R.call_dps_packed("test.count_calls", (y,), out_sinfo=R.Tensor((8,), "float32"))
            R.output(z)
        return z


@pytest.fixture
def counting_vm():
    calls = []

    @kiln.register_func("test.count_calls", override=True)
    def count(y, out):
        calls.append(1)
        np.copyto(np.from_dlpack(out), np.from_dlpack(y))
    return kiln.VirtualMachine(kiln.compile(AddOne, target="llvm"), kiln.cpu()), calls


def test_time_evaluator_runs_number_times_repeat_and_summarises(counting_vm):
    vm, calls = counting_vm
    x = kiln.nd.array(np.arange(8, dtype="float32"))
    result = vm.time_evaluator("main", kiln.cpu(), number=10, repeat=3)(x)
    assert len(calls) == 1 + 10 * 3            # one warm-up call, then number x repeat
    assert len(result.results) == 3 and all(r > 0 for r in result.results)
    assert result.min <= result.median <= result.max
    assert result.mean == pytest.approx(np.mean(result.results))
    assert result.std == pytest.approx(np.std(result.results))
    assert "mean (ms)" in str(result)


def test_time_evaluator_min_repeat_ms_raises_the_number(counting_vm):
    vm, calls = counting_vm
    result = vm.time_evaluator("main", number=1, repeat=1, min_repeat_ms=20)(np.zeros(8, "float32"))
    assert len(calls) > 2 and result.results[0] * (len(calls) - 1) >= 0.02 * 0.9


def test_time_evaluator_refuses_another_device_and_bad_counts(counting_vm):
    vm, _ = counting_vm
    with pytest.raises(ValueError, match="runs on cpu"):
        vm.time_evaluator("main", kiln.cuda(0))
    with pytest.raises(ValueError, match="must be >= 1"):
        vm.time_evaluator("main", number=0)


def test_target_object_parses_and_equals_its_string():
    t = kiln.target.Target("llvm -mcpu=znver3")
    assert t.cpu == "znver3" and t.vector_bits == 256 and t.has_feature("avx2")
    assert kiln.codegen.parse_target(t) == kiln.codegen.parse_target("llvm -mcpu=znver3")
    assert repr(t) == f"kiln.target.Target({str(t)!r})"
    with pytest.raises(kiln.codegen.CodegenError, match="no CUDA code generation"):
        kiln.target.Target("cuda")


def test_target_object_accepted_by_compile_build_and_pipelines(counting_vm):
    host = kiln.target.Target("llvm")
    ex = kiln.compile(kiln.get_pipeline("default", target=host)(AddOne), target=host)
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    np.testing.assert_array_equal(vm["main"](np.zeros(8, "float32")).numpy(), np.ones(8))
    rt = kiln.build(AddOne["add_one"], target=host)
    b = kiln.nd.empty((8,), "float32")
    rt(kiln.nd.array(np.arange(8, dtype="float32")), b)
    np.testing.assert_array_equal(b.numpy(), np.arange(8) + 1)
