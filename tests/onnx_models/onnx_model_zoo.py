"""Reference models written in PyTorch and exported to ONNX (opset 17) for the importer's
end-to-end tests, the ``onnx`` benchmark and ``examples/resnet18_onnx.py``.

The architectures follow torchvision (ResNet-18 with BasicBlock, MobileNetV2 with inverted
residuals) and GPT-2 (pre-norm decoder, causal mask, GELU, tied embeddings); the weights are
seeded random numbers, so nothing is downloaded. ``export(name, path)`` writes the .onnx file;
``MODELS[name]`` gives ``(build, input_shapes)``.
"""
from __future__ import annotations

import math
import os
import warnings

import numpy as np

OPSET = 17


def _torch():
    import torch
    return torch


# ---- ResNet-18 -----------------------------------------------------------------------------
def resnet18(num_classes: int = 1000):
    torch = _torch()
    nn = torch.nn

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, layers=(2, 2, 2, 2)):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._make_layer(64, layers[0])
            self.layer2 = self._make_layer(128, layers[1], 2)
            self.layer3 = self._make_layer(256, layers[2], 2)
            self.layer4 = self._make_layer(512, layers[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)

        def _make_layer(self, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                           nn.BatchNorm2d(planes))
            layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes
            layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


# ---- MobileNetV2 ---------------------------------------------------------------------------
def mobilenet_v2(num_classes: int = 1000):
    torch = _torch()
    nn = torch.nn

    def conv_bn(inp, oup, kernel, stride, groups=1, act=True):
        layers = [nn.Conv2d(inp, oup, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(oup)]
        if act:
            layers.append(nn.ReLU6(inplace=True))   # exported as Clip(0, 6)
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, inp, oup, stride, expand_ratio):
            super().__init__()
            hidden = int(round(inp * expand_ratio))
            self.use_res_connect = stride == 1 and inp == oup
            layers = [conv_bn(inp, hidden, 1, 1)] if expand_ratio != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),   # depthwise
                       conv_bn(hidden, oup, 1, 1, act=False)]               # linear bottleneck
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            setting = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
            inp, last = 32, 1280
            features = [conv_bn(3, inp, 3, 2)]
            for t, c, n, s in setting:
                for i in range(n):
                    features.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                    inp = c
            features.append(conv_bn(inp, last, 1, 1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


# ---- GPT-2-style decoder -------------------------------------------------------------------
def gpt2(vocab: int = 1024, d: int = 256, heads: int = 4, layers: int = 4, seq: int = 64):
    torch = _torch()
    nn = torch.nn
    F = nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_proj = nn.Linear(4 * d, d)
            # causal mask as a constant (exported as an initializer): 0 on and below the diagonal,
            # -1e4 above, added to the attention scores as GPT-2 does.
            mask = torch.triu(torch.full((seq, seq), -1e4), diagonal=1)
            self.register_buffer("mask", mask.view(1, 1, seq, seq), persistent=False)

        def attn(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            hd = d // heads
            q, k, v = (z.reshape(b, t, heads, hd).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)) + self.mask
            y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(b, t, d))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.wpe = nn.Embedding(seq, d)
            self.h = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(d)
            self.register_buffer("pos", torch.arange(seq).view(1, seq), persistent=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(self.pos)
            for block in self.h:
                x = block(x)
            return self.ln_f(x) @ self.wte.weight.t()    # tied embeddings: logits (1, seq, vocab)

    return GPT2()


# ---- MLP -------------------------------------------------------------------------------------
def mlp():
    nn = _torch().nn
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


# name -> (builder, {input name: (shape, dtype)})
MODELS = {
    "mlp": (mlp, {"x": ((1, 784), "float32")}),
    "resnet18": (resnet18, {"x": ((1, 3, 224, 224), "float32")}),
    "mobilenet_v2": (mobilenet_v2, {"x": ((1, 3, 224, 224), "float32")}),
    "gpt2": (gpt2, {"idx": ((1, 64), "int64")}),
}


def build(name: str, seed: int = 0):
    """The PyTorch model ``name`` with seeded random weights, in eval mode. BatchNorm running
    statistics are randomised too, so folding them is actually exercised."""
    torch = _torch()
    torch.manual_seed(seed)
    model = MODELS[name][0]()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return model.eval()


def example_inputs(name: str, seed: int = 0) -> dict:
    """Seeded inputs for model ``name`` as numpy arrays (input name -> array)."""
    rng = np.random.default_rng(seed)
    out = {}
    for n, (shape, dtype) in MODELS[name][1].items():
        if dtype == "int64":
            out[n] = rng.integers(0, 1024, size=shape, dtype=np.int64)
        else:
            out[n] = rng.standard_normal(shape).astype(dtype)
    return out


def export(name: str, path: str, seed: int = 0) -> str:
    """Write model ``name`` (seeded weights) as ONNX opset 17 to ``path``; returns ``path``.
    The IR version is pinned to 10 so every onnxruntime >= 1.16 loads the file."""
    import onnx
    torch = _torch()
    model = build(name, seed)
    inputs = example_inputs(name, seed)
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    tmp = path + ".tmp"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the TorchScript exporter's deprecation notices
        torch.onnx.export(model, args, tmp, input_names=list(inputs), output_names=["y"],
                          opset_version=OPSET, dynamo=False, do_constant_folding=True)
    proto = onnx.load(tmp)
    proto.ir_version = 10
    onnx.save(proto, path)
    os.remove(tmp)
    return path


def ort_session(path: str, threads: int = 1):
    """An onnxruntime CPU session for ``path`` with all graph optimisations and ``threads``
    intra-op threads."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
