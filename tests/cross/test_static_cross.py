"""Issue 15: an app linked from export_static for a foreign triple (armv7, aarch64, riscv64: the
model's archive, the runtime cross-built for that triple, one C file) runs under qemu with no
other file, and prints what the x86-64 build computes."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from cross_helpers import (HERE, MODELS, ROOT, TARGETS, build_runtime, compile_onnx,  # noqa: E402
                           need_qemu, static_x as _x)
from kiln.codegen.toolchain import cross_cc, qemu_command  # noqa: E402

@pytest.mark.parametrize("arch", ["armv7", "aarch64", "riscv64"])
def test_export_static_app_runs_under_qemu(arch, tmp_path, runtime_make):
    target = TARGETS[arch]
    need_qemu(target)
    triple = target.split()[0]
    ex = compile_onnx(MODELS["mlp"](), target)
    files = ex.export_static(tmp_path, "m")
    assert os.path.getsize(files["archive"]) > 0
    rt = build_runtime(triple, runtime_make, tmp_path / "libkiln_runtime.a")
    app = tmp_path / "static_app"
    proc = subprocess.run([*cross_cc(triple), "-std=c99", "-O1", f"-I{tmp_path}",
                           f"-I{ROOT / 'runtime_c' / 'include'}", str(HERE / "programs" / "static_app.c"),
                           files["archive"], str(rt), "-o", str(app), "-lm", "-lpthread", "-ldl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # Only the program, in a directory of its own: no model library next to it.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(app, alone / "static_app")
    proc = subprocess.run([*qemu_command(triple), "./static_app"], cwd=alone, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = np.array([float(v) for v in proc.stdout.split()], dtype="float32").reshape(2, 10)
    want = kiln.VirtualMachine(compile_onnx(MODELS["mlp"](), "llvm"), kiln.cpu())["main"](_x()).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert os.listdir(alone) == ["static_app"]


def test_fully_static_armv7_app_runs_with_qemu_alone(tmp_path, runtime_make):
    """The model's archive (armv7 hard float, NEON) with the embedded runtime built for musl
    (make -C runtime_c TARGET=armv7-linux-musleabihf embedded), linked -static by zig cc: one
    file that qemu-arm runs with no C library of the target anywhere (no -L)."""
    from kiln.codegen.toolchain import have_zig
    if not have_zig():
        pytest.skip("needs zig cc (the ziglang package, pip install 'kiln[cross]') for musl")
    qemu = shutil.which("qemu-arm")
    if qemu is None:
        pytest.skip("needs Debian's qemu-user (apt-get install qemu-user)")
    files = compile_onnx(MODELS["mlp"](), TARGETS["armv7"]).export_static(tmp_path, "m")
    rt = tmp_path / "libkiln_runtime.a"
    runtime_make("TARGET=armv7-linux-musleabihf", "embedded",
                 copy={"armv7-linux-musleabihf/embedded/libkiln_runtime.a": rt})
    alone = tmp_path / "alone"
    alone.mkdir()
    proc = subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "arm-linux-musleabihf",
                           "-static", "-std=c99", "-O1", f"-I{tmp_path}",
                           f"-I{ROOT / 'runtime_c' / 'include'}", str(HERE / "programs" / "static_app.c"),
                           files["archive"], str(rt), "-lm", "-o", str(alone / "static_app")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with open(alone / "static_app", "rb") as f:
        elf = f.read()
    assert b"ld-linux" not in elf and elf[:4] == b"\x7fELF"    # no dynamic loader: fully static
    proc = subprocess.run([qemu, "./static_app"], cwd=alone, capture_output=True, text=True,
                          timeout=120, env={})
    assert proc.returncode == 0, proc.stderr
    got = np.array([float(v) for v in proc.stdout.split()], dtype="float32").reshape(2, 10)
    want = kiln.VirtualMachine(compile_onnx(MODELS["mlp"](), "llvm"), kiln.cpu())["main"](_x()).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
