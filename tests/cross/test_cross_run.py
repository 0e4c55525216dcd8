"""Issue 15: models compiled for aarch64, armv7 (NEON) and riscv64 (RVV) link with the cross
toolchain, run under qemu-user through the per-triple runner, and equal the x86-64 outputs to
1e-5; `kiln compile --target` + `kiln run` do the same from the command line."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from cross_helpers import MODELS, TARGETS, compile_onnx, inputs_for, need_qemu  # noqa: E402
from kiln.executable.foreign import ForeignRunError, library_triple, run_foreign  # noqa: E402


@pytest.fixture(scope="module")
def host_outputs():
    """Per model, the host (x86-64) outputs for each input list."""
    out = {}
    for name, make in MODELS.items():
        vm = kiln.VirtualMachine(compile_onnx(make(), "llvm"), kiln.cpu())
        out[name] = [vm["main"](*args).numpy() for args in inputs_for(name)]
    return out


@pytest.mark.parametrize("arch", list(TARGETS))
@pytest.mark.parametrize("model", list(MODELS))
def test_model_under_qemu_equals_host(arch, model, host_outputs, tmp_path):
    target = TARGETS[arch]
    need_qemu(target)
    ex = compile_onnx(MODELS[model](), target)
    lib = ex.export_library(tmp_path / f"{model}-{arch}.so")
    assert library_triple(lib) == target.split()[0]
    assert kiln.executable.load_spec(lib).target == str(kiln.codegen.target.parse_target(target))
    for args, want in zip(inputs_for(model), host_outputs[model]):
        (got,) = run_foreign(lib, "main", args)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{model} on {arch}")


def test_runtime_errors_come_back_from_the_foreign_runner(tmp_path):
    """A wrong input shape is refused by the runtime inside qemu, with its message."""
    target = TARGETS["aarch64"]
    need_qemu(target)
    lib = compile_onnx(MODELS["mlp"](), target).export_library(tmp_path / "mlp.so")
    with pytest.raises(ForeignRunError, match=r"main: argument 0 'x' expected shape \(2, 16\), got \(2, 17\)"):
        run_foreign(lib, "main", [np.zeros((2, 17), "float32")])


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "kiln.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=600, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(TARGETS))
def test_cli_compile_target_and_run_under_qemu(arch, tmp_path):
    """The same ONNX model, `kiln compile --target <triple>` then `kiln run` (under qemu),
    equals the host build's `kiln run`."""
    import onnx
    target = TARGETS[arch]
    need_qemu(target)
    onnx.save(MODELS["cnn"](), str(tmp_path / "cnn.onnx"))
    x = inputs_for("cnn")[0][0]
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for name, t in (("host", "llvm"), (arch, target)):
        proc = _cli("compile", tmp_path / "cnn.onnx", "-q", "--target", t, "-o", tmp_path / f"{name}.so")
        assert proc.returncode == 0, proc.stderr
        proc = _cli("run", tmp_path / f"{name}.so", "--input", f"x={tmp_path / 'x.npy'}",
                    "--output", tmp_path / f"{name}.npy")
        assert proc.returncode == 0, proc.stderr
        outs[name] = np.load(tmp_path / f"{name}.npy")
    np.testing.assert_allclose(outs[arch], outs["host"], rtol=1e-5, atol=1e-5)
    proc = _cli("inspect", tmp_path / f"{arch}.so")
    assert proc.returncode == 0 and target.split()[0] in proc.stdout, proc.stderr


def test_cli_run_names_the_missing_qemu_package(tmp_path):
    """Without qemu on PATH, `kiln run` of a foreign library says which package to install."""
    target = TARGETS["armv7"]
    from cross_helpers import need_toolchain
    need_toolchain(target)
    lib = compile_onnx(MODELS["mlp"](), target).export_library(tmp_path / "mlp.so")
    np.save(tmp_path / "x.npy", inputs_for("mlp")[0][0])
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))
    proc = _cli("run", lib, "--input", f"x={tmp_path / 'x.npy'}", env=env)
    assert proc.returncode != 0
    assert "qemu-user" in proc.stderr and "apt-get install" in proc.stderr, proc.stderr
