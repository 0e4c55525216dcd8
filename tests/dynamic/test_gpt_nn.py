"""kiln.nn.GPT: a GPT-2-layout model loaded from a PyTorch state dict, exported as
``create_cache`` / ``prefill`` / ``decode`` over a KV cache updated in place; greedy decoding
equals PyTorch's token for token, one artifact serves prompts of 1 to 64 tokens, and the
runtime guards the cache (written argument declared, aliasing and out-of-range lengths refused).
``decode`` takes one token: the cache holds its own length (``kiln.nn.kv_cache``)."""
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


MAX_LEN = 128


def length(kv) -> float:
    """The cache's length: the one number its bookkeeping row holds."""
    return float(np.from_dlpack(kv)[0, 0, 0, MAX_LEN, 0])


def generate(vm, prompt, steps=STEPS, kv=None):
    """Greedy decoding with the exported functions: prefill, then one token per decode."""
    kv = vm["create_cache"]() if kv is None else kv
    logits, kv = vm["prefill"](np.array([prompt], np.int64), kv)
    token = np.zeros((1, 1), np.int64)
    out = []
    for step in range(steps):
        nxt = int(np.argmax(logits.numpy()[0]))
        out.append(nxt)
        if step + 1 == steps:
            break
        token[0, 0] = nxt
        logits, kv = vm["decode"](token, kv)
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
        first = "tokens" if name == "prefill" else "token"
        assert [(p.name, p.written) for p in f.params] == [(first, False), ("kv_cache", True)]
        # intermediates planned at max_len: the only heap allocation is the returned logits
        allocs = [ins for ins in f.code if ins.opcode == Op.ALLOC_OUTPUT]
        assert len(allocs) == 1 and f.arena_size > 0, name
    # decode's shapes are all static: the token is [1, 1], the position comes from the cache
    assert [tuple(p.shape) for p in ex.spec.function("decode").params][0] == (1, 1)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run the test at 1 and at 2 threads (decode's attention splits its heads, prefill's
    matmuls their columns; small loops over the prompt stay on the calling thread)."""
    kiln.set_num_threads(request.param)
    yield request.param
    kiln.set_num_threads(0)


def test_prefill_and_decode_logits_match_pytorch(compiled, ref, threads):
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
    assert length(kv2) == len(prompt)
    for token in (7, 40):
        with torch.no_grad():
            want, *past = ref(torch.tensor([[token]]), *past)
        got, kv3 = vm["decode"](np.array([[token]], np.int64), kv2)
        assert np.shares_memory(np.from_dlpack(kv3), np.from_dlpack(kv))
        np.testing.assert_allclose(got.numpy()[0], want[0, -1].numpy(), rtol=1e-4, atol=1e-4)
    assert length(kv2) == len(prompt) + 2
    v1 = np.from_dlpack(kv2)[1, 1, :, :len(prompt) + 2]
    np.testing.assert_allclose(v1, past[3][0].numpy(), rtol=1e-4, atol=1e-5)


def _check_prompt_lengths(vm, ref, lengths):
    rng = np.random.default_rng(3)
    for n in lengths:
        prompt = [int(x) for x in rng.integers(0, ref.config["vocab"], n)]
        assert generate(vm, prompt) == ref.generate(prompt, STEPS), n


def test_greedy_generation_equals_pytorch(compiled, ref, threads):
    _check_prompt_lengths(compiled[1], ref, (1, 2, 17, 64))


def test_prefill_starts_a_new_sequence_in_a_used_cache(compiled, ref):
    _, vm = compiled
    kv = vm["create_cache"]()
    generate(vm, [9] * 40, 20, kv)  # 59 positions filled
    assert length(kv) == 59
    assert generate(vm, [5, 17, 33], STEPS, kv) == ref.generate([5, 17, 33], STEPS)


def test_a_full_or_corrupted_cache_gives_nan_and_is_left_alone(compiled):
    _, vm = compiled
    kv = vm["create_cache"]()
    vm["prefill"](np.ones((1, MAX_LEN), np.int64), kv)
    assert length(kv) == MAX_LEN
    before = np.from_dlpack(kv).copy()
    logits, _ = vm["decode"](np.ones((1, 1), np.int64), kv)
    assert np.isnan(logits.numpy()).all()
    np.testing.assert_array_equal(np.from_dlpack(kv), before)
    for bad in (-1.0, np.nan, 1e30):
        np.from_dlpack(kv)[0, 0, 0, MAX_LEN, 0] = bad
        logits, _ = vm["decode"](np.ones((1, 1), np.int64), kv)
        assert np.isnan(logits.numpy()).all(), bad
        np.testing.assert_array_equal(np.from_dlpack(kv)[:, :, :, :MAX_LEN], before[:, :, :, :MAX_LEN])


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
        vm["decode"](np.zeros((1, 1), np.int64), np.zeros((2, 2, 4, 64, 8), np.float32))
    with pytest.raises(KilnError, match="argument 0 'token' expected shape"):
        vm["decode"](np.zeros((1, 3), np.int64), kv)
    # a token that is a view of the cache's own memory: refused, not silently overwritten
    raw = np.zeros(2 * 2 * 4 * 129 * 8, np.float32)
    alias_token = raw.view(np.int64)[:1].reshape(1, 1)
    with pytest.raises(KilnError, match="'kv_cache' is updated in place and shares memory with argument 0"):
        vm["decode"](alias_token, raw.reshape(2, 2, 4, 129, 8))


def test_prefill_copies_no_heads(ref):
    """Prefill's attention reads q, k and v where the QKV projection wrote them, and the cache
    write takes k and v from there too: no split or head-copy kernel runs (each was a pass over
    the prompt's keys and values per layer)."""
    from kiln.ir.graph import Function
    from kiln.transform.graph_util import global_refs
    model = kiln_gpt(ref)
    mod, _ = model.export_lm()
    mod = kiln.get_pipeline("default")(kiln.transform.bind_params("prefill", model.state_dict())(mod))
    called = [n for n in global_refs(mod["prefill"]) if not isinstance(mod[n], Function)]
    assert not [n for n in called if "split" in n or "permute" in n], called
    assert [n for n in called if n.startswith("attention")], called
