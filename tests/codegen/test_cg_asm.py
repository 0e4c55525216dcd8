"""What the generated machine code looks like: real SIMD at the target's natural width (ymm on
AVX2, zmm on AVX-512, NEON v-registers on AArch64), packed FMAs in a matmul micro-kernel, and no
libm calls for exp/log/tanh/sigmoid/erf in vectorized loops. Cross targets are compiled to
assembly/objects only, never run."""
from __future__ import annotations

import re

import pytest

from kiln import codegen
from kiln.ir import Call

from cg_irbuild import buf, elementwise, matmul_tiled

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"
AARCH64 = "aarch64-linux-gnu"


def vec_add(n=1024, dtype="float32", structure="vectorized"):
    A, B, C = buf("A", (n,), dtype), buf("B", (n,), dtype), buf("C", (n,), dtype)
    return elementwise(n, [A, B], C, lambda a, b: a + b, structure)


def kernel_asm(func, target):
    """Assembly of the module's functions (the data tables stripped)."""
    asm = codegen.compile_module(func, target).assembly()
    return asm[:asm.find("kiln_library_info")]


def test_avx2_vectorized_add_uses_ymm():
    asm = kernel_asm(vec_add(), AVX2)
    assert re.search(r"vaddps\s+.*%ymm", asm), asm
    assert "zmm" not in asm


def test_avx512_vectorized_add_uses_zmm():
    t = codegen.parse_target(AVX512)
    assert t.vector_bits == 512
    cm = codegen.compile_module(vec_add(), t)
    assert '"prefer-vector-width"="512"' in cm.llvm_ir()
    assert re.search(r"vaddps\s+.*%zmm", cm.assembly())


def test_avx512_switched_off_falls_back_to_ymm():
    t = codegen.parse_target(AVX512 + " -mattr=-avx512f")
    assert t.vector_bits == 256
    asm = kernel_asm(vec_add(), t)
    assert "zmm" not in asm and "ymm" in asm


@pytest.mark.parametrize("op", ["exp", "log", "tanh", "sigmoid", "erf"])
@pytest.mark.parametrize("target", [AVX2, AVX512, AARCH64])
def test_transcendentals_vectorize_without_libm_calls(op, target):
    n = 256
    A, B = buf("A", (n,)), buf("B", (n,))
    asm = kernel_asm(elementwise(n, [A], B, lambda a: Call(op, (a,), "float32"), "vectorized"), target)
    assert not re.search(r"\b(call|callq|bl|jmp)\s+\S*(exp|log|tanh|erf)", asm), asm
    reg = {AVX2: "%ymm", AVX512: "%zmm", AARCH64: ".4s"}[target]
    assert reg in asm


def test_aarch64_object_has_neon_and_elf_machine():
    cm = codegen.compile_module(vec_add(), AARCH64)
    assert re.search(r"fadd\s+v\d+\.4s", cm.assembly())
    obj = cm.object_code()
    assert obj[:4] == b"\x7fELF" and obj[4] == 2  # 64-bit
    assert int.from_bytes(obj[18:20], "little") == 183  # EM_AARCH64


def test_cross_target_links_with_the_cross_toolchain(options):
    """A foreign triple links with kiln.codegen.toolchain's cross compiler (zig cc or a system
    cross gcc; tests/cross runs the result under qemu); a triple with none names the ones there are."""
    from kiln.codegen.toolchain import cross_cc
    with pytest.raises(codegen.CodegenError, match="no cross toolchain for 'powerpc64le-linux-gnu'"):
        codegen.build_library(vec_add(), "llvm -mtriple=powerpc64le-linux-gnu", options)
    try:
        cross_cc("aarch64-linux-gnu")
    except codegen.CodegenError as e:
        pytest.skip(str(e))
    with open(codegen.build_library(vec_add(), AARCH64, options), "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183  # EM_AARCH64


@pytest.mark.parametrize("target,reg", [(AVX2, "ymm"), (AVX512, "zmm"), (AARCH64, "v")])
def test_matmul_microkernel_uses_packed_fma(target, reg):
    nr = {"ymm": 16, "zmm": 32, "v": 8}[reg]
    asm = kernel_asm(matmul_tiled(64, 64, 64, mr=4, nr=nr), target)
    if reg == "v":
        assert re.search(r"fmla\s+v\d+\.4s", asm), asm
    else:
        fmas = re.findall(rf"vfmadd\d+ps\s+[^\n]*%{reg}", asm)
        assert len(fmas) >= 8, asm   # the 4 x nr accumulator tile, updated per k


def test_float16_converts_with_f16c():
    asm = kernel_asm(vec_add(64, "float16"), AVX2)
    assert "vcvtph2ps" in asm and "vcvtps2ph" in asm


@pytest.mark.parametrize("target", [AVX512, AARCH64, "x86_64-linux-gnu", "llvm -mcpu=haswell -mattr=-fma"])
def test_programs_compile_for_other_targets(target):
    """Every program of test_cg_programs, for targets this machine cannot run: LLVM accepts the
    IR (masks of 16 lanes, NEON, SSE2-only, no FMA) and emits an object."""
    from kiln.ir import IRModule
    from test_cg_programs import add2d, conv2d, matmul_naive, row_sum, softmax
    funcs = {"add_" + s: add2d(s) for s in ("parallel_split_vec", "split_unroll", "fused_vec")}
    funcs.update({"sum_" + s: row_sum(s) for s in ("vectorized_rows", "vectorized_reduction", "local_accumulator")})
    funcs.update(softmax=softmax(7, 53, "parallel_vectorized"), conv=conv2d(3, 10, 4, 3, 1, "split"),
                 mm=matmul_naive(10, 19, 13, "ikj", vec=True), tiled=matmul_tiled(32, 64, 8, mr=4, nr=32))
    cm = codegen.compile_module(IRModule(funcs), target)
    assert cm.object_code()[:4] == b"\x7fELF"
    assert len(cm.kernels) == len(funcs)


def _vector_instructions(asm: str, reg: str):
    return [line for line in asm.splitlines() if reg in line and not line.strip().startswith(".")]


def test_sigmoid_takes_e_to_a_nonpositive_power_in_fewer_instructions():
    """Sigmoid needs e**-|x| only: no overflow guard and one power-of-two factor (exp's
    general form scales by two, so that neither overflows nor goes denormal), and NaN flows
    through the arithmetic. On AVX-512 that is at least 8 vector instructions fewer per vector
    than a sigmoid written on the general exp; the results are the same (test_cg_math)."""
    n = 256
    A, B = buf("A", (n,)), buf("B", (n,))
    sig = _vector_instructions(kernel_asm(elementwise(
        n, [A], B, lambda a: Call("sigmoid", (a,), "float32"), "vectorized"), AVX512), "%zmm")
    ex = _vector_instructions(kernel_asm(elementwise(
        n, [A], B, lambda a: Call("exp", (a,), "float32"), "vectorized"), AVX512), "%zmm")
    # sigmoid = exp-like part + (fabs, fneg, add, divide, compare, multiply, select): about 7
    # more than its exp part; written on the general exp it took 7 + len(ex)
    assert len(sig) <= len(ex), (len(sig), len(ex))
    # one scale factor: one shift left by the mantissa bits (the general exp has two)
    assert len([l for l in sig if re.search(r"vpslld\s+\$23", l)]) * 2 == \
        len([l for l in ex if re.search(r"vpslld\s+\$23", l)]), "\n".join(sig)
