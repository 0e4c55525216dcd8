"""Models beyond the four of bench/onnx_models.py, none of which the tests tune for: exported
from torchvision, transformers and torch.nn (an audio front end of 1-D convs, an LSTM and a GRU,
a transformer encoder, BERT's and T5's encoders, transformers' GPT-2, a LLaMA-style decoder, a
Whisper-style encoder, Conformer blocks, a dilated temporal conv net, a diffusion-style U-Net
level, a U-Net, a YOLO-style detector, SSDlite's heads, ESPCN super-resolution) at opset 17
(random weights, perturbed so that no constant hides a wrong result), compiled with ``kiln
compile`` in a child process, checked against
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


def _hf_encoder(model: str, config: str, tokens: int, **options):
    """transformers' ``model`` (an encoder) built from ``config(**options)``, random weights,
    over ``tokens`` token ids; returns its last hidden state."""
    def build(tv, torch):
        import transformers
        cfg = getattr(transformers, config)(**options)

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = getattr(transformers, model)(cfg)

            def forward(self, ids):
                return self.m(input_ids=ids).last_hidden_state
        return Encoder(), torch.randint(0, 8000, (1, tokens))
    return build


_bert = _hf_encoder("BertModel", "BertConfig", 128, hidden_size=256, num_hidden_layers=4,
                    num_attention_heads=4, intermediate_size=1024, vocab_size=8000)
# T5's encoder, narrowed: RMSNorm (an x ** 2), relative position bias, gated GELU
_t5_encoder = _hf_encoder("T5EncoderModel", "T5Config", 100, d_model=256, d_kv=64, d_ff=1024,
                          num_layers=4, num_heads=4, vocab_size=8000, feed_forward_proj="gated-gelu")


def _vision(name):
    return lambda tv, torch: (getattr(tv.models, name)(weights=None), torch.randn(1, 3, 224, 224))


def _audio_frontend(tv, torch):
    # wav2vec 2.0's feature encoder, narrowed: 1-D convs, GELU, one second at 16 kHz
    nn = torch.nn
    layers = [nn.Conv1d(1, 64, 10, 5), nn.GELU()]
    for _ in range(4):
        layers += [nn.Conv1d(64, 64, 3, 2), nn.GELU()]
    return nn.Sequential(*layers, nn.Conv1d(64, 128, 2, 2)), torch.randn(1, 1, 16000)


def _tagger(cell: str):
    """A two-layer recurrent tagger over 50 steps: ``cell`` is "LSTM" or "GRU"."""
    def build(tv, torch):
        class Tagger(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = getattr(torch.nn, cell)(128, 256, 2, batch_first=True)
                self.out = torch.nn.Linear(256, 10)

            def forward(self, x):
                return self.out(self.rnn(x)[0])
        return Tagger(), torch.randn(1, 50, 128)
    return build


def _encoder(tv, torch):
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 4), torch.randn(1, 128, 256)


def _segmentation(name):
    def build(tv, torch):
        m = getattr(tv.models.segmentation, name)(weights=None, weights_backbone=None)

        class Out(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        return Out(), torch.randn(1, 3, 224, 224)
    return build


def _unet(tv, torch):
    # two levels down, two up through transposed convs, skips concatenated
    nn = torch.nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1, self.e2, self.e3 = block(3, 32), block(32, 64), block(64, 128)
            self.pool = nn.MaxPool2d(2)
            self.u2, self.d2 = nn.ConvTranspose2d(128, 64, 2, 2), block(128, 64)
            self.u1, self.d1 = nn.ConvTranspose2d(64, 32, 2, 2), block(64, 32)
            self.head = nn.Conv2d(32, 2, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.e2(self.pool(a))
            c = self.e3(self.pool(b))
            d = self.d2(torch.cat([self.u2(c), b], 1))
            return self.head(self.d1(torch.cat([self.u1(d), a], 1)))
    return UNet(), torch.randn(1, 3, 128, 128)


def _espcn(tv, torch):
    # super-resolution x3: convs at the input's 224 x 224, then a pixel shuffle
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 64, 5, padding=2), nn.Tanh(), nn.Conv2d(64, 32, 3, padding=1),
                         nn.Tanh(), nn.Conv2d(32, 9, 3, padding=1), nn.PixelShuffle(3)), \
        torch.randn(1, 1, 224, 224)


def _yolo_like(tv, torch):
    # a YOLOv5-style backbone and neck, narrowed: conv-BN-SiLU, C3 blocks, nearest upsampling
    nn = torch.nn

    def cbs(i, o, k=3, s=1, p=None):
        return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2 if p is None else p, bias=False),
                             nn.BatchNorm2d(o), nn.SiLU())

    class C3(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a, self.b, self.o = cbs(c, c // 2, 1), cbs(c, c // 2, 1), cbs(c, c, 1)
            self.m = nn.Sequential(cbs(c // 2, c // 2, 1), cbs(c // 2, c // 2))

        def forward(self, x):
            a = self.a(x)
            return self.o(torch.cat([self.m(a) + a, self.b(x)], 1))

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(cbs(3, 16, 6, 2, 2), cbs(16, 32, 3, 2), C3(32), cbs(32, 64, 3, 2), C3(64))
            self.down = nn.Sequential(cbs(64, 128, 3, 2), C3(128))
            self.up, self.lat = nn.Upsample(scale_factor=2, mode="nearest"), cbs(128, 64, 1)
            self.fuse, self.head = C3(128), nn.Conv2d(128, 3 * 85, 1)

        def forward(self, x):
            p3 = self.stem(x)
            return self.head(self.fuse(torch.cat([self.up(self.lat(self.down(p3))), p3], 1)))
    return Yolo(), torch.randn(1, 3, 320, 320)


def _llama(tv, torch):
    # a LLaMA-style decoder, written out (transformers' masks do not export at opset 17):
    # RMSNorm, rotary embeddings, grouped-query attention (4 heads, 2 key/value heads), SwiGLU
    nn, F = torch.nn, torch.nn.functional
    d, h, kvh, hd, ff, layers, vocab, t = 256, 4, 2, 64, 688, 4, 8000, 64
    angles = torch.arange(t)[:, None] * (10000 ** (-torch.arange(0, hd, 2) / hd))[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)

    def rope(x):
        return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = RMSNorm(), RMSNorm()
            self.q, self.o = nn.Linear(d, h * hd, bias=False), nn.Linear(h * hd, d, bias=False)
            self.k, self.v = nn.Linear(d, kvh * hd, bias=False), nn.Linear(d, kvh * hd, bias=False)
            self.gate, self.up = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
            self.down = nn.Linear(ff, d, bias=False)

        def forward(self, x):
            y = self.n1(x)
            q = rope(self.q(y).view(1, t, h, hd).transpose(1, 2))
            k = rope(self.k(y).view(1, t, kvh, hd).transpose(1, 2)).repeat_interleave(h // kvh, 1)
            v = self.v(y).view(1, t, kvh, hd).transpose(1, 2).repeat_interleave(h // kvh, 1)
            att = ((q @ k.transpose(-1, -2)) / hd ** 0.5).masked_fill(causal, float("-inf"))
            x = x + self.o((att.softmax(-1) @ v).transpose(1, 2).reshape(1, t, h * hd))
            y = self.n2(x)
            return x + self.down(F.silu(self.gate(y)) * self.up(y))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.norm = nn.Embedding(vocab, d), RMSNorm()
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, ids):
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(self.norm(x))
    return LM(), torch.randint(0, vocab, (1, t))


def _hf_gpt2(tv, torch):
    # transformers' GPT-2 (its tanh GELU has an x ** 3), narrowed; position ids given, as its
    # packed-sequence check does not export at opset 17
    import transformers
    cfg = transformers.GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=8000, n_positions=128,
                                  attn_implementation="eager")

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = transformers.GPT2LMHeadModel(cfg)

        def forward(self, ids):
            return self.m(input_ids=ids, position_ids=torch.arange(64)[None], use_cache=False).logits
    return LM(), torch.randint(0, 8000, (1, 64))


def _groupnorm_unet(tv, torch):
    # a diffusion-style U-Net level: GroupNorm, SiLU, residual convs, nearest upsampling
    nn, F = torch.nn, torch.nn.functional

    class Res(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n1, self.n2 = nn.GroupNorm(8, c), nn.GroupNorm(8, c)
            self.c1, self.c2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

        def forward(self, x):
            return x + self.c2(F.silu(self.n2(self.c1(F.silu(self.n1(x))))))
    return nn.Sequential(nn.Conv2d(4, 64, 3, padding=1), Res(64), Res(64), nn.Conv2d(64, 128, 3, 2, 1),
                         Res(128), Res(128), nn.Upsample(scale_factor=2),
                         nn.Conv2d(128, 64, 3, padding=1), Res(64), nn.GroupNorm(8, 64), nn.SiLU(),
                         nn.Conv2d(64, 4, 3, padding=1)), torch.randn(1, 4, 64, 64)


def _whisper_like(tv, torch):
    # Whisper's encoder, narrowed: two 1-D convs over 80 mel bins, pre-norm transformer layers
    nn, F = torch.nn, torch.nn.functional

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv1d(80, 256, 3, padding=1), nn.Conv1d(256, 256, 3, 2, 1)
            self.pos = nn.Parameter(torch.randn(1, 250, 256) * 0.02)
            layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True,
                                               norm_first=True, activation="gelu")
            self.enc = nn.TransformerEncoder(layer, 4)

        def forward(self, x):
            return self.enc(F.gelu(self.c2(F.gelu(self.c1(x)))).transpose(1, 2) + self.pos)
    return Encoder(), torch.randn(1, 80, 500)


def _conformer(tv, torch):
    # two Conformer blocks (torchaudio's layout, written out): half-step feed-forwards,
    # self-attention, a GLU and a 31-wide depthwise 1-D conv with batch norm and SiLU
    nn, F = torch.nn, torch.nn.functional
    d = 144

    class ConvModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.bn = nn.LayerNorm(d), nn.BatchNorm1d(d)
            self.pw1, self.pw2 = nn.Conv1d(d, 2 * d, 1), nn.Conv1d(d, d, 1)
            self.dw = nn.Conv1d(d, d, 31, padding=15, groups=d)

        def forward(self, x):
            y = F.glu(self.pw1(self.norm(x).transpose(1, 2)), dim=1)
            return x + self.pw2(F.silu(self.bn(self.dw(y)))).transpose(1, 2)

    def feed_forward():
        return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ff1, self.ff2, self.conv = feed_forward(), feed_forward(), ConvModule()
            self.norm, self.out = nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = nn.MultiheadAttention(d, 4, batch_first=True)

        def forward(self, x):
            x = x + 0.5 * self.ff1(x)
            y = self.norm(x)
            x = self.conv(x + self.att(y, y, y, need_weights=False)[0])
            return self.out(x + 0.5 * self.ff2(x))
    return nn.Sequential(Block(), Block()), torch.randn(1, 100, d)


def _tcn(tv, torch):
    # a temporal conv net: causal 1-D convs of dilation 1 to 512 over 200 steps (WaveNet-style)
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, dilation):
            super().__init__()
            self.d = dilation
            self.c1 = nn.Conv1d(64, 64, 3, dilation=dilation)
            self.c2 = nn.Conv1d(64, 64, 3, dilation=dilation)

        def forward(self, x):
            y = F.relu(self.c1(F.pad(x, (2 * self.d, 0))))
            return F.relu(x + self.c2(F.pad(y, (2 * self.d, 0))))
    return nn.Sequential(nn.Conv1d(16, 64, 1), *[Block(2 ** i) for i in range(10)],
                         nn.Conv1d(64, 8, 1)), torch.randn(1, 16, 200)


def _ssdlite(tv, torch):
    # SSDlite320's MobileNetV3 backbone, extra layers and heads, without the box decoding
    m = tv.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)

    class Heads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = m.backbone, m.head

        def forward(self, x):
            out = self.head(list(self.backbone(x).values()))
            return torch.cat([out["bbox_regression"], out["cls_logits"]], -1)
    return Heads(), torch.randn(1, 3, 320, 320)


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
    "lstm": _tagger("LSTM"),
    "transformer_encoder": _encoder,
    # added in session 24
    "deeplabv3_mobilenet": _segmentation("deeplabv3_mobilenet_v3_large"),
    "lraspp_mobilenet": _segmentation("lraspp_mobilenet_v3_large"),
    "unet": _unet,
    "espcn": _espcn,
    "yolo_like": _yolo_like,
    "gru": _tagger("GRU"),
    "llama_like": _llama,
    "mobilenet_v3_large": _vision("mobilenet_v3_large"),
    "inception_v3": lambda tv, torch: (tv.models.inception_v3(weights=None, aux_logits=False,
                                                              init_weights=False),
                                       torch.randn(1, 3, 299, 299)),
    "alexnet": _vision("alexnet"),
    "efficientnet_v2_s": _vision("efficientnet_v2_s"),
    "hf_gpt2": _hf_gpt2,
    "groupnorm_unet": _groupnorm_unet,
    "whisper_like": _whisper_like,
    "t5_encoder": _t5_encoder,
    "conformer": _conformer,
    "tcn": _tcn,
    "ssdlite": _ssdlite,
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
