"""``kiln compile model.pt2``: a program saved with torch.export.save compiles from the command
line, runs with ``kiln run``, and a file that is not one fails with a message naming it."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from torch_helpers import torch, torch_outputs

KILN = [sys.executable, "-m", "kiln.cli"]


def kiln(*args, cwd):
    return subprocess.run(KILN + list(args), cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_compile_and_run_pt2(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    batch = torch.export.Dim("batch", min=1, max=32)
    ep = torch.export.export(model, (torch.randn(2, 8),), dynamic_shapes=({0: batch},))
    torch.export.save(ep, str(tmp_path / "mlp.pt2"))
    proc = kiln("compile", "mlp.pt2", "-o", "mlp.so", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 kernels" in proc.stdout
    x = torch.randn(5, 8)
    np.save(tmp_path / "x.npy", x.numpy())
    proc = kiln("run", "mlp.so", "--input", "input=x.npy", "--output", "y.npy", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), torch_outputs(model, x)[0], rtol=1e-5, atol=1e-5)


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
