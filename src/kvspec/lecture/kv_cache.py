"""KV-cache size per token by attention variant: the lecture's formulas (section 2.1) for our
models and the documents' models, beside bytes measured on a real cache.

Numbers cached per token, summed over layers (K and V):
  MHA 2·L·N·H;  GQA 2·L·G·H (G KV heads);  MQA 2·L·H;  MLA L·(C + R) (latent C, RoPE key R;
  our CARE conversion caches r_K + r_V per layer);  CLA shares each KV cache between `share`
  consecutive layers: 2·ceil(L/share)·G·H;  sliding window: a local layer keeps at most W
  tokens, so at context T it costs min(T, W)/T of a global layer per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from kvspec.lecture.batching import cache_bytes

# The documents' models, from their published configurations (no download needed).
# DeepSeek-V3 is the lecture's MLA example: N·H = 128·128 = 16,384 -> 512 + 64 = 576.
DOCUMENT_MODELS: dict[str, dict[str, int]] = {
    "Llama-3.1-8B (thesis ch. 3-4)": {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128},
    "Qwen3-4B (thesis Table 3.2)": {"layers": 36, "heads": 32, "kv_heads": 8, "head_dim": 128},
    "DeepSeek-V3 (lecture, MLA)": {"layers": 61, "heads": 128, "kv_heads": 128, "head_dim": 128,
                                   "latent": 512, "rope": 64},
}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """What the cache formulas need of a model."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    latent: int | None = None  # MLA latent width per layer (C, or r_K + r_V)
    rope: int = 0  # decoupled RoPE key width per layer (MLA)
    window: int | None = None  # sliding window W of the local layers
    local_layers: int = 0  # how many layers are local

    @classmethod
    def of(cls, cfg: Any) -> Shape:
        """The shape of a transformers config (Llama, Qwen3, Gemma3)."""
        types = getattr(cfg, "layer_types", None) or []
        local = sum(t == "sliding_attention" for t in types)
        heads = cfg.num_attention_heads
        return cls(
            layers=cfg.num_hidden_layers, heads=heads, kv_heads=cfg.num_key_value_heads,
            head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
            window=getattr(cfg, "sliding_window", None) if local else None, local_layers=local,
        )  # fmt: skip


def mha(s: Shape) -> int:
    return 2 * s.layers * s.heads * s.head_dim


def gqa(s: Shape) -> int:
    return 2 * s.layers * s.kv_heads * s.head_dim


def mqa(s: Shape) -> int:
    return 2 * s.layers * s.head_dim


def mla(s: Shape) -> int:
    if s.latent is None:
        raise ValueError("MLA needs a latent width")
    return s.layers * (s.latent + s.rope)


def cla(s: Shape, share: int = 2) -> int:
    return 2 * math.ceil(s.layers / share) * s.kv_heads * s.head_dim


def windowed(s: Shape, context: int) -> float:
    """Numbers per token at `context` tokens when `local_layers` keep only `window` tokens."""
    per_layer = 2 * s.kv_heads * s.head_dim
    if not s.window or not s.local_layers:
        return float(gqa(s))
    kept = min(context, s.window) / context
    return per_layer * (s.layers - s.local_layers + s.local_layers * kept)


def formula_rows(
    name: str, s: Shape, context: int, bytes_per: int, only: str | None = None
) -> list[dict[str, Any]]:
    """Every variant the shape allows (or just `only`): numbers per token and bytes."""
    variants: dict[str, float] = {"MHA": mha(s), "GQA": gqa(s), "MQA": mqa(s)}
    variants["CLA (pairs)"] = cla(s)
    if s.latent is not None:
        variants["MLA"] = mla(s)
    if s.window and s.local_layers:
        variants[f"sliding window {s.window} @ {context}"] = windowed(s, context)
    return [
        {"model": name, "variant": v, "numbers_per_token": n, "bytes_per_token": n * bytes_per,
         "vs_mha": n / mha(s)}
        for v, n in variants.items()
        if only is None or v == only
    ]  # fmt: skip


@torch.inference_mode()
def measured_bytes_per_token(model: torch.nn.Module, context: int, seed: int) -> float:
    """Cache bytes per token after a prefill of `context` seeded random tokens."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, context), generator=gen).to(model.device)
    cache = DynamicCache(config=model.config)
    model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache_bytes(cache) / context


def mha_twin(model: torch.nn.Module) -> torch.nn.Module:
    """The same model with every query head given its own KV head (GQA -> MHA by repeating
    K/V projections): identical outputs, the cache MHA would need."""
    import copy

    cfg = copy.deepcopy(model.config)
    kv_heads = cfg.num_key_value_heads
    group = cfg.num_attention_heads // kv_heads
    cfg.num_key_value_heads = cfg.num_attention_heads
    twin = type(model)(cfg).to(dtype=next(model.parameters()).dtype).eval()
    state = model.state_dict()
    for key, value in state.items():
        if key.endswith(("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias")):
            heads = value.reshape(kv_heads, -1, *value.shape[1:])  # (G, H, ...)
            state[key] = heads.repeat_interleave(group, dim=0).reshape(-1, *value.shape[1:])
    twin.load_state_dict(state)
    return twin
