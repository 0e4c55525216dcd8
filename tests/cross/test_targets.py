"""Issue 15, targets by triple: what each foreign triple compiles to (no toolchain needed), the
blob read back from a foreign library, and the runner's .npy checks (on the host runner)."""
from __future__ import annotations

import re
import struct
import subprocess

import numpy as np
import pytest

import kiln
from kiln.codegen.target import llvm_triple, parse_target
from kiln.codegen.toolchain import family, zig_target


@pytest.mark.parametrize("spec,features,neon,v", [
    ("armv7-linux-gnueabihf", "+neon", True, False),
    ("llvm -mtriple=armv7-linux-gnueabihf -mattr=-neon", "-neon", False, False),
    ("riscv64-linux-gnu", "+m,+a,+f,+d,+c", False, False),
    ("riscv64-linux-gnu -mattr=+v", "+m,+a,+f,+d,+c,+v", False, True),
    ("llvm -mtriple=aarch64-linux-gnu", "", True, False),
])
def test_triples_get_their_linux_baseline(spec, features, neon, v):
    t = parse_target(spec)
    assert t.features == features and not t.linkable
    assert t.has_feature("neon") == neon and t.has_feature("v") == v
    assert parse_target(str(t)) == t       # the baseline is not added twice


def test_llvm_triple_fills_the_vendor():
    assert llvm_triple("armv7-linux-gnueabihf") == "armv7-unknown-linux-gnueabihf"
    assert llvm_triple("aarch64-linux-gnu") == "aarch64-unknown-linux-gnu"
    assert llvm_triple("x86_64-unknown-linux-gnu") == "x86_64-unknown-linux-gnu"
    assert zig_target("armv7-linux-gnueabihf") == "arm-linux-gnueabihf"
    assert family("riscv64-linux-gnu").qemu == "qemu-riscv64"
    with pytest.raises(kiln.codegen.CodegenError, match="no cross toolchain"):
        family("mips-linux-gnu")


def _vec_add():
    from kiln import te
    a = te.placeholder((64,), "float32", name="A")
    b = te.compute((64,), lambda i: a[i] * 2.0 + 1.0, name="B")
    mod = kiln.ir.IRModule({"main": te.create_prim_func([a, b])})
    sch = kiln.Schedule(mod)
    (i,) = sch.get_loops(sch.get_block("B"))
    sch.vectorize(sch.split(i, factors=[None, 4])[1])
    return sch.mod


def test_armv7_objects_are_hard_float_neon_and_riscv64_lp64d_rvv():
    """glibc's armhf loader refuses soft-float libraries and RISC-V linkers refuse to mix float
    ABIs: the objects must say hard float / double."""
    from kiln.codegen import compile_module
    arm = compile_module(_vec_add(), "armv7-linux-gnueabihf")
    obj = arm.object_code()
    assert obj[4] == 1 and struct.unpack_from("<H", obj, 18)[0] == 40          # ELF32, EM_ARM
    asm = arm.assembly()
    assert re.search(r"\.eabi_attribute\s+28, 1\b", asm)      # Tag_ABI_VFP_args: VFP registers
    assert re.search(r"v(mul|add|mla|fma)\.f32\s+q\d+", asm)     # NEON, 4 lanes
    rvv = compile_module(_vec_add(), "riscv64-linux-gnu -mattr=+v")
    assert re.search(r"vle32\.v\s+v\d+", rvv.assembly())                     # RVV loads
    assert not re.search(r"\bvle32\.v", compile_module(_vec_add(), "riscv64-linux-gnu").assembly())
    rv = rvv.object_code()
    assert struct.unpack_from("<H", rv, 18)[0] == 243
    assert struct.unpack_from("<I", rv, 0x30)[0] & 0x6 == 0x4                 # FLOAT_ABI_DOUBLE
    from kiln.executable.blob_object import write_elf_object
    out = bytearray()
    write_elf_object(out.extend, 243, 3, lambda w: (w(b"abc"), 3)[1], "blob", "size")
    assert struct.unpack_from("<I", out, 0x30)[0] == 0x4


@pytest.fixture(scope="module")
def host_runner(tmp_path_factory, runtime_make):
    d = tmp_path_factory.mktemp("runner")
    runtime_make("all", copy={"kiln_runner": d / "kiln_runner"})
    (d / "kiln_runner").chmod(0o755)
    return d / "kiln_runner"


def test_host_runner_runs_a_model_and_checks_npy_files(host_runner, tmp_path):
    from cross_helpers import MODELS, compile_onnx, inputs_for
    ex = compile_onnx(MODELS["if"](), "llvm")
    lib = ex.export_library(tmp_path / "if.so")
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    for k, (flag, x) in enumerate(inputs_for("if")):
        np.save(tmp_path / "flag.npy", flag)
        np.save(tmp_path / "x.npy", x)
        p = subprocess.run([host_runner, lib, "main", tmp_path / f"o{k}_", tmp_path / "flag.npy",
                            tmp_path / "x.npy"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        np.testing.assert_array_equal(np.load(tmp_path / f"o{k}_0.npy"), vm["main"](flag, x).numpy())
    good = (tmp_path / "x.npy").read_bytes()
    bad = {"truncated.npy": good[:-4], "magic.npy": b"\x92" + good[1:],
           "header.npy": good[:10] + good[10:].replace(b"'shape'", b"'shapf'", 1),
           "fortran.npy": good.replace(b"False", b"True ", 1)}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        p = subprocess.run([host_runner, lib, "main", tmp_path / "bad_", tmp_path / "flag.npy",
                            tmp_path / name], capture_output=True, text=True)
        assert p.returncode == 2 and name in p.stderr, (name, p.stderr)
    assert not (tmp_path / "bad_0.npy").exists()
