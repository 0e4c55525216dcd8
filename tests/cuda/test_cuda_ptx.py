"""CUDA code generation, checked without a GPU: the PTX that LLVM's NVPTX backend emits for
thread-bound programs (entries, block sizes, special registers, shared memory, barriers),
assembled by ptxas when it is installed; launch sizes; the artifact; the errors."""
from __future__ import annotations

import re

import pytest

import kiln
from kiln.codegen import CodegenError
from kiln.codegen.cuda import CudaModule, compile_cuda, parse_cuda_target
from kiln.codegen.cuda.kernels import eval_json

from cuda_programs import add_one, assemble, ptxas, shared_matmul, symbolic_add_one

needs_ptxas = pytest.mark.skipif(ptxas() is None, reason="ptxas not found: it comes with the "
                                 "CUDA toolkit or NVIDIA's nvidia-cuda-nvcc wheel")


def _entry(ptx: str, name: str) -> str:
    """The text of kernel entry ``name``, from its header to its closing brace."""
    m = re.search(r"\.entry %s\((.*?)\n}\n" % re.escape(name), ptx, flags=re.S)
    assert m, f"no .entry {name} in the PTX"
    return m.group(0)


def test_section_a_program_is_one_kernel_on_blocks_and_threads():
    cm = compile_cuda(add_one().mod, "cuda -arch=sm_80")
    assert ".target sm_80" in cm.ptx and ".address_size 64" in cm.ptx
    body = _entry(cm.ptx, "main_kernel")
    assert ".maxntid 2, 1, 1" in body
    assert "%ctaid.x" in body and "%tid.x" in body
    assert body.count("st.global") == 2           # i0_1 is a serial loop of 2 in each thread
    k, = cm.functions["main"]["kernels"]
    assert (k["grid"], k["block"]) == ([2, 1, 1], [2, 1, 1])
    assert [p["shape"] for p in cm.functions["main"]["params"]] == [[8], [8]]


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_ptx_assembles_with_ptxas(arch, tmp_path):
    for sch in (add_one(), shared_matmul(), symbolic_add_one()):
        cm = compile_cuda(sch.mod, f"cuda -arch={arch}")
        assert f".target {arch}" in cm.ptx
        r = assemble(cm.ptx, arch, tmp_path)
        assert r.returncode == 0, r.stderr


def test_shared_memory_tile_is_per_block_with_barriers():
    cm = compile_cuda(shared_matmul(n=64, tile=16).mod, "cuda")
    body = _entry(cm.ptx, "main_kernel")
    assert ".maxntid 16, 16, 1" in body
    # One 16 x 16 float32 tile of A for the whole block (threadIdx.y picks its row), not one
    # row per thread: the threads of a block share it.
    sizes = re.findall(r"\.shared \.align \d+ \.b8 \S+\[(\d+)\]", body)
    assert sizes == ["1024"]
    assert "st.shared" in body and "ld.shared" in body
    # Before the copy (the last iteration's readers are done) and after it (the tile is whole).
    assert body.count("bar.sync") == 2
    copy, compute = body.index("st.shared"), body.index("ld.shared")
    assert body.index("bar.sync") < copy < body.rindex("bar.sync") < compute
    k, = cm.functions["main"]["kernels"]
    assert (k["grid"], k["block"]) == ([4, 4, 1], [16, 16, 1])


def test_symbolic_grid_is_evaluated_from_the_shapes():
    cm = compile_cuda(symbolic_add_one(threads=64).mod, "cuda")
    info = cm.functions["main"]
    assert info["dims"] == {"n": [0, 0]}
    assert [p["shape"] for p in info["params"]] == [["n"], ["n"]]
    k, = info["kernels"]
    assert k["block"] == [64, 1, 1]
    for n, blocks in [(1, 1), (64, 1), (65, 2), (1000, 16)]:
        assert [eval_json(g, {"n": n}) for g in k["grid"]] == [blocks, 1, 1]
    # The kernel takes the two data pointers and n, and guards the threads past n.
    body = _entry(cm.ptx, "main_kernel")
    assert len(re.findall(r"\.param \.u64", body)) == 3
    assert "setp" in body


def test_artifact_round_trip_and_corruption(tmp_path):
    cm = compile_cuda(add_one().mod, "cuda -arch=sm_90")
    path = tmp_path / "add_one.kcuda"
    cm.save(str(path))
    back = CudaModule.load(str(path))
    assert (back.ptx, back.functions, back.target) == (cm.ptx, cm.functions, "cuda -arch=sm_90")
    data = path.read_bytes()
    with pytest.raises(ValueError, match="not a Kiln CUDA artifact"):
        CudaModule.from_bytes(b"KILNCUDX" + data[8:])
    with pytest.raises(ValueError, match="format version 7"):
        CudaModule.from_bytes(data[:8] + (7).to_bytes(4, "little") + data[12:])
    with pytest.raises(ValueError, match="runs past the end"):
        CudaModule.from_bytes(data[:40])


def test_build_returns_a_module_without_touching_a_gpu():
    rt = kiln.build(add_one().mod, target="cuda")
    assert rt.function_names() == ["main"] and ".entry main_kernel" in rt.ptx


def test_targets():
    assert str(parse_cuda_target("cuda")) == "cuda"
    t = parse_cuda_target("cuda -arch=sm_90")
    assert (t.arch, t.sm, t.ptx_version) == ("sm_90", 90, 78)
    assert parse_cuda_target("llvm") is None
    with pytest.raises(CodegenError, match="bad architecture 'compute_80'"):
        parse_cuda_target("cuda -arch=compute_80")
    with pytest.raises(CodegenError, match="unknown option '-mattr=\\+x'"):
        parse_cuda_target("cuda -mattr=+x")
    with pytest.raises(CodegenError, match="no CUDA code generation for CPU objects .* "
                       "kiln.compile\\(mod, target='cuda'\\) whole models"):
        kiln.codegen.parse_target("cuda")


def test_unbound_loop_is_named():
    from kiln import te
    from kiln.ir import IRModule
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    plain = IRModule({"main": te.create_prim_func([A, B])})
    with pytest.raises(CodegenError, match=r"loop 'i' in 'main' is not bound to a GPU thread"):
        compile_cuda(plain, "cuda")


def test_block_too_large_is_named():
    sch = add_one(n=4096, factors=(2, 1, 2048))
    with pytest.raises(CodegenError, match=r"loop 'i_2' in 'main' is bound to threadIdx.x with "
                                           r"2048 threads; the limit is 1024"):
        compile_cuda(sch.mod, "cuda")
    sch = shared_matmul(n=128, tile=64)          # 64 x 64 = 4096 threads in one block
    with pytest.raises(CodegenError, match=r"a thread block of 4096 threads .*'i_1' \(threadIdx.y: "
                                           r"64\).*more than the 1024"):
        compile_cuda(sch.mod, "cuda")


def test_symbolic_thread_extent_is_refused():
    from kiln import te
    from kiln.ir import IRModule
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = kiln.tir.Schedule(IRModule({"main": te.create_prim_func([A, B])}))
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.bind(i, "threadIdx.x")
    with pytest.raises(CodegenError, match="bound to threadIdx.x with the symbolic extent n"):
        compile_cuda(sch.mod, "cuda")
