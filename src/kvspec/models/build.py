"""Construct the mini/ci stand-in models (Llama or Qwen3 architecture, GQA) from config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from kvspec.data.chat import END
from kvspec.seeds import derive

ARCHITECTURES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}


def model_config(spec: dict[str, Any], tokenizer: PreTrainedTokenizerBase):
    """An HF config for `spec` (the `models.<name>.pretrain.arch` block of the config)."""
    return hf_config(
        spec,
        len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def hf_config(spec: Mapping[str, Any], vocab_size: int, **token_ids: Any):
    """An HF config for an `arch` block (pretrain or distil) over `vocab_size` tokens;
    `token_ids` are the bos/eos/pad ids."""
    arch = spec["family"]
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; known: {sorted(ARCHITECTURES)}")
    if spec["heads"] % spec["kv_heads"]:
        raise ValueError(f"heads={spec['heads']} is not a multiple of kv_heads={spec['kv_heads']}")
    config_cls, _ = ARCHITECTURES[arch]
    return config_cls(
        vocab_size=vocab_size,
        hidden_size=spec["hidden"],
        intermediate_size=spec["intermediate"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"],
        head_dim=spec["hidden"] // spec["heads"],
        max_position_embeddings=spec["max_position"],
        rope_theta=spec.get("rope_theta", 10000.0),
        tie_word_embeddings=spec.get("tie_embeddings", False),
        **token_ids,
    )


def build_model(
    spec: dict[str, Any], tokenizer: PreTrainedTokenizerBase, seed: int
) -> PreTrainedModel:
    """A freshly initialised causal LM (seeded) for `spec`."""
    config = model_config(spec, tokenizer)
    torch.manual_seed(derive(seed, "init"))
    model = ARCHITECTURES[spec["family"]][1](config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    # Stop at the end of an assistant turn as well as at end of text.
    end_id = tokenizer.convert_tokens_to_ids(END)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end_id]
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
