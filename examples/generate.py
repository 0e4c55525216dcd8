"""Greedy generation from an exported language model (examples/export_gpt.py):

    python examples/generate.py gpt.so 5 17 33 [--steps 32]
    python examples/generate.py          # exports a small random model first (export_gpt.py)

Loads the one artifact, creates its KV cache, prefills the prompt's token ids, then decodes
``--steps`` tokens greedily and prints them, space separated. The cache is updated in place by
every call; the tokens so far live in one buffer, passed as views (no copies).
"""
import argparse

import numpy as np

import kiln


def generate(vm, prompt, steps: int):
    """The ``steps`` greedy tokens after ``prompt`` (a list of token ids)."""
    kv = vm["create_cache"]()                      # zeros, [layers, 2, heads, max_len, head_dim]
    # (more tokens than the cache's positions: the runtime refuses the call, naming the limit)
    tokens = np.zeros((1, len(prompt) + steps), np.int64)
    tokens[0, :len(prompt)] = prompt
    t = len(prompt)
    logits, kv = vm["prefill"](tokens[:, :t], kv)  # logits of the last prompt token
    out = []
    for _ in range(steps):
        nxt = int(np.argmax(logits.numpy()[0]))
        out.append(nxt)
        if len(out) == steps:
            break
        tokens[0, t] = nxt
        t += 1
        logits, kv = vm["decode"](tokens[:, :t], kv)  # one step: O(t)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", help="the artifact from export_gpt.py (default: export a small "
                   "random model to gpt.so first)")
    p.add_argument("prompt", type=int, nargs="*", default=[5, 17, 33], help="the prompt's token ids")
    p.add_argument("--steps", type=int, default=32)
    args = p.parse_args()
    if args.model is None:
        import os
        import sys
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from export_gpt import export, small_random_weights
        export(small_random_weights(), layers=2, heads=4).export_library("gpt.so")
        args.model = "gpt.so"
    try:
        vm = kiln.VirtualMachine(args.model, kiln.cpu())
        print(" ".join(str(t) for t in generate(vm, args.prompt, args.steps)))
    except kiln.runtime.KilnError as e:
        raise SystemExit(f"generate: {e}")


if __name__ == "__main__":
    main()
