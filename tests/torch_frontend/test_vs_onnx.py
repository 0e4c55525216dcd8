"""The torch.export path is not a slower path: a model imported through ONNX (torch's exporter)
and through torch.export compiles with "default" to the same number of kernels and the same
arena, and runs at the same speed within noise (best of interleaved runs, 1.3x)."""
from __future__ import annotations

import io

import numpy as np
import pytest

from torch_helpers import import_torchvision, perturb, torch

import kiln

onnx = pytest.importorskip("onnx")


def both(model, x):
    """(executable via ONNX, executable via torch.export) of ``model`` at input ``x``."""
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"])   # the TorchScript exporter

    def build(mod, params):
        return kiln.compile(kiln.get_pipeline("default")(kiln.transform.bind_params("main", params)(mod)), "llvm")
    via_onnx = build(*kiln.frontend.from_onnx(onnx.load_from_string(buf.getvalue())))
    via_torch = build(*kiln.frontend.from_exported_program(torch.export.export(model, (x,))))
    return via_onnx, via_torch


def counts(ex):
    """(kernels, arena bytes) from the executable's summary line."""
    text = str(ex)
    return tuple(int(text[text.index(key) + len(key):].split(",")[0].split(" ")[0])
                 for key in ("kernels=", "arena="))


def test_block_same_kernels_as_onnx():
    from test_torch_models import Block
    model = perturb(Block()).eval()
    via_onnx, via_torch = both(model, torch.randint(0, 50, (1, 8)))
    # torch's ONNX exporter splits the attention scale over q and k, which fuse_attention does
    # not match; scaled_dot_product_attention kept whole fuses: fewer kernels, never more
    (k_torch, arena_torch), (k_onnx, arena_onnx) = counts(via_torch), counts(via_onnx)
    assert k_torch <= k_onnx and arena_torch <= arena_onnx, (counts(via_torch), counts(via_onnx))


@pytest.mark.slow
def test_resnet18_same_kernels_and_speed_as_onnx():
    model = perturb(import_torchvision().models.resnet18(weights=None)).eval()
    x = torch.randn(1, 3, 224, 224)
    via_onnx, via_torch = both(model, x)
    assert counts(via_torch) == counts(via_onnx)
    vms = [kiln.VirtualMachine(ex, kiln.cpu()) for ex in (via_onnx, via_torch)]
    np.testing.assert_allclose(vms[1]["main"](x.numpy()).numpy(), vms[0]["main"](x.numpy()).numpy(),
                               rtol=1e-4, atol=1e-4)
    # interleaved rounds, the best time of each path: load from other work on a shared machine
    # only ever adds time, so the minimum is the estimate least hit by it
    best = [float("inf"), float("inf")]
    for _ in range(6):
        for k, vm in enumerate(vms):
            best[k] = min(best[k], vm.time_evaluator("main", kiln.cpu(), number=2, repeat=5)(x.numpy()).min)
    assert best[1] <= 1.3 * best[0], f"torch.export path {best[1] * 1e3:.1f} ms, ONNX path {best[0] * 1e3:.1f} ms"
