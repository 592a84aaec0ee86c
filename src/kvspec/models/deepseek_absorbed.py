"""DeepSeek-V3 attention decoding in the latent space (weight absorption), for the models that
`kvspec.care.restore` writes in DeepSeek-V3 layout.

transformers' `DeepseekV3Attention` caches what MLA caches — the normalised latent c (r numbers)
and the RoPE key k_rot (R numbers) per token — but at every step expands every cached position
back to per-head keys and values (`kv_b_proj` over the whole context). With W_UK_h and W_UV_h
the per-head slices of `kv_b_proj`, the position-free part of a score is
q_h · (W_UK_h c) = (W_UK_hᵀ q_h) · c and the output is W_UV_h (Σ_t a_t c_t). So attention runs
over the cache itself, as one key (c ‖ k_rot) and one value (c) shared by all heads (the heads'
queries stacked as rows of one attention, so the cache is read once per step, never copied per
head), and W_UV is applied per head afterwards: the same logits up to round-off, without the
expansion.
Steps feeding at most `MAX_QUERY` tokens (decoding, draft verification) take this path. A
longer prefill expands the latents as transformers does, but pads the values to the keys'
width before SDPA (and drops the padding after): with unequal widths SDPA falls back to its
math kernel, which materialises every (query, key) score; on the mini restored model (30
layers, 8,176 tokens, 2 CPU threads) one attention took 3.8 s that way against 0.5 s padded.
"""

from __future__ import annotations

import types
from typing import Any

import torch

MAX_QUERY = 32


def _causal_mask(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    """(q, T) True where query i (the last q of T positions) may attend key j."""
    rows = torch.arange(q_len, device=device)[:, None] + (kv_len - q_len)
    return torch.arange(kv_len, device=device)[None, :] <= rows


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            mask: torch.Tensor | None, scale: float) -> torch.Tensor:  # fmt: skip
    """softmax(q kᵀ · scale + mask) v for one head (B, 1, n, ·) as two matmuls: on CPU this is
    about twice as fast as SDPA's kernel for one head with few query rows (measured at 8k
    keys). A boolean mask is True where attending is allowed; a float mask is added."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale  # (B, 1, n, T)
    if mask is not None:
        scores = (
            scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        )
    return torch.matmul(torch.softmax(scores, dim=-1), value)


def absorbed_forward(
    self: Any,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None,
    past_key_values: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """A drop-in `DeepseekV3Attention.forward` that attends over the latent cache."""
    if past_key_values is None:
        return type(self).forward(self, hidden_states, position_embeddings, attention_mask,
                                  past_key_values, **kwargs)  # fmt: skip
    q_pass, q_rot, kv, k_rot = _project(self, hidden_states, position_embeddings, past_key_values)
    if hidden_states.shape[1] > MAX_QUERY:
        out = _expanded(self, q_pass, q_rot, kv, k_rot, attention_mask, **kwargs)
    else:
        out = _absorbed(self, q_pass, q_rot, kv, k_rot, attention_mask)
    return self.o_proj(out), None


def _project(
    self: Any,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    past_key_values: Any,
) -> tuple[torch.Tensor, ...]:
    """The step's queries (q_pass (B, H, q, nope), q_rot (B, H, q, R)) and the whole cache
    after storing the step's latents (c (B, 1, T, r), k_rot (B, 1, T, R))."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    b, q_len = hidden_states.shape[:-1]
    if self.q_lora_rank is None:
        q = self.q_proj(hidden_states)
    else:
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
    q = q.view(b, q_len, self.num_heads, self.qk_head_dim).transpose(1, 2)  # (B, H, q, d)
    q_pass, q_rot = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
    kv, k_rot = torch.split(self.kv_a_proj_with_mqa(hidden_states),
                            [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)  # fmt: skip
    kv = self.kv_a_layernorm(kv).view(b, 1, q_len, self.kv_lora_rank)  # (B, 1, q, r)
    k_rot = k_rot.view(b, 1, q_len, self.qk_rope_head_dim)  # (B, 1, q, R)
    cos, sin = position_embeddings
    rope = (
        ds.apply_rotary_pos_emb_interleave
        if self.config.rope_interleave
        else ds.apply_rotary_pos_emb
    )
    q_rot, k_rot = rope(q_rot, k_rot, cos, sin)
    kv, k_rot = past_key_values.update(kv, k_rot, self.layer_idx)  # (B, 1, T, r), (B, 1, T, R)
    return q_pass, q_rot, kv, k_rot


def _absorbed(
    self: Any,
    q_pass: torch.Tensor,
    q_rot: torch.Tensor,
    kv: torch.Tensor,
    k_rot: torch.Tensor,
    attention_mask: torch.Tensor | None,
) -> torch.Tensor:
    """(B, q, H·v) attention output computed in the latent space (module docstring)."""
    b, heads, q_len = q_pass.shape[:3]
    w = self.kv_b_proj.weight.view(heads, -1, self.kv_lora_rank)  # (H, nope + v, r)
    w_uk, w_uv = w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim :]
    query = torch.cat([torch.einsum("bhqn,hnr->bhqr", q_pass, w_uk), q_rot], dim=-1)
    key = torch.cat([kv, k_rot], dim=-1)  # (B, 1, T, r + R)
    mask = attention_mask[:, :, :, : key.shape[-2]] if attention_mask is not None else None
    if mask is None and q_len > 1:
        mask = _causal_mask(q_len, key.shape[-2], key.device)[None, None]
    # All heads share one key and value: attend as a single head with H·q query rows, so the
    # cache is read once and never repeated per head (row h·q + i is head h, query i).
    query = query.reshape(b, 1, heads * q_len, query.shape[-1])
    if mask is not None:
        mask = mask.repeat(1, 1, heads, 1)  # (B or 1, 1, H·q, T)
    out = _attend(query, key, kv, mask, self.scaling)
    out = out.view(b, heads, q_len, self.kv_lora_rank)  # (B, H, q, r)
    return torch.einsum("bhqr,hvr->bqhv", out, w_uv).reshape(b, q_len, -1)  # (B, q, H·v)


def _expanded(
    self: Any,
    q_pass: torch.Tensor,
    q_rot: torch.Tensor,
    kv: torch.Tensor,
    k_rot: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> torch.Tensor:
    """(B, q, H·v) attention output over per-head keys and values expanded from the latents,
    the values zero-padded to the keys' width through the model's attention function."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    b, _, q_len = q_pass.shape[:3]
    key, value = self.expand_kv(kv, k_rot)  # (B, H, T, nope + R), (B, H, T, v)
    pad = max(self.qk_head_dim - self.v_head_dim, 0)
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, ds.eager_attention_forward
    )
    out, _ = attend(self, torch.cat([q_pass, q_rot], dim=-1), key,
                    torch.nn.functional.pad(value, (0, pad)), attention_mask,
                    dropout=0.0, scaling=self.scaling, **kwargs)  # fmt: skip
    return out[..., : self.v_head_dim].reshape(b, q_len, -1)  # out: (B, q, H, v + pad)


def absorb(model: torch.nn.Module) -> int:
    """Give every DeepSeek-V3 attention layer of `model` the absorbed decoding path; returns
    how many layers changed (0 for other architectures)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    layers = [m for m in model.modules() if isinstance(m, DeepseekV3Attention)]
    for attention in layers:
        attention.forward = types.MethodType(absorbed_forward, attention)
    return len(layers)
