"""``kiln compile model.pt2``: a program saved with torch.export.save compiles from the command
line, runs with ``kiln run``, and a file that is not one fails with a message naming it; the
Dim names saved by ``kiln.frontend.torch.save`` come back."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from torch_helpers import torch, torch_outputs

import kiln as kiln_pkg

KILN = [sys.executable, "-m", "kiln.cli"]


def kiln(*args, cwd):
    return subprocess.run(KILN + list(args), cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_compile_and_run_pt2(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    batch = torch.export.Dim("batch", min=1, max=32)
    ep = torch.export.export(model, (torch.randn(2, 8),), dynamic_shapes=({0: batch},))
    kiln_pkg.frontend.torch.save(ep, tmp_path / "mlp.pt2")        # torch.export.save + the Dim names
    proc = kiln("compile", "mlp.pt2", "-o", "mlp.so", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 kernels" in proc.stdout
    x = torch.randn(5, 8)
    np.save(tmp_path / "x.npy", x.numpy())
    proc = kiln("run", "mlp.so", "--input", "input=x.npy", "--output", "y.npy", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), torch_outputs(model, x)[0], rtol=1e-5, atol=1e-5)
    np.save(tmp_path / "big.npy", np.zeros((33, 8), np.float32))
    proc = kiln("run", "mlp.so", "--input", "input=big.npy", cwd=tmp_path)
    assert proc.returncode != 0 and "'batch' = 33 exceeds its bound 32" in proc.stderr, proc.stderr


def test_dim_names_survive_save_and_load(tmp_path):
    # torch.export.save drops the Dim names (its archive keeps only s77 and its range)
    model = torch.nn.Linear(4, 3).eval()
    batch = torch.export.Dim("batch", min=2, max=16)
    ep = torch.export.export(model, (torch.randn(3, 4),), dynamic_shapes=({0: batch},))
    kiln_pkg.frontend.torch.save(ep, tmp_path / "kept.pt2")
    torch.export.save(ep, str(tmp_path / "plain.pt2"))
    kept, _ = kiln_pkg.frontend.torch.load(tmp_path / "kept.pt2")
    plain, _ = kiln_pkg.frontend.torch.load(tmp_path / "plain.pt2")
    assert [str(d) for d in kept["main"].params[0].ty.shape] == ["batch", "4"]
    assert dict(kept["main"].attr("kiln.bounds")) == {"batch": 16}
    assert [str(d) for d in plain["main"].params[0].ty.shape] == ["input_dim0", "4"]
    # the program saved by kiln is still an ordinary torch.export archive
    ep2 = torch.export.load(str(tmp_path / "kept.pt2"))
    x = torch.randn(5, 4)
    np.testing.assert_allclose(ep2.module()(x).detach().numpy(), torch_outputs(model, x)[0], rtol=1e-6)


def test_not_a_program(tmp_path):
    (tmp_path / "bad.pt2").write_text("not a zip archive")
    proc = kiln("compile", "bad.pt2", cwd=tmp_path)
    assert proc.returncode == 1
    assert "bad.pt2: not a torch.export program" in proc.stderr
    assert not os.path.exists(tmp_path / "bad.so")


def test_shape_option_is_refused(tmp_path):
    model = torch.nn.Linear(2, 2).eval()
    torch.export.save(torch.export.export(model, (torch.randn(1, 2),)), str(tmp_path / "m.pt2"))
    proc = kiln("compile", "m.pt2", "--shape", "input=1,2", cwd=tmp_path)
    assert proc.returncode == 1 and "--shape" in proc.stderr
