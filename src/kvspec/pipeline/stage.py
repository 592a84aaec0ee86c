"""One pipeline stage: a contiguous block of a causal LM's decoder layers with its own KV cache.

`split_layers` assigns layers to stages as evenly as possible (earlier stages take the extra
layer, as llama.cpp's MPI backend does). A `Stage` keeps only its own layers (the others are
dropped, so a rank holds its share of the weights) re-indexed from 0 in its own DynamicCache;
the head stage also keeps the token embedding, the final norm and the output head, because
the head rank embeds the input and samples. The forward is the model's own decoder layers
with an explicit additive causal mask and positions, so a stage can be fed any number of new
tokens after its cache (one token, a prompt, or a draft to verify).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from kvspec.decoding.tree import causal_mask

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")  # decoder stacks without per-layer windows


def split_layers(n_layers: int, n_stages: int) -> list[range]:
    """Contiguous layer ranges, one per stage, sizes differing by at most one."""
    if not 1 <= n_stages <= n_layers:
        raise ValueError(f"cannot split {n_layers} layers over {n_stages} stages")
    base, extra = divmod(n_layers, n_stages)
    out, start = [], 0
    for s in range(n_stages):
        size = base + (s < extra)
        out.append(range(start, start + size))
        start += size
    return out


class Stage(nn.Module):
    """Layers `layers` of `model` (a *ForCausalLM); `head=True` keeps embedding and output."""

    def __init__(self, model: nn.Module, layers: range, head: bool) -> None:
        super().__init__()
        config = model.config
        if config.model_type not in SUPPORTED:
            raise ValueError(f"pipeline stages support {SUPPORTED}, not {config.model_type!r}")
        inner = model.model
        self.layers = nn.ModuleList(inner.layers[i] for i in layers)
        for local, layer in enumerate(self.layers):
            layer.self_attn.layer_idx = local  # the stage's own cache numbers from 0
        self.rotary = inner.rotary_emb
        self.head = head
        self.embed = inner.embed_tokens if head else None
        self.norm = inner.norm if head else None
        self.lm_head = model.lm_head if head else None
        self.layer_range = layers
        self.cache: Any = None
        self.reset()

    def reset(self) -> None:
        """Empty the stage's cache (a new request)."""
        from transformers import DynamicCache

        self.cache = DynamicCache()

    @property
    def cached(self) -> int:
        return self.cache.get_seq_length() if self.layers else 0

    @torch.inference_mode()
    def embed_tokens(self, tokens: list[int]) -> torch.Tensor:
        """Input embeddings of `tokens` (head stage only).  # (1, T, H)"""
        ids = torch.tensor([tokens], dtype=torch.long, device=self._device())
        return self.embed(ids)  # type: ignore[misc]

    @torch.inference_mode()
    def forward(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run this stage's layers on `hidden` (1, T, H), appended to its cache. By default the
        tokens sit right after the cache and see all of it; PipeInfer's multibuffered cache
        gives its own `positions` (1, T) and additive `mask` (1, 1, T, cached + T)."""
        past, q = self.cached, hidden.shape[1]
        if positions is None:
            positions = torch.arange(past, past + q)[None]  # (1, T)
        if mask is None:
            mask = causal_mask(past, q, hidden.dtype)
        positions, mask = positions.to(hidden.device), mask.to(hidden.device)
        embeddings = self.rotary(hidden, position_ids=positions)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_ids=positions,
                           past_key_values=self.cache, use_cache=True,
                           position_embeddings=embeddings)  # fmt: skip
        return hidden

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits of the last stage's output (head stage only).  # (T, V)"""
        return self.lm_head(self.norm(hidden))[0].cpu()  # type: ignore[misc]

    def crop(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        from kvspec.decoding.cache import crop_to

        if self.layers:
            crop_to(self.cache, length)

    def _device(self) -> torch.device:
        return next(self.parameters()).device
