"""torchvision classification models with random weights (weights=None, nothing downloaded),
exported, imported, compiled with the "default" pipeline and compared with torch eager at
rtol = 1e-4 and atol = 1e-4 times the output's largest magnitude (fp32). Each compiles a whole
network (15-45 s on a 2-core machine): marked slow."""
from __future__ import annotations

import numpy as np
import pytest

from torch_helpers import compile_program, import_torchvision, outputs, perturb, torch, torch_outputs

pytestmark = pytest.mark.slow


def build(name):
    tv = import_torchvision()
    if name == "vit_tiny":
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                 mlp_dim=64, num_classes=10), (1, 3, 32, 32)
    return getattr(tv.models, name)(weights=None), (1, 3, 112, 112)


def compare(got, want):
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert scale > 1e-3, f"outputs too small to compare ({scale})"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
                                  "squeezenet1_1", "shufflenet_v2_x0_5", "vit_tiny"])
def test_classification_model(name):
    model, shape = build(name)
    model = perturb(model)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    vm, _, _ = compile_program(torch.export.export(model, (x,)))
    compare(outputs(vm, x)[0], torch_outputs(model, x)[0])


def test_resnet18_dynamic_batch():
    model, shape = build("resnet18")
    model = perturb(model)
    batch = torch.export.Dim("batch", min=1, max=4)
    x = torch.randn(2, *shape[1:])
    vm, mod, _ = compile_program(torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}}))
    assert str(mod["main"].params[0].ty.shape[0]) == "batch"
    for n in (1, 3):
        xn = torch.randn(n, *shape[1:])
        compare(outputs(vm, xn)[0], torch_outputs(model, xn)[0])
