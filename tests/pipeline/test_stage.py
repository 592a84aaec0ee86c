"""Pipeline stages: the layer split, and stages chained in one process equal the whole model."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from kvspec.decoding.tree import causal_mask
from kvspec.pipeline.stage import Stage, split_layers


def tiny_llama(seed: int = 0, layers: int = 5, vocab: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    return LlamaForCausalLM(config).double().eval()


def test_split_layers() -> None:
    assert split_layers(5, 2) == [range(0, 3), range(3, 5)]
    assert split_layers(30, 4) == [range(0, 8), range(8, 16), range(16, 23), range(23, 30)]
    assert split_layers(3, 3) == [range(0, 1), range(1, 2), range(2, 3)]
    with pytest.raises(ValueError, match="cannot split 2 layers over 3"):
        split_layers(2, 3)


def test_causal_mask() -> None:
    mask = causal_mask(2, 3, torch.float32)[0, 0] == 0  # visible
    assert mask.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]


@pytest.mark.parametrize("n_stages", [1, 2, 3])
def test_chained_stages_equal_the_model(n_stages) -> None:
    """Prefill, one-token steps and a crop through the stages give the model's own logits."""
    ids = [5, 9, 2, 33, 7, 7, 41, 3]
    reference = tiny_llama()
    stages = [
        Stage(tiny_llama(), layers, head=s == 0)
        for s, layers in enumerate(split_layers(5, n_stages))
    ]

    def run(tokens: list[int]) -> torch.Tensor:
        hidden = stages[0].embed_tokens(tokens)
        for stage in stages:
            hidden = stage(hidden)
        return stages[0].logits(hidden)

    full = reference(input_ids=torch.tensor([ids])).logits[0]
    torch.testing.assert_close(run(ids[:5]), full[:5], rtol=0, atol=1e-10)
    for i in (5, 6):
        torch.testing.assert_close(run([ids[i]])[0], full[i], rtol=0, atol=1e-10)
    for stage in stages:  # drop the last two positions, then feed a different token there
        stage.crop(5)
    other = reference(input_ids=torch.tensor([ids[:5] + [12]])).logits[0, -1]
    torch.testing.assert_close(run([12])[0], other, rtol=0, atol=1e-10)


def test_a_stage_keeps_only_its_layers() -> None:
    stage = Stage(tiny_llama(), range(3, 5), head=False)
    assert len(stage.layers) == 2 and stage.embed is None and stage.lm_head is None
    assert [layer.self_attn.layer_idx for layer in stage.layers] == [0, 1]


def test_unsupported_architecture_is_refused() -> None:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                              head_dim=16)  # fmt: skip
    with pytest.raises(ValueError, match="pipeline stages support"):
        Stage(Gemma3ForCausalLM(config), range(0, 1), head=True)
