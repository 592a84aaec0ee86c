"""Model construction for both architectures from a config block."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM, Qwen3ForCausalLM

from kvspec.models.build import build_model, count_parameters
from kvspec.models.tokenizer import train_tokenizer

ARCH = {
    "hidden": 64,
    "intermediate": 128,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "max_position": 128,
}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["hello world, some text to learn from"] * 5, 300, 128)


@pytest.mark.parametrize(
    ("family", "cls"), [("llama", LlamaForCausalLM), ("qwen3", Qwen3ForCausalLM)]
)
def test_builds_gqa_model(tokenizer, family: str, cls: type) -> None:
    model = build_model({**ARCH, "family": family}, tokenizer, seed=0)
    assert isinstance(model, cls)
    cfg = model.config
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (4, 2, 16)
    assert cfg.vocab_size == len(tokenizer)
    attn = model.model.layers[0].self_attn
    assert attn.k_proj.weight.shape == (2 * 16, 64)  # GQA: fewer KV heads than query heads
    assert hasattr(attn, "q_norm") == (family == "qwen3")
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, len(tokenizer)) and torch.isfinite(logits).all()


def test_seeded_initialisation(tokenizer) -> None:
    a = build_model({**ARCH, "family": "llama"}, tokenizer, seed=1)
    b = build_model({**ARCH, "family": "llama"}, tokenizer, seed=1)
    c = build_model({**ARCH, "family": "llama"}, tokenizer, seed=2)
    wa, wb, wc = (m.model.layers[0].self_attn.q_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert count_parameters(a) == sum(p.numel() for p in a.parameters())


def test_generation_stops_at_end_of_turn(tokenizer) -> None:
    model = build_model({**ARCH, "family": "llama"}, tokenizer, seed=0)
    end_id = tokenizer.convert_tokens_to_ids("<|end|>")
    assert end_id in model.generation_config.eos_token_id


def test_bad_architecture(tokenizer) -> None:
    with pytest.raises(ValueError, match="unknown architecture 'gpt2'"):
        build_model({**ARCH, "family": "gpt2"}, tokenizer, seed=0)
    with pytest.raises(ValueError, match="not a multiple"):
        build_model({**ARCH, "family": "llama", "kv_heads": 3}, tokenizer, seed=0)
