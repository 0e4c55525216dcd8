"""The torch.export frontend is not a slower path: ResNet-18 (torchvision, seeded random
weights) imported through ONNX (torch's TorchScript exporter) and through torch.export,
compiled with "default", timed in alternating rounds in one process (``alternate``), batch 1.

    .venv/bin/python bench/run.py torch_export [--repeat 10]

- ``kernels``: kernels of each executable (torch.export / ONNX);
- ``onnx_ms`` / ``torch_ms``: median latency of one inference; ``torch/onnx`` near 1: the same
  speed (the two compile to the same kernels and schedules, tests/torch_frontend/test_vs_onnx.py).
"""
from __future__ import annotations

import io
import os
import sys

import numpy as np

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch_frontend"))


def _kernels(ex) -> int:
    text = str(ex)
    return int(text[text.index("kernels=") + len("kernels="):].split(",")[0].split(" ")[0])


def _compile(mod, params):
    mod = kiln.get_pipeline("default")(kiln.transform.bind_params("main", params)(mod))
    return kiln.compile(mod, "llvm")


def run(threads=(1, 2), repeat: int = 10) -> list[dict]:
    """One row per thread count: both paths' kernel counts and median latencies."""
    import onnx
    import torch
    from onnx_models import alternate
    from torch_helpers import perturb, prepare_torchvision
    prepare_torchvision()
    import torchvision
    torch.manual_seed(0)
    model = perturb(torchvision.models.resnet18(weights=None)).eval()
    x = torch.randn(1, 3, 224, 224)
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"])
    via_onnx = _compile(*kiln.frontend.from_onnx(onnx.load_from_string(buf.getvalue())))
    via_torch = _compile(*kiln.frontend.from_exported_program(torch.export.export(model, (x,))))
    f_onnx = kiln.VirtualMachine(via_onnx, kiln.cpu())["main"]
    f_torch = kiln.VirtualMachine(via_torch, kiln.cpu())["main"]
    arg = kiln.nd.array(x.numpy())
    np.testing.assert_allclose(f_torch(arg).numpy(), f_onnx(arg).numpy(), rtol=1e-4, atol=1e-4)
    rows = []
    for t in threads:
        kiln.set_num_threads(t)
        med = alternate({"onnx": lambda: f_onnx(arg), "torch": lambda: f_torch(arg)}, per_round=repeat)
        rows.append({"model": "resnet18", "threads": t, "kernels": f"{_kernels(via_torch)} / {_kernels(via_onnx)}",
                     "onnx_ms": med["onnx"] * 1e3, "torch_ms": med["torch"] * 1e3,
                     "torch/onnx": med["torch"] / med["onnx"]})
    return rows


if __name__ == "__main__":
    from harness import table
    from onnx_models import cpu_name
    print(f"# machine: {cpu_name()}, {os.cpu_count()} cores")
    print(table(run()))
