"""Issue 15: an app linked from export_static for a foreign triple (the model's archive, the
runtime cross-built for that triple, one C file) runs under qemu with no other file, and prints
what the x86-64 build computes."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from conftest import MODELS, TARGETS, compile_onnx, need_qemu  # noqa: E402
from kiln.codegen.toolchain import cross_cc, qemu_command  # noqa: E402

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]


def _x():
    return (((np.arange(32) * 7) % 19 - 9) / 16).astype("float32").reshape(2, 16)


def build_runtime(triple: str, runtime_make, dest, variant: str = ""):
    """Cross-build the runtime for ``triple`` (``variant``: a make target such as "embedded",
    else the default build) and copy its static library to ``dest``."""
    sub = f"{triple}/{variant}/" if variant else f"{triple}/"
    runtime_make(f"TARGET={triple}", variant or "all", copy={f"{sub}libkiln_runtime.a": dest})
    return dest


@pytest.mark.parametrize("arch", ["armv7", "aarch64"])
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
