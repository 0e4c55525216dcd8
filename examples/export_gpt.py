"""Export a GPT-2-layout language model to one artifact with ``create_cache``, ``prefill`` and
``decode`` (``kiln.nn.GPT``), for the generation examples (generate.py, c/generate.c,
cpp/generate.cpp, java/Generate.java).

    python examples/export_gpt.py WEIGHTS.npz -o gpt.so [--layers 2 --heads 4 --max-len 128]
    python examples/export_gpt.py                    # a small model with random weights

``WEIGHTS.npz`` holds a GPT-2-shaped PyTorch state dict as numpy arrays (``np.savez(path,
**{k: v.numpy() for k, v in model.state_dict().items()})``); the sizes (vocabulary, width,
positions) are read from it, the layer and head counts are given. The weights are bound into
the artifact.
"""
import argparse
import time

import numpy as np

import kiln
from kiln import nn


def export(weights: dict, layers: int, heads: int, max_len=None, target: str = "llvm"):
    """The compiled Executable of a GPT with these weights (the caller exports it)."""
    vocab, width = weights["transformer.wte.weight"].shape
    positions = weights["transformer.wpe.weight"].shape[0]
    model = nn.GPT(vocab_size=vocab, n_positions=positions, n_embd=width, n_layer=layers, n_head=heads,
                   max_len=max_len)
    model.load_state_dict(weights)
    mod, _ = model.export_lm()
    for name in ("create_cache", "prefill", "decode"):
        mod = kiln.transform.bind_params(name, model.state_dict())(mod)
    return kiln.compile(kiln.get_pipeline("default", target=target)(mod), target)


def small_random_weights(layers: int = 2, seed: int = 0) -> dict:
    """GPT-2-shaped weights of a small model (vocabulary 96, width 32, 128 positions)."""
    model = nn.GPT(vocab_size=96, n_positions=128, n_embd=32, n_layer=layers, n_head=4)
    return dict(model.init_params(seed=seed))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("weights", nargs="?", help="a GPT-2-shaped state dict as .npz (default: a small "
                   "model, 2 layers of width 32, with random weights)")
    p.add_argument("-o", "--output", default="gpt.so")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-len", type=int, default=None, help="KV cache length (default: all positions)")
    args = p.parse_args()
    if args.weights:
        with np.load(args.weights) as f:
            weights = {k: f[k] for k in f.files}
    else:
        weights = small_random_weights(args.layers)
    start = time.time()
    ex = export(weights, args.layers, args.heads, args.max_len)
    ex.export_library(args.output)
    print(f"wrote {args.output} ({time.time() - start:.1f} s): functions "
          f"{', '.join(f.name for f in ex.spec.functions)}")


if __name__ == "__main__":
    main()
