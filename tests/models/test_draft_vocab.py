"""Reduced draft vocabularies: which tokens are kept, the head's full-width answer, saving and
loading through the study's loader, and greedy exactness of the benchmark's draft-model
methods with such a draft."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.models.draft_vocab import (
    CONFIG_KEY,
    attach_reduced_head,
    frequent_tokens,
    reduced_head,
)
from kvspec.models.load import load_model

from ..tiny import tiny_llama

VOCAB = 40


def test_frequent_tokens_keeps_the_most_frequent_and_the_stop_tokens() -> None:
    docs = [[5, 5, 5, 2, 2, 9], [9, 9, 9, 7, 2]]  # counts 9:4, 2:3, 5:3, 7:1
    assert frequent_tokens(docs, 3, 12) == [2, 5, 9]
    assert frequent_tokens(docs, 2, 12) == [2, 9]  # the tie 2/5 at the cut: lower id first
    assert frequent_tokens(docs, 2, 12, always=[11]) == [9, 11]  # a stop token always stays
    assert frequent_tokens(docs, 6, 12) == [0, 1, 2, 5, 7, 9]  # filled with the lowest ids
    with pytest.raises(ValueError, match="does not fit"):
        frequent_tokens(docs, 13, 12)
    with pytest.raises(ValueError, match="stop tokens"):
        frequent_tokens(docs, 1, 12, always=[3, 4])


@pytest.fixture
def draft():
    model = tiny_llama(1, vocab=VOCAB)
    model.generation_config.eos_token_id = 3
    return model


def test_reduced_head_answers_in_full_width_with_zero_mass_outside(draft) -> None:
    keep = [0, 3, 7, 8, 20, 39]
    ids = torch.tensor([[1, 5, 9, 2]])
    with torch.no_grad():
        full = draft(input_ids=ids).logits  # (1, 4, V)
        head = attach_reduced_head(draft, keep)
        got = draft(input_ids=ids).logits  # (1, 4, V)
    assert reduced_head(draft) is head and draft.config.to_dict()[CONFIG_KEY] == len(keep)
    # the kept rows of the old layer; a narrower product may take another matmul kernel (bit
    # for bit on AVX-512, last-bit float64 differences on AVX2)
    torch.testing.assert_close(got[..., keep], full[..., keep], rtol=0, atol=1e-12)
    outside = [t for t in range(VOCAB) if t not in keep]
    assert (got[..., outside] == torch.finfo(got.dtype).min).all()
    assert torch.softmax(got, -1)[..., outside].sum() == 0  # q is exactly 0 outside
    assert set(got.argmax(-1).flatten().tolist()) <= set(keep)
    assert head.to_draft()[keep].tolist() == list(range(len(keep)))
    assert (head.to_draft()[outside] == -1).all()


@pytest.mark.parametrize("tied", [False, True])
def test_a_saved_reduced_draft_loads_with_the_same_logits(tied, tmp_path) -> None:
    """Also from a model whose head was tied to its input embedding (SmolLM2's): the reduced
    head is untied, and the embedding is kept as it was."""
    from kvspec.models.tokenizer import train_tokenizer

    draft = tiny_llama(1, vocab=VOCAB, tie_word_embeddings=tied)
    draft.generation_config.eos_token_id = 3
    embedding = draft.get_input_embeddings().weight.detach().clone()
    attach_reduced_head(draft, [0, 3, 7, 8, 20, 39])
    with torch.no_grad():
        reduced_head(draft).weight.mul_(3.0)  # trained away from the old rows
    draft.save_pretrained(tmp_path)
    train_tokenizer(["abc def " * 10], 300, 64).save_pretrained(tmp_path)
    loaded, _ = load_model(tmp_path, dtype="float64")
    ids = torch.tensor([[4, 11, 2]])
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, draft(input_ids=ids).logits)
    assert reduced_head(loaded).ids.tolist() == [0, 3, 7, 8, 20, 39]
    assert torch.equal(loaded.get_input_embeddings().weight, embedding)
    assert loaded.generation_config.eos_token_id == 3


def test_draft_model_methods_stay_exact_with_a_reduced_draft(draft) -> None:
    """Greedy draft-model SD (chain and EAGLE-2 tree) through the benchmark's methods: the
    target's greedy tokens on every prompt, although the draft never proposes most tokens."""
    from kvspec.ngram.methods import DecodeSettings, Setup, build_method

    target = tiny_llama(0, vocab=VOCAB)
    attach_reduced_head(draft, list(range(0, VOCAB, 3)))
    setup = Setup(target, [], 16, DecodeSettings.defaults(k=4, draft_k=3), draft=draft.eval())
    for name in ("sd_draft", "sd_draft_tree"):
        method = build_method(name, setup)
        for prompt in ([1, 2, 3], [9, 30, 4, 4], [38]):
            run = method(prompt)
            assert run.tokens == greedy_generate(target, prompt, 16), name
            assert run.drafted > 0


def test_a_ranking_cut_at_n_is_the_n_most_frequent_tokens() -> None:
    from kvspec.models.draft_vocab import frequency_order, top_tokens

    docs = [[5, 5, 5, 2, 2, 9], [9, 9, 9, 7, 2]]
    order = frequency_order(docs, 12)
    assert order[:4] == [9, 2, 5, 7] and sorted(order) == list(range(12))
    for size in range(1, 13):
        assert top_tokens(order, size, 12) == frequent_tokens(docs, size, 12)
        assert top_tokens(order, max(size, 1), 12, [11]) == frequent_tokens(docs, size, 12, [11])


def test_readout_logits_cover_the_readout_only() -> None:
    from kvspec.models.draft_vocab import readout_logits

    model = tiny_llama(1, vocab=VOCAB).eval()
    hidden = torch.randn(3, model.config.hidden_size, dtype=model.lm_head.weight.dtype)
    with torch.no_grad():
        full = readout_logits(model, hidden)
        assert full.shape == (3, VOCAB)
        torch.testing.assert_close(full, model.lm_head(hidden))
        ids = list(range(0, VOCAB, 3))
        attach_reduced_head(model, ids)
        torch.testing.assert_close(readout_logits(model, hidden), full[:, ids])
