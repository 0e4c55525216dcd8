"""kiln.nn.GPT: a GPT-2-layout model loaded from a PyTorch state dict, exported as
``create_cache`` / ``prefill`` / ``decode`` over a KV cache updated in place; greedy decoding
equals PyTorch's token for token, one artifact serves prompts of 1 to 64 tokens, and the
runtime guards the cache (written argument declared, aliasing and out-of-range lengths refused)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.executable.format import Op
from kiln.runtime import KilnError

torch = pytest.importorskip("torch")
from gpt2_reference import GPT2  # noqa: E402

STEPS = 32


@pytest.fixture(scope="module")
def ref():
    return GPT2(seed=0)


def kiln_gpt(ref):
    c = ref.config
    model = nn.GPT(vocab_size=c["vocab"], n_positions=c["ctx"], n_embd=c["d"], n_layer=c["layers"],
                   n_head=c["heads"])
    model.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    return model


@pytest.fixture(scope="module")
def compiled(ref):
    model = kiln_gpt(ref)
    mod, _ = model.export_lm()
    for f in ("prefill", "decode", "create_cache"):
        mod = kiln.transform.bind_params(f, model.state_dict())(mod)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    return ex, kiln.VirtualMachine(ex, kiln.cpu())


def generate(vm, prompt, steps=STEPS, max_len=128):
    """Greedy decoding with the exported functions: one token buffer, views of it per step."""
    kv = vm["create_cache"]()
    toks = np.zeros((1, max_len), np.int64)
    toks[0, :len(prompt)] = prompt
    t = len(prompt)
    logits, kv = vm["prefill"](toks[:, :t], kv)
    out = []
    for step in range(steps):
        nxt = int(np.argmax(logits.numpy()[0]))
        out.append(nxt)
        if step + 1 == steps:
            break
        toks[0, t] = nxt
        t += 1
        logits, kv = vm["decode"](toks[:, :t], kv)
    return out


def test_state_dict_names_are_gpt2s(ref):
    model = kiln_gpt(ref)
    names = [n for n, _ in model.named_parameters()]
    assert names[:4] == ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                         "transformer.h.0.ln_1.bias"]
    assert "transformer.h.1.attn.c_attn.weight" in names and "lm_head.weight" not in names  # tied


def test_signatures_declare_the_cache_written(compiled):
    ex, _ = compiled
    for name in ("prefill", "decode"):
        f = ex.spec.function(name)
        assert [(p.name, p.written) for p in f.params] == [("tokens", False), ("kv_cache", True)]
        # intermediates planned at max_len: the only heap allocation is the returned logits
        allocs = [ins for ins in f.code if ins.opcode == Op.ALLOC_OUTPUT]
        assert len(allocs) == 1 and f.arena_size > 0, name


def test_prefill_and_decode_logits_match_pytorch(compiled, ref):
    _, vm = compiled
    prompt = [5, 17, 33, 2, 90, 11, 3]
    kv = vm["create_cache"]()
    with torch.no_grad():
        want, *past = ref(torch.tensor([prompt]), *ref.empty_past())
    got, kv2 = vm["prefill"](np.array([prompt], np.int64), kv)
    np.testing.assert_allclose(got.numpy()[0], want[0, -1].numpy(), rtol=1e-4, atol=1e-4)
    # the cache came back as the very same memory, now holding the prompt's keys and values
    assert np.shares_memory(np.from_dlpack(kv), np.from_dlpack(kv2))
    k0 = np.from_dlpack(kv2)[0, 0, :, :len(prompt)]
    np.testing.assert_allclose(k0, past[0][0].numpy(), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        want, *_ = ref(torch.tensor([[7]]), *past)
    got, _ = vm["decode"](np.array([prompt + [7]], np.int64), kv2)
    np.testing.assert_allclose(got.numpy()[0], want[0, -1].numpy(), rtol=1e-4, atol=1e-4)


def _check_prompt_lengths(vm, ref, lengths):
    rng = np.random.default_rng(3)
    for n in lengths:
        prompt = [int(x) for x in rng.integers(0, ref.config["vocab"], n)]
        assert generate(vm, prompt) == ref.generate(prompt, STEPS), n


def test_greedy_generation_equals_pytorch(compiled, ref):
    _check_prompt_lengths(compiled[1], ref, (1, 2, 17, 64))


@pytest.mark.slow  # 64 prompts x 32 steps, mostly the PyTorch reference: about a minute
def test_greedy_generation_equals_pytorch_for_prompts_of_1_to_64_tokens(compiled, ref):
    _check_prompt_lengths(compiled[1], ref, range(1, 65))


def test_the_runtime_guards_the_cache(compiled):
    _, vm = compiled
    kv = vm["create_cache"]()
    with pytest.raises(KilnError, match="'n' = 129 exceeds its bound 128"):
        vm["prefill"](np.zeros((1, 129), np.int64), kv)
    with pytest.raises(KilnError, match="'n' = 0 is below its minimum 1"):
        vm["prefill"](np.zeros((1, 0), np.int64), kv)
    with pytest.raises(KilnError, match="argument 1 'kv_cache' expected shape"):
        vm["decode"](np.zeros((1, 3), np.int64), np.zeros((2, 2, 4, 64, 8), np.float32))
    # tokens that are a view of the cache's own memory: refused, not silently overwritten
    raw = np.zeros(2 * 2 * 4 * 128 * 8, np.float32)
    alias_tokens = raw.view(np.int64)[:3].reshape(1, 3)
    with pytest.raises(KilnError, match="'kv_cache' is updated in place and shares memory with argument 0"):
        vm["decode"](alias_tokens, raw.reshape(2, 2, 4, 128, 8))
