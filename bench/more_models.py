"""Models beyond the four of bench/onnx_models.py, none of which the tests tune for: exported
from torchvision, transformers and torch.nn (an audio front end of 1-D convs, an LSTM, a
transformer encoder) at opset 17 (random weights, perturbed so that no constant
hides a wrong result), compiled with ``kiln compile`` in a child process, checked against
onnxruntime (relative 1e-4), then timed against it at 1 and 2 threads in alternating rounds.

    .venv/bin/python bench/more_models.py [--models vit bert resnet50 ...] [--rounds 5] [--calls 5]

Prints a Markdown table (Kiln / onnxruntime below 1: Kiln faster) and the CPU. ``--profile
MODEL`` prints that model's ten slowest kernels at one thread.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "torch_frontend"))   # prepare_torchvision, perturb
sys.path.insert(0, str(ROOT / "bench"))


def _vit(tv, torch):
    # torchvision's ViT with sequence-first nn.MultiheadAttention: (L, 1, E) projections
    m = tv.VisionTransformer(image_size=224, patch_size=16, num_layers=4, num_heads=6,
                             hidden_dim=384, mlp_dim=1536)
    return m, torch.randn(1, 3, 224, 224)


def _bert(tv, torch):
    import transformers
    cfg = transformers.BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                  intermediate_size=1024, vocab_size=8000)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = transformers.BertModel(cfg)

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state
    return Encoder(), torch.randint(0, 8000, (1, 128))


def _vision(name):
    return lambda tv, torch: (getattr(tv.models, name)(weights=None), torch.randn(1, 3, 224, 224))


def _audio_frontend(tv, torch):
    # wav2vec 2.0's feature encoder, narrowed: 1-D convs, GELU, one second at 16 kHz
    nn = torch.nn
    layers = [nn.Conv1d(1, 64, 10, 5), nn.GELU()]
    for _ in range(4):
        layers += [nn.Conv1d(64, 64, 3, 2), nn.GELU()]
    return nn.Sequential(*layers, nn.Conv1d(64, 128, 2, 2)), torch.randn(1, 1, 16000)


def _lstm(tv, torch):
    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(128, 256, 2, batch_first=True)
            self.out = torch.nn.Linear(256, 10)

        def forward(self, x):
            return self.out(self.lstm(x)[0])
    return Tagger(), torch.randn(1, 50, 128)


def _encoder(tv, torch):
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 4), torch.randn(1, 128, 256)


MODELS = {
    "vit": lambda tv, torch: _vit(tv.models, torch),
    "bert": _bert,
    "resnet50": _vision("resnet50"),
    "efficientnet_b0": _vision("efficientnet_b0"),
    "mobilenet_v3_small": _vision("mobilenet_v3_small"),
    "squeezenet1_1": _vision("squeezenet1_1"),
    "densenet121": _vision("densenet121"),
    "shufflenet_v2_x1_0": _vision("shufflenet_v2_x1_0"),
    "regnet_y_400mf": _vision("regnet_y_400mf"),
    "convnext_tiny": _vision("convnext_tiny"),
    "resnext50_32x4d": _vision("resnext50_32x4d"),
    "mnasnet1_0": _vision("mnasnet1_0"),
    "googlenet": _vision("googlenet"),
    "vgg11": _vision("vgg11"),
    "swin_t": _vision("swin_t"),
    "audio_frontend": _audio_frontend,
    "lstm": _lstm,
    "transformer_encoder": _encoder,
}


def export(name: str, path: str):
    """``name`` exported to ONNX at ``path``; returns its example input (numpy)."""
    from torch_helpers import perturb, prepare_torchvision
    prepare_torchvision()
    import torch
    import torchvision
    torch.manual_seed(0)
    model, x = MODELS[name](torchvision, torch)
    model = perturb(model.eval())
    torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"], output_names=["y"],
                      dynamo=False)
    return x.numpy()


def run(names, rounds: int = 5, calls: int = 5, profile: str = "") -> list:
    import kiln
    import onnxruntime as ort
    from onnx_models import alternate, compile_child
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path, lib = os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"{name}.so")
            x = export(name, path)
            compile_s, peak_mb = compile_child(path, lib, os.path.join(tmp, f"cache-{name}"))
            vm = kiln.VirtualMachine(lib, kiln.cpu())
            f, args = vm["main"], [kiln.nd.array(x)]
            for t in (1, 2):
                kiln.set_num_threads(t)
                so = ort.SessionOptions()
                so.intra_op_num_threads, so.inter_op_num_threads = t, 1
                sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                want = sess.run(None, {"x": x})[0]
                got = f(*args).numpy()
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
                med = alternate({"kiln": lambda: f(*args), "ort": lambda: sess.run(None, {"x": x})},
                                rounds=rounds, per_round=calls)
                rows.append({"model": name, "threads": t, "compile_s": compile_s, "peak_mb": peak_mb,
                             "kiln_ms": med["kiln"] * 1e3, "ort_ms": med["ort"] * 1e3,
                             "ratio": med["kiln"] / med["ort"]})
            if name == profile:
                kiln.set_num_threads(1)
                report = vm.profile("main", *args)
                top = sorted((r for r in report.rows if r.kind == "kernel"), key=lambda r: -r.total_us)
                print(f"# {name}, one thread, one profiled call ({report.total_us / 1e3:.2f} ms):")
                for r in top[:10]:
                    print(f"#   {r.name:<48} {r.calls:>3} calls {r.total_us / 1e3:7.2f} ms")
            del vm, f
    kiln.set_num_threads(0)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--profile", choices=sorted(MODELS), default="")
    args = p.parse_args()
    if args.rounds < 1 or args.calls < 1:
        p.error("--rounds and --calls must be at least 1")
    from onnx_models import cpu_name
    rows = run(args.models, args.rounds, args.calls, args.profile)
    print(f"CPU: {cpu_name()}")
    print("| model | threads | compile s | compile peak MB | Kiln ms | onnxruntime ms | Kiln / ort |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['threads']} | {r['compile_s']:.1f} | {r['peak_mb']:.0f} | "
              f"{r['kiln_ms']:.2f} | {r['ort_ms']:.2f} | {r['ratio']:.2f} |")


if __name__ == "__main__":
    main()
