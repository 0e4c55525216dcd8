"""Greedy generation from an exported language model (examples/export_gpt.py):

    python examples/generate.py gpt.so 5 17 33 [--steps 32]
    python examples/generate.py          # exports a small random model first (export_gpt.py)

Loads the one artifact, creates its KV cache, prefills the prompt's token ids (``tokens[1, n]``),
then decodes ``--steps`` tokens greedily (one ``token[1, 1]`` per step) and prints them, space
separated. The cache is updated in place by every call and holds its own length, so a step
passes only the new token.
"""
import argparse

import numpy as np

import kiln


class CacheFull(RuntimeError):
    """The prompt and the steps need more positions than the KV cache has."""


def generate(vm, prompt, steps: int):
    """The ``steps`` greedy tokens after ``prompt`` (a list of token ids)."""
    kv = vm["create_cache"]()  # zeros, [layers, 2, heads, max_len + 1, head_dim]; length 0
    max_len = kv.shape[3] - 1  # (the last position holds the cache's length)
    # (a prompt longer than the cache: the runtime refuses prefill, naming the limit)
    logits, kv = vm["prefill"](np.array([prompt], np.int64), kv)  # logits of the last prompt token
    token = np.zeros((1, 1), np.int64)
    out = []
    for t in range(len(prompt), len(prompt) + steps):
        nxt = int(np.argmax(logits.numpy()[0]))
        out.append(nxt)
        if len(out) == steps:
            break
        if t == max_len:  # decode would return NaN logits
            raise CacheFull(f"the KV cache is full ({max_len} positions); generated so far: "
                            f"{' '.join(map(str, out))}")
        token[0, 0] = nxt
        logits, kv = vm["decode"](token, kv)  # one step at position t: O(t)
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
    except (kiln.runtime.KilnError, CacheFull) as e:
        raise SystemExit(f"generate: {e}")


if __name__ == "__main__":
    main()
