"""ResNet-18 from ONNX: export a (seeded, randomly initialised) torchvision-style ResNet-18 from
PyTorch to ONNX, import it with kiln.frontend.from_onnx, compile it, run an image and compare
the top-1 class with onnxruntime.

    .venv/bin/python examples/resnet18_onnx.py

Needs the test extras (torch, onnx, onnxruntime); with a real checkpoint, load its state_dict
into ``ResNet18()`` instead of the seeded weights.
"""
import os
import tempfile
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

import kiln


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    """torchvision's ResNet-18 layout: the same module names, so its state_dict loads."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def image():
    """A 224x224 RGB test picture (a coloured disc on a gradient), normalised like ImageNet."""
    yy, xx = np.mgrid[0:224, 0:224] / 223.0
    disc = ((xx - 0.6) ** 2 + (yy - 0.4) ** 2 < 0.06).astype(np.float64)
    rgb = np.stack([0.8 * disc + 0.2 * xx, 0.3 + 0.4 * yy, 0.9 - 0.7 * disc])
    mean = np.array([0.485, 0.456, 0.406])[:, None, None]
    std = np.array([0.229, 0.224, 0.225])[:, None, None]
    return ((rgb - mean) / std)[None].astype("float32")


def best_of(n, fn):
    """(result, best wall time in seconds) of ``n`` calls of ``fn``."""
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main():
    torch.manual_seed(0)
    model = ResNet18().eval()
    x = image()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet18.onnx")
        t0 = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation notice
            torch.onnx.export(model, (torch.from_numpy(x),), path, input_names=["x"],
                              output_names=["logits"], opset_version=17, dynamo=False)
        proto = onnx.load(path)
        proto.ir_version = 10            # onnxruntime 1.31 reads IR versions <= 13
        onnx.save(proto, path)
        print(f"exported {path} ({len(proto.graph.node)} nodes) in {time.perf_counter() - t0:.1f} s")

        t0 = time.perf_counter()
        mod, params = kiln.frontend.from_onnx(proto)
        mod = kiln.transform.bind_params("main", params)(mod)
        ex = kiln.compile(kiln.get_pipeline("default")(mod), target="llvm")
        print(f"compiled in {time.perf_counter() - t0:.1f} s: {ex}")
        vm = kiln.VirtualMachine(ex, kiln.cpu())

        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        y_kiln, t_kiln = best_of(3, lambda: vm["main"](x).numpy())
        y_ort, t_ort = best_of(3, lambda: sess.run(None, {"x": x})[0])

    top_kiln, top_ort = int(y_kiln.argmax()), int(y_ort.argmax())
    print(f"kiln:        top-1 class {top_kiln} (logit {y_kiln[0, top_kiln]:.5f}), {t_kiln * 1e3:.1f} ms")
    print(f"onnxruntime: top-1 class {top_ort} (logit {y_ort[0, top_ort]:.5f}), {t_ort * 1e3:.1f} ms")
    print(f"max |kiln - onnxruntime| = {np.abs(y_kiln - y_ort).max():.2e}")
    assert top_kiln == top_ort, "top-1 differs"
    np.testing.assert_allclose(y_kiln, y_ort, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    main()
