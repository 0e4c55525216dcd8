"""Language-model latency: Kiln's nn.GPT (prefill / decode over an in-place KV cache) against
onnxruntime running the same weights exported from PyTorch with past key/values, and against
PyTorch eager, all in one process on one thread (or ``--threads N``, each of the three).

    .venv/bin/python bench/llm.py [--rounds 7] [--calls 10] [--layers 4 --width 256] [--threads 2]

Measures prefill of 16, 60 and 128 tokens (``--prompts``; 60 is no multiple of the kernels'
tiles) and one decode step (one token; the cache holds its
length, which is set back before each timed call) at contexts 16, 128 and 512. Each
measurement alternates the three implementations round by round (``onnx_models.alternate``:
a pause and warm-up calls before ``--calls`` timed calls a round) and reports the median. The outputs are checked first: the
three agree on the logits (1e-3). Prints a Markdown table and the machine (lscpu, load).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "dynamic"))  # the PyTorch GPT-2-layout reference


def _cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "?")
    flags = next((ln for ln in out.splitlines() if ln.startswith("Flags")), "")
    isa = "avx512f" if "avx512f" in flags else ("avx2" if "avx2" in flags else "")
    return f"{name} ({os.cpu_count()} CPUs{', ' + isa if isa else ''})"


def build(args):
    import torch
    import onnxruntime as ort
    import kiln
    from kiln import nn
    from gpt2_reference import GPT2, export_decode_step

    torch.set_num_threads(args.threads)
    kiln.set_num_threads(args.threads)
    ref = GPT2(vocab=args.vocab, d=args.width, heads=args.heads, layers=args.layers, ctx=args.ctx).eval()
    model = nn.GPT(vocab_size=args.vocab, n_positions=args.ctx, n_embd=args.width, n_layer=args.layers,
                   n_head=args.heads)
    model.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    mod, _ = model.export_lm()
    for f in ("create_cache", "prefill", "decode"):
        mod = kiln.transform.bind_params(f, model.state_dict())(mod)
    t0 = time.time()
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    compile_s = time.time() - t0
    path = os.path.join(tempfile.mkdtemp(), "decode.onnx")
    export_decode_step(ref, path)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return ref, vm, sess, compile_s


def cases(ref, vm, sess, args):
    """name -> {impl: zero-argument callable doing one call}, after checking the outputs agree."""
    import torch
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, (1, args.ctx)).astype(np.int64)
    layers, heads, hd = args.layers, args.heads, args.width // args.heads
    out = {}

    def ort_feeds(ids, past):
        feeds = {"input_ids": ids}
        for i in range(layers):
            feeds[f"past_key_{i}"], feeds[f"past_value_{i}"] = past[2 * i], past[2 * i + 1]
        return feeds

    for n in args.prompts:
        kv = vm["create_cache"]()
        ids = tokens[:, :n]
        empty = [np.zeros((1, heads, 0, hd), np.float32) for _ in range(2 * layers)]
        tpast = [torch.from_numpy(p) for p in empty]
        want = sess.run(None, ort_feeds(ids, empty))[0][0, -1]
        with torch.no_grad():
            got_t = ref(torch.from_numpy(ids), *tpast)[0][0, -1].numpy()
        got_k = vm["prefill"](ids, kv)[0].numpy()[0]
        np.testing.assert_allclose(got_k, want, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(got_t, want, rtol=1e-3, atol=1e-3)

        def tor(ids=ids, tpast=tpast):
            with torch.no_grad():
                ref(torch.from_numpy(ids), *tpast)
        out[f"prefill {n} tokens"] = {"kiln": lambda ids=ids, kv=kv: vm["prefill"](ids, kv),
                                      "onnxruntime": lambda ids=ids, e=empty: sess.run(None, ort_feeds(ids, e)),
                                      "torch": tor}
    for c in (16, 128, 512):
        kv = vm["create_cache"]()
        vm["prefill"](tokens[:, :c], kv)
        with torch.no_grad():
            _, *past = ref(torch.from_numpy(tokens[:, :c]), *[torch.zeros(1, heads, 0, hd)] * (2 * layers))
        npast = [p.numpy() for p in past]
        last = tokens[:, c:c + 1]
        want = sess.run(None, ort_feeds(last, npast))[0][0, -1]
        got_k = vm["decode"](last, kv)[0].numpy()[0]
        np.testing.assert_allclose(got_k, want, rtol=1e-3, atol=1e-3)
        # each decode adds one to the cache's length: set it back to c before every timed call
        length = np.from_dlpack(kv)[0, 0, 0, args.ctx:args.ctx + 1, 0]

        def tor(last=last, past=past):
            with torch.no_grad():
                ref(torch.from_numpy(last), *past)
        out[f"decode at context {c}"] = {
            "kiln": lambda c=c, kv=kv, last=last, length=length: (length.fill(c), vm["decode"](last, kv)),
            "onnxruntime": lambda last=last, p=npast: sess.run(None, ort_feeds(last, p)),
            "torch": tor}
    return out


def measure(fns, rounds: int, calls: int):
    """Median ms per call of each of ``fns``, from ``onnx_models.alternate``: alternating
    rounds, each after a pause and warm-up calls, so that no system is timed while another's
    threads still spin (PyTorch's OpenMP workers spin on both cores after its calls at 2
    threads) or right after its weights left the cache."""
    from onnx_models import alternate
    return {k: v * 1e3 for k, v in alternate(fns, rounds=rounds, per_round=calls).items()}


def _lengths(text: str) -> list:
    """``--prompts``: comma-separated ints."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token counts such as "
                                         f"16,60,128, got {text!r}") from None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--ctx", type=int, default=640)
    p.add_argument("--threads", type=int, default=1, help="threads of each of the three")
    p.add_argument("--prompts", type=_lengths, default=[16, 60, 128],
                   help="prompt lengths to prefill, comma-separated (default 16,60,128)")
    args = p.parse_args()
    if not args.prompts or min(args.prompts) < 1 or max(args.prompts) > args.ctx:
        p.error(f"--prompts must be lengths from 1 to --ctx {args.ctx}, got {args.prompts}")
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    ref, vm, sess, compile_s = build(args)
    rows = cases(ref, vm, sess, args)
    print(f"GPT-2 layout, {args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocab}, "
          f"KV cache {args.ctx}; {args.threads} thread(s); Kiln compile {compile_s:.1f} s")
    print(f"CPU: {_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    print("| case | Kiln ms | onnxruntime ms | PyTorch ms | Kiln / ort | Kiln / torch |")
    print("|---|---|---|---|---|---|")
    for name, fns in rows.items():
        m = measure(fns, args.rounds, args.calls)
        print(f"| {name} | {m['kiln']:.3f} | {m['onnxruntime']:.3f} | {m['torch']:.3f} | "
              f"{m['kiln'] / m['onnxruntime']:.2f} | {m['kiln'] / m['torch']:.2f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
