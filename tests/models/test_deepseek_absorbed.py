"""Absorbed DeepSeek-V3 decoding gives transformers' logits (prefill, one-token steps and
multi-token verification steps over a cache, and steps longer than `MAX_QUERY`, which attend
over expanded keys with padded values), in float64."""

import pytest
import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, DynamicCache

from kvspec.models.deepseek_absorbed import MAX_QUERY, absorb


def _tiny(seed: int, interleave: bool, attention: str = "sdpa") -> DeepseekV3ForCausalLM:
    torch.manual_seed(seed)
    cfg = DeepseekV3Config(
        vocab_size=64, hidden_size=48, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, first_k_dense_replace=2, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=12, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=6, max_position_embeddings=128,
        rope_interleave=interleave, attn_implementation=attention,
    )  # fmt: skip
    return DeepseekV3ForCausalLM(cfg).double().eval()


@torch.inference_mode()
def _steps(model, ids: torch.Tensor, feeds: list[int]) -> list[torch.Tensor]:
    """Logits of a prefill of ids[:, :p] then of each feed of the next tokens."""
    cache, out, at = DynamicCache(), [], feeds[0]
    out.append(model(input_ids=ids[:, :at], past_key_values=cache, use_cache=True).logits)
    for n in feeds[1:]:
        out.append(
            model(input_ids=ids[:, at : at + n], past_key_values=cache, use_cache=True).logits
        )
        at += n
    return out


LONG = MAX_QUERY + 3  # a step past the absorbed path's limit


@pytest.mark.parametrize(("interleave", "attention"), [(True, "sdpa"), (False, "sdpa"),
                                                       (False, "eager")])  # fmt: skip
@pytest.mark.parametrize("feeds", [[7, 1, 1, 4, 1, 6], [LONG, 1, 4, LONG]])
def test_absorbed_equals_expanded(interleave: bool, attention: str, feeds: list[int]) -> None:
    """sdpa gives boolean masks (or none), eager additive float masks: both paths. transformers'
    eager attention takes its softmax in float32, hence the looser tolerance there. The long
    feeds are a prefill into an empty cache (causal, no mask) and one into a filled cache."""
    ids = torch.randint(0, 64, (2, sum(feeds)), generator=torch.Generator().manual_seed(1))
    reference = _steps(_tiny(0, interleave, attention), ids, feeds)
    model = _tiny(0, interleave, attention)
    assert absorb(model) == 2
    for got, want in zip(_steps(model, ids, feeds), reference, strict=True):
        tol = 1e-9 if attention == "sdpa" else 1e-6
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_other_architectures_are_untouched() -> None:
    from tests.tiny import tiny_llama

    assert absorb(tiny_llama(0)) == 0
