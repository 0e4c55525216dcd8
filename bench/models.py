"""Whole models through kiln.nn -> "default" pipeline -> kiln.compile -> VM, against PyTorch
(the same module code and weights) in the same process: compile time and latency.

The model classes are written once against an ``nn`` namespace, so the very same code builds
a ``kiln.nn`` model and a ``torch.nn`` one, and PyTorch's state dict loads into Kiln's.
"""
from __future__ import annotations

import tempfile
import time

import numpy as np

import kiln
from kiln.codegen import BuildOptions


def mlp(nn):
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.relu1 = nn.ReLU()
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return self.fc2(self.relu1(self.fc1(x)))
    return MLP(), (1, 784)


def cnn(nn):
    class CNN(nn.Module):
        """conv-bn-relu-pool x2, then a linear classifier (32x32 RGB input)."""
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
            self.pool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(self.pool(self.features(x)).flatten(1))
    return CNN(), (1, 3, 32, 32)


def transformer(nn):
    class EncoderLayer(nn.Module):
        """Pre-norm transformer layer (attention + GELU MLP), d 256, 4 heads, sequence 64."""
        def __init__(self, d=256, heads=4, ff=1024):
            super().__init__()
            self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.linear1 = nn.Linear(d, ff)
            self.linear2 = nn.Linear(ff, d)
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.act = nn.GELU()

        def forward(self, x):
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, need_weights=False)[0]
            return x + self.linear2(self.act(self.linear1(self.norm2(x))))
    return EncoderLayer(), (1, 64, 256)


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


def run(names=tuple(MODELS), threads=(1, 2), repeat: int = 20) -> list[dict]:
    import torch

    from harness import time_best

    rows = []
    for name in names:
        tm, shape = MODELS[name](torch.nn)
        tm.eval()
        km, _ = MODELS[name](kiln.nn)
        km.load_state_dict(tm.state_dict())
        x = np.random.default_rng(0).standard_normal(shape).astype("float32")

        t0 = time.perf_counter()
        mod, param_spec = km.export({"forward": {"x": kiln.nn.spec.Tensor(shape, "float32")}})
        state = km.state_dict()
        mod = kiln.transform.bind_params("forward", {n: state[n] for n, _ in param_spec})(mod)
        mod = kiln.get_pipeline("default")(mod)
        with tempfile.TemporaryDirectory() as cold_cache:  # measure a real compile, not a cache hit
            ex = kiln.compile(mod, "llvm", options=BuildOptions(cache_dir=cold_cache))
            compile_s = time.perf_counter() - t0
            vm = kiln.VirtualMachine(ex, kiln.cpu())
        kx = kiln.nd.array(x)
        with torch.no_grad():
            ref = tm(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(vm["forward"](kx).numpy(), ref, rtol=1e-3, atol=1e-3)
        for t in threads:
            kiln.set_num_threads(t)
            torch.set_num_threads(t)
            t_kiln = time_best(lambda: vm["forward"](kx), repeat)
            with torch.no_grad():
                tx = torch.from_numpy(x)
                t_torch = time_best(lambda: tm(tx), repeat)
            rows.append({"model": name, "threads": t, "kernels": len(ex.kernel_names),
                         "arena_kb": ex.stats.arena_size / 1024,
                         "compile_s": compile_s, "kiln_ms": t_kiln * 1e3, "torch_ms": t_torch * 1e3,
                         "speedup_vs_torch": t_torch / t_kiln})
    kiln.set_num_threads(0)
    return rows
