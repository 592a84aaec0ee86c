"""Greedy speculative decoding of an MLA-converted model equals its plain greedy decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from kvspec.care.convert import convert_to_mla
from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.ngram.drafters import InfiniGramDrafter, PromptLookupDrafter
from kvspec.ngram.index import build_index, open_engine

VOCAB, EOS, NEW = 128, 127, 20
FULL = 2 * 16  # kv heads x head dim


@pytest.fixture(scope="module", params=["full", "reduced"])
def mla(request) -> torch.nn.Module:
    """A tiny random Llama converted to latent-KV attention (float64: exact argmax ties)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.15,
    )  # fmt: skip
    source = LlamaForCausalLM(config).double().eval()
    ranks = [FULL, FULL] if request.param == "full" else [12, 20]
    return convert_to_mla(source, "svd", ranks, ranks[::-1]).double().eval()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, EOS, rng.integers(2, 12)).tolist() for _ in range(8)]


@pytest.mark.parametrize("drafter_name", ["infini-gram", "prompt-lookup", "self"])
def test_mla_speculation_equals_greedy(mla, prompts, drafter_name, tmp_path):
    expected = [greedy_generate(mla, p, NEW) for p in prompts]
    if drafter_name == "infini-gram":
        docs = [p + e for p, e in zip(prompts[::2], expected[::2], strict=True)]
        build_index(docs, tmp_path / "idx", vocab_size=VOCAB, eos_token_id=EOS)
        drafter = InfiniGramDrafter(open_engine(tmp_path / "idx", VOCAB, EOS))
    elif drafter_name == "prompt-lookup":
        drafter = PromptLookupDrafter()
    else:
        drafter = DraftModelDrafter(mla)
    accepted = 0
    for prompt, want in zip(prompts, expected, strict=True):
        tokens, steps = speculative_generate(mla, prompt, drafter, NEW, k=4)
        assert tokens == want
        accepted += sum(s.accepted for s in steps)
    if drafter_name != "prompt-lookup":
        assert accepted > 0  # drafts were accepted, so multi-token verification ran
