"""Latent-KV attention (MLA-style) model converted from Llama or Qwen3: one file, whole forward.

Each attention layer replaces the GQA projections k_proj / v_proj by low-rank pairs

    latent_k = x · k_aᵀ  (B, T, r_K)      keys   = latent_k · k_bᵀ  (B, T, g_h·d_h)
    latent_v = x · v_aᵀ  (B, T, r_V)      values = latent_v · v_bᵀ  (B, T, g_h·d_h)

and only the latents are cached. Keys are recovered from the cached latent on every step, then
(for Qwen3) RMS-normalised per head, then rotated with the *original* RoPE, so a full-rank
conversion reproduces the source model exactly.

Cache layout: a transformers ``DynamicCache`` whose per-layer "keys" are latent_k as
(B, 1, T, r_K) and "values" are latent_v as (B, 1, T, r_V). ``generate()``, cropping and beam
reordering therefore work unchanged, and the cache holds Σ_layers (r_K + r_V)·T elements.

Positions: a token's RoPE position is its index in the cache. RoPE scores depend only on the
offset between query and key positions, so this matches HF's shifted ``position_ids`` under
left padding; padded keys are removed by the attention mask.

This module imports only torch and transformers, so a saved checkpoint also loads with
``trust_remote_code=True`` outside kvspec.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    rotate_half,
)

BASE_ARCHITECTURES = ("llama", "qwen3")


class MLAConfig(PretrainedConfig):
    """Llama/Qwen3 hyper-parameters plus per-layer latent ranks for K and V."""

    model_type = "kvspec_mla"
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    tie_word_embeddings: bool = False
    rope_parameters: dict | None = None
    attention_bias: bool = False
    attention_dropout: float | int = 0.0
    mlp_bias: bool = False
    base_architecture: str = "llama"
    kv_rank_k: list[int] | None = None
    kv_rank_v: list[int] | None = None

    def __post_init__(self, **kwargs) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        full = self.num_key_value_heads * self.head_dim
        if self.kv_rank_k is None:
            self.kv_rank_k = [full] * self.num_hidden_layers
        if self.kv_rank_v is None:
            self.kv_rank_v = [full] * self.num_hidden_layers
        super().__post_init__(**kwargs)
        self._check_mla_fields()

    def _check_mla_fields(self) -> None:
        if self.base_architecture not in BASE_ARCHITECTURES:
            raise ValueError(
                f"base_architecture must be one of {BASE_ARCHITECTURES}, "
                f"got {self.base_architecture!r}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        for name in ("kv_rank_k", "kv_rank_v"):
            ranks = getattr(self, name)
            if len(ranks) != self.num_hidden_layers or min(ranks) < 1:
                raise ValueError(
                    f"{name} needs {self.num_hidden_layers} positive ranks (one per layer), "
                    f"got {ranks}"
                )


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (B, H, T, d_h) by the RoPE angles cos/sin (B or 1, T, d_h)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, 1, T, d_h)
    return x * cos + rotate_half(x) * sin


class MLAAttention(nn.Module):
    """Causal GQA attention whose keys/values are decoded from cached low-rank latents."""

    def __init__(self, config: MLAConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        d, kv_out = config.hidden_size, self.num_kv_heads * self.head_dim
        r_k, r_v = config.kv_rank_k[layer_idx], config.kv_rank_v[layer_idx]
        bias = config.attention_bias
        self.q_proj = nn.Linear(d, self.num_heads * self.head_dim, bias=bias)
        self.k_a = nn.Linear(d, r_k, bias=False)
        self.k_b = nn.Linear(r_k, kv_out, bias=False)
        self.v_a = nn.Linear(d, r_v, bias=False)
        self.v_b = nn.Linear(r_v, kv_out, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, d, bias=bias)
        self.qk_norm = config.base_architecture == "qwen3"
        if self.qk_norm:  # Qwen3: per-head RMSNorm on q and k, before RoPE
            self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def _heads(self, x: Tensor, norm: nn.Module | None) -> Tensor:
        """(B, T, H·d_h) → (B, H, T, d_h), RMS-normalising each head first if `norm` is given."""
        x = x.view(*x.shape[:2], -1, self.head_dim)  # (B, T, H, d_h)
        if norm is not None:
            x = norm(x)
        return x.transpose(1, 2)

    def forward(
        self,
        hidden_states: Tensor,
        rope: tuple[Tensor, Tensor],
        allowed: Tensor,
        past_key_values: Cache | None = None,
    ) -> Tensor:
        """hidden_states (B, T, d); rope = cos, sin (1, S, d_h) for all S cached positions;
        allowed (B, 1, T, S) boolean mask. Returns (B, T, d)."""
        bsz, q_len, _ = hidden_states.shape
        latent_k = self.k_a(hidden_states).unsqueeze(1)  # (B, 1, T, r_K)
        latent_v = self.v_a(hidden_states).unsqueeze(1)  # (B, 1, T, r_V)
        if past_key_values is not None:  # cache stores latents only; returns all S positions
            latent_k, latent_v = past_key_values.update(latent_k, latent_v, self.layer_idx)
        query = self._heads(self.q_proj(hidden_states), self.q_norm if self.qk_norm else None)
        key = self._heads(self.k_b(latent_k[:, 0]), self.k_norm if self.qk_norm else None)
        value = self._heads(self.v_b(latent_v[:, 0]), None)  # (B, g_h, S, d_h)
        cos, sin = rope
        query = _rope(query, cos[:, -q_len:], sin[:, -q_len:])  # (B, H, T, d_h)
        key = _rope(key, cos, sin)  # (B, g_h, S, d_h)
        groups = self.num_heads // self.num_kv_heads  # GQA: each kv head serves `groups` q heads
        key = key.repeat_interleave(groups, dim=1)  # (B, H, S, d_h)
        value = value.repeat_interleave(groups, dim=1)  # (B, H, S, d_h)
        scores = torch.matmul(query, key.transpose(2, 3)) * self.scaling  # (B, H, T, S)
        # fill (not add) the mask so fully padded rows stay finite (uniform) instead of NaN
        scores = scores.float().masked_fill(~allowed, torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1).to(value.dtype)
        probs = nn.functional.dropout(probs, p=self.attention_dropout, training=self.training)
        out = torch.matmul(probs, value).transpose(1, 2).reshape(bsz, q_len, -1)  # (B, T, H·d_h)
        return self.o_proj(out)


class MLADecoderLayer(GradientCheckpointingLayer):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: MLAConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = MLAAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: Tensor,
        rope: tuple[Tensor, Tensor],
        allowed: Tensor,
        past_key_values: Cache | None = None,
    ) -> Tensor:
        attn = self.self_attn(self.input_layernorm(hidden_states), rope, allowed, past_key_values)
        hidden_states = hidden_states + attn
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class MLAPreTrainedModel(PreTrainedModel):
    """Weight init, checkpoint I/O and Auto-class plumbing shared by the MLA models."""

    config_class = MLAConfig
    config: MLAConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["MLADecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]


def attention_allowed(
    attention_mask: Tensor | None, bsz: int, q_len: int, past_len: int, device: torch.device
) -> Tensor:
    """Boolean (B, 1, T, S) mask: causal, and only keys whose `attention_mask` entry is 1.

    `attention_mask` may be HF-style 2-D (B, S) padding mask over past + current tokens, or an
    already expanded 4-D mask (boolean True = attend, or additive float with 0 = attend).
    """
    total = past_len + q_len
    if attention_mask is not None and attention_mask.ndim == 4:
        mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        return mask[..., -q_len:, -total:].to(device)
    q_pos = torch.arange(past_len, total, device=device)  # (T,)
    k_pos = torch.arange(total, device=device)  # (S,)
    allowed = (k_pos[None, :] <= q_pos[:, None])[None, None]  # (1, 1, T, S)
    if attention_mask is not None:
        if attention_mask.shape[-1] != total:
            raise ValueError(
                f"attention_mask covers {attention_mask.shape[-1]} tokens, expected {total}"
            )
        keep = attention_mask.to(device=device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, S)
        allowed = allowed & keep
    return allowed.expand(bsz, 1, q_len, total)


class MLAModel(MLAPreTrainedModel):
    """Embedding, decoder stack and final norm; returns hidden states and the latent cache."""

    def __init__(self, config: MLAConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(
            [MLADecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
        self.gradient_checkpointing = False
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """Hidden states (B, T, d) and the latent cache.

        `position_ids` is accepted for API compatibility; RoPE uses cache indices (module doc).
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, d)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        bsz, q_len, _ = inputs_embeds.shape
        past_len = past_key_values.get_seq_length() if past_key_values is not None else 0
        device = inputs_embeds.device
        allowed = attention_allowed(attention_mask, bsz, q_len, past_len, device)
        positions = torch.arange(past_len + q_len, device=device)[None]  # (1, S)
        rope = self.rotary_emb(inputs_embeds, positions)  # cos, sin: (1, S, d_h)
        hidden = inputs_embeds
        for layer in self.layers:
            hidden = layer(hidden, rope, allowed, past_key_values if use_cache else None)
        return BaseModelOutputWithPast(
            last_hidden_state=self.norm(hidden),
            past_key_values=past_key_values if use_cache else None,
        )


class MLAForCausalLM(MLAPreTrainedModel, GenerationMixin):
    """Causal LM head on `MLAModel`; supports generate(), labels → loss and logits_to_keep."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MLAConfig) -> None:
        super().__init__(config)
        self.model = MLAModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """Logits (B, T', vocab) for the last `logits_to_keep` positions (0 = all) and the cache."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
        )
        hidden = out.last_hidden_state  # (B, T, d)
        if isinstance(logits_to_keep, int):
            hidden = hidden[:, -logits_to_keep:] if logits_to_keep > 0 else hidden
        else:
            hidden = hidden[:, logits_to_keep]
        logits = self.lm_head(hidden)
        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=out.past_key_values)


AutoConfig.register(MLAConfig.model_type, MLAConfig, exist_ok=True)
AutoModelForCausalLM.register(MLAConfig, MLAForCausalLM, exist_ok=True)
MLAConfig.register_for_auto_class()
MLAForCausalLM.register_for_auto_class("AutoModelForCausalLM")
