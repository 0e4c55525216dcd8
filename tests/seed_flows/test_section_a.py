"""SEED_FLOWS.md section A, as written: script with T.handle / T.match_buffer, te, build, run,
kiln.tir.Schedule; the GPU part fails naming the missing CUDA target."""
from __future__ import annotations

import numpy as np
import pytest

import kiln

GPU_PART = "sch.bind("   # the section's GPU part starts with the thread bindings


def _parts(seed_blocks):
    block = seed_blocks[0]
    assert "T.match_buffer" in block and GPU_PART in block, "SEED_FLOWS.md section A changed"
    at = block.index(GPU_PART)
    return block[:at], block[at:]


def _has_nvidia_gpu() -> bool:
    from kiln.runtime import cuda_device
    return cuda_device.is_available(0)


def test_cpu_part_prints_what_its_comments_say(seed_blocks, run_block):
    cpu, _ = _parts(seed_blocks)
    ns, out = run_block(cpu, "section_a")
    lines = out.splitlines()
    assert lines[0] == "<class 'kiln.ir.function.IRModule'>"
    assert isinstance(ns["ir_module"], kiln.ir.IRModule)

    # prints with T.Buffer parameters; parses back to an equal module
    text = ns["ir_module"].script()
    assert text in out
    assert 'def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):' in text
    assert "T.handle" not in text and "match_buffer" not in text
    kiln.script.assert_roundtrip(ns["ir_module"])
    assert dict(ns["ir_module"]["main"].attrs) == {"global_symbol": "main", "tir.noalias": True}

    # te builds the same program (up to the function attributes the script gave)
    assert ns["ir_module_from_te"].script() in out
    te_main = ns["ir_module_from_te"]["main"]
    script_main = ns["ir_module"]["main"]
    kiln.ir.assert_structural_equal(te_main, kiln.ir.PrimFunc(script_main.params, script_main.body,
                                                               te_main.attrs))

    # print(a), print(b): the values, as numpy prints them
    assert "[0. 1. 2. 3. 4. 5. 6. 7.]" in lines and "[1. 2. 3. 4. 5. 6. 7. 8.]" in lines
    assert lines.index("[0. 1. 2. 3. 4. 5. 6. 7.]") + 1 == lines.index("[1. 2. 3. 4. 5. 6. 7. 8.]")
    np.testing.assert_array_equal(ns["b"].numpy(), np.arange(8, dtype="float32") + 1)

    # kiln.tir.Schedule is kiln.Schedule; the split and reorder show in the index
    assert type(ns["sch"]) is kiln.Schedule
    assert "vi = T.axis.spatial(8, i_0 * 4 + i_1 * 2 + i_2)" in ns["sch"].mod.script()
    assert ns["sch"].mod.script() in out


@pytest.mark.skipif(_has_nvidia_gpu(), reason="this machine has a CUDA driver and GPU: "
                    "test_gpu_part_runs_on_a_gpu runs the GPU part instead")
def test_gpu_part_builds_then_fails_naming_the_missing_driver(seed_blocks, run_block):
    cpu, gpu = _parts(seed_blocks)
    ns, _ = run_block(cpu, "section_a_cpu")
    # kiln.cuda(0) and kiln.build(..., target="cuda") need no GPU; the first array on it does.
    at = gpu.index("cuda_a =")
    built, _ = run_block(gpu[:at], "section_a_gpu_build", ns)
    assert ".entry main_kernel" in built["cuda_mod"].ptx
    with pytest.raises(kiln.KilnError, match=r"no CUDA driver: libcuda.so.1 not found"):
        run_block(gpu, "section_a_gpu", ns)


@pytest.mark.skipif(not _has_nvidia_gpu(), reason="the GPU part of section A needs an NVIDIA GPU "
                    "and its driver (no CUDA driver/GPU on this machine)")
def test_gpu_part_runs_on_a_gpu(seed_blocks, run_block):
    cpu, gpu = _parts(seed_blocks)
    ns, _ = run_block(cpu, "section_a_cpu")
    ns, out = run_block(gpu, "section_a_gpu", ns)
    assert out.splitlines()[-1] == "[1. 2. 3. 4. 5. 6. 7. 8.]"
