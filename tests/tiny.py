"""Tiny random-init models shared by the unit tests (seeded, CPU, milliseconds to build)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(
    seed: int,
    *,
    vocab: int = 64,
    hidden: int = 32,
    intermediate: int = 64,
    layers: int = 2,
    double: bool = True,
    **overrides,
) -> LlamaForCausalLM:
    """A GQA Llama (4 query / 2 KV heads) in eval mode; float64 by default, so batched and
    one-token forwards agree on every argmax."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        **overrides,
    )
    model = LlamaForCausalLM(config)
    return (model.double() if double else model).eval()


def tree_llama(seed: int, layers: int = 2, attn: str = "sdpa", vocab: int = 48) -> LlamaForCausalLM:
    """A float64 GQA Llama (hidden 32, 4 query / 2 KV heads, 512 positions) with a chosen
    attention implementation: the tree tests' model (tree masks reach sdpa and eager)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        attn_implementation=attn,
    )  # fmt: skip
    return LlamaForCausalLM(config).double().eval()


def tiny_indexes(tmp_path_factory, vocab: int, eos: int) -> dict[str, tuple[str, str]]:
    """{"sft", "target": (index path, stats path)}: one seeded corpus of 20 random 40-token
    documents indexed twice, the two n-gram indexes the speed benchmark's methods open."""
    import json

    import numpy as np

    from kvspec.ngram.index import build_index

    rng = np.random.default_rng(0)
    docs = [rng.integers(0, eos, 40).tolist() for _ in range(20)]
    indexes = {}
    for name in ("sft", "target"):
        path = tmp_path_factory.mktemp(name) / "idx"
        build_index(docs, path, vocab_size=vocab, eos_token_id=eos)
        stats = path.parent / "idx.json"
        stats.write_text(json.dumps({"vocab_size": vocab, "eos_token_id": eos}))
        indexes[name] = (str(path), str(stats))
    return indexes


def sliding_gemma3(seed: int = 0):
    """A float32 Gemma-3 of a sliding (4-token window) and a full-attention layer with two RoPE
    bases (vocabulary 100, hidden 64, sdpa): the packed-row tests' model."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
        sliding_window=4, layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=64, attn_implementation="sdpa",
    )  # fmt: skip
    return Gemma3ForCausalLM(config).eval()
