"""Hugging Face transformers models built from small configs (random weights, nothing
downloaded): BERT, GPT-2, a T5 encoder and a Whisper encoder, exported with torch.export,
imported, compiled with the "default" pipeline and compared with torch eager at rtol = 1e-4,
atol = 1e-4 times the output's largest magnitude (fp32); BERT also with a dynamic batch at two
sizes and with a dynamic batch and sequence, GPT-2 with a dynamic batch and with a dynamic sequence. Each compiles a whole model: marked slow."""
from __future__ import annotations

import numpy as np
import pytest

from torch_helpers import compile_program, outputs, perturb, prepare_torchvision, torch

pytestmark = pytest.mark.slow

prepare_torchvision()      # transformers imports torchvision when it is installed
T = pytest.importorskip("transformers", reason="transformers is not installed (the test extra)")


def reference(model, inputs):
    with torch.no_grad():
        out = model(**inputs)
    return [t.numpy() for t in out.to_tuple() if isinstance(t, torch.Tensor)]


def compare(model, inputs, dynamic_shapes=None, more=()):
    model = perturb(model.eval())
    ep = torch.export.export(model, (), kwargs=inputs, dynamic_shapes=dynamic_shapes)
    vm, mod, _ = compile_program(ep)
    assert [p.name for p in mod["main"].params] == list(inputs)      # user inputs keep their names
    for case in (inputs,) + tuple(more):
        got, want = outputs(vm, *case.values()), reference(model, case)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
    return mod


def ids(*shape, seed=0):
    return torch.randint(0, 100, shape, generator=torch.Generator().manual_seed(seed))


def bert():
    cfg = T.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=32)
    return T.BertModel(cfg)


def test_bert():
    compare(bert(), {"input_ids": ids(2, 8), "attention_mask": torch.ones(2, 8, dtype=torch.int64)})


def test_bert_dynamic_batch():
    batch = torch.export.Dim("batch", min=1, max=8)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0                                            # padding in the second row
    more = [{"input_ids": ids(n, 8, seed=n), "attention_mask": torch.ones(n, 8, dtype=torch.int64)} for n in (1, 5)]
    mod = compare(bert(), {"input_ids": ids(2, 8), "attention_mask": mask},
                  dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}}, more=more)
    assert str(mod["main"].params[0].ty.shape[0]) == "batch"


def test_bert_dynamic_batch_and_sequence():
    batch = torch.export.Dim("batch", min=1, max=8)
    seq = torch.export.Dim("seq", min=2, max=32)
    dyn = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    more = [{"input_ids": ids(n, s, seed=n), "attention_mask": torch.ones(n, s, dtype=torch.int64)}
            for n, s in ((1, 5), (3, 17))]
    mod = compare(bert(), {"input_ids": ids(2, 8), "attention_mask": torch.ones(2, 8, dtype=torch.int64)},
                  dynamic_shapes=dyn, more=more)
    assert [str(d) for d in mod["main"].params[0].ty.shape] == ["batch", "seq"]


def gpt2():
    cfg = T.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=32, use_cache=False,
                       bos_token_id=0, eos_token_id=0)
    return T.GPT2LMHeadModel(cfg)


def test_gpt2():
    compare(gpt2(), {"input_ids": ids(2, 8)})


def test_gpt2_dynamic_batch():
    # GPT-2's Conv1D multiplies x.view(-1, d): rows batch * 8, imported as a product of x itself
    batch = torch.export.Dim("batch", min=1, max=8)
    compare(gpt2(), {"input_ids": ids(2, 8)}, dynamic_shapes={"input_ids": {0: batch}},
            more=[{"input_ids": ids(n, 8, seed=n)} for n in (1, 5)])


def test_gpt2_dynamic_sequence():
    # position ids arange(seq) and the causal mask's diff with a prepend (a kernel reading
    # (1, seq) and writing (1, seq + 1)) at two lengths
    seq = torch.export.Dim("seq", min=2, max=32)
    mod = compare(gpt2(), {"input_ids": ids(1, 8)}, dynamic_shapes={"input_ids": {1: seq}},
                  more=[{"input_ids": ids(1, n, seed=n)} for n in (3, 17)])
    assert [str(d) for d in mod["main"].params[0].ty.shape] == ["1", "seq"]


def test_t5_encoder():
    cfg = T.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, use_cache=False)
    compare(T.T5EncoderModel(cfg), {"input_ids": ids(2, 8)})


def test_whisper_encoder():
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    cfg = T.WhisperConfig(vocab_size=100, d_model=32, encoder_layers=2, encoder_attention_heads=2,
                          decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                          num_mel_bins=16, max_source_positions=16, pad_token_id=0, bos_token_id=0,
                          eos_token_id=0, decoder_start_token_id=0)
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))
    compare(WhisperEncoder(cfg), {"input_features": x})
