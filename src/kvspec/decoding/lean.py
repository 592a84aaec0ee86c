"""A lean decode forward of a Llama-family causal LM: the drafts' whole forward in one file.

transformers' modules wrap each decoding step of a small draft in ~45 module calls, a causal-mask
builder, output dataclasses and per-call attention dispatch; for a 3-layer draft that plumbing
costs as much as its weights take to stream (a step of `draft` on 2 threads: ~2.1 ms, of which
the packed kernel's 22 calls are ~0.9 ms). `lean_forward(model)` answers the same call
(`input_ids`, `past_key_values` (a `DynamicCache`), optional additive `attention_mask` and
`position_ids`) with the same layers of the same model — its embedding, norms, linear layers
(packed or not), rotary table and output head are called as they are — and only the glue in
between is written out: RoPE as transformers' `apply_rotary_pos_emb`, the cache through
`DynamicCache.update`, and the attention of one query position as three small products
(torch's SDPA costs ~0.1 ms per call at one position), several positions through SDPA with
the mask (causal after the cache when none is given).

Only plain Llama layers are taken (`model_type` "llama": no attention or MLP bias, SiLU MLP,
no sliding window); any other model (Qwen3's q/k norms, Gemma's soft caps and windows, the
neural heads that answer like a causal LM) gets `model` itself back. Logits equal
transformers' forward up to float rounding of the attention sums
(tests/decoding/test_lean.py); a draft proposes, it never decides what verification keeps, so
every greedy method stays exact and the samplers keep the target's law whatever the draft's
last bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class LeanOutput:
    """What the drafters read of a causal LM's output."""

    logits: torch.Tensor  # (1, T, V)
    past_key_values: Any


def lean_forward(model: torch.nn.Module) -> Callable[..., Any]:
    """`model`'s lean forward when its layers are plain Llama layers, else `model` itself."""
    return LeanLlama(model) if supports(model) else model


def supports(model: torch.nn.Module) -> bool:
    """Whether `lean_forward` computes `model`'s forward (plain Llama layers, no bias)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) != "llama":
        return False
    plain = not (config.attention_bias or config.mlp_bias)
    return plain and config.hidden_act == "silu" and getattr(config, "sliding_window", None) is None


class LeanLlama:
    """The decode forward of a `LlamaForCausalLM` (batch 1), sharing its modules."""

    def __init__(self, model: torch.nn.Module) -> None:
        if not supports(model):
            raise ValueError(f"not a plain Llama model: {type(model).__name__}")
        config = model.config
        self.model, self.inner = model, model.model
        self.head = model.get_output_embeddings()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim**-0.5

    @torch.inference_mode()
    def __call__(
        self,
        input_ids: torch.Tensor,
        past_key_values: Any = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool = True,
    ) -> LeanOutput:
        """Logits of every fed position (1, T, V); the cache holds them afterwards."""
        from transformers import DynamicCache

        if input_ids.shape[0] != 1:
            raise ValueError(f"the lean forward decodes one sequence, got {input_ids.shape[0]}")
        cache = past_key_values if past_key_values is not None else DynamicCache()
        past, fed = cache.get_seq_length(), input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(past, past + fed, device=input_ids.device)[None]
        x = self.inner.embed_tokens(input_ids)  # (1, T, D)
        cos, sin = (t[:, None] for t in self.inner.rotary_emb(x, position_ids))  # (1, 1, T, d)
        mask = _mask(attention_mask, fed, past, x.device)
        for i, layer in enumerate(self.inner.layers):
            h = layer.input_layernorm(x)
            x = x + self._attend(layer.self_attn, h, cos, sin, mask, cache, i)
            x = x + _mlp(layer.mlp, layer.post_attention_layernorm(x))
        return LeanOutput(self.head(self.inner.norm(x)), cache)

    def _attend(self, attn: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None, cache: Any, index: int) -> torch.Tensor:  # fmt: skip
        """One layer's attention output (1, T, D) over the cache plus the fed positions."""
        fed = h.shape[1]
        q = attn.q_proj(h).view(1, fed, self.heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(1, fed, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(1, fed, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        keys, values = cache.update(k, v, index)  # (1, h_kv, L, d)
        if fed == 1 and mask is None:
            out = self._one_query(q, keys, values)
        else:
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                 scale=self.scale, enable_gqa=True)  # fmt: skip
        return attn.o_proj(out.transpose(1, 2).reshape(1, fed, -1))

    def _one_query(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Grouped attention of one query position, (1, H, 1, d): each KV head's query group
        against its keys as one batched product."""
        group = self.heads // self.kv_heads
        qg = q.view(self.kv_heads, group, self.head_dim)  # (h_kv, G, d)
        scores = torch.bmm(qg, keys[0].transpose(1, 2)) * self.scale  # (h_kv, G, L)
        out = torch.bmm(torch.softmax(scores, dim=-1), values[0])  # (h_kv, G, d)
        return out.view(1, self.heads, 1, self.head_dim)


def _mlp(mlp: Any, h: torch.Tensor) -> torch.Tensor:
    return mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _mask(given: torch.Tensor | None, fed: int, past: int, device: Any) -> torch.Tensor | None:
    """The attention mask of `fed` positions after `past` cached ones: the given additive mask
    (e.g. a draft tree's), else causal (None for one position: it sees everything)."""
    if given is not None:
        if given.dim() != 4:
            raise ValueError(f"the lean forward takes a 4-D additive mask, got {given.dim()}-D")
        return given
    if fed == 1:
        return None
    return torch.ones(fed, past + fed, dtype=torch.bool, device=device).tril(past)
