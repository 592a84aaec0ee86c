"""The "Independent" drafter of document 002, whole forward in this file: a few decoder layers
over the target's own token embeddings, read out through the target's own output head (both
frozen, shared by reference; a loaded head with a reduced vocabulary reads out over its
rows of those tokens only); it never sees the target's activations. Trained with the soft
cross-entropy to the target's next-token distribution only (λ1 = 0 in the document's loss).

It answers like a causal LM (`logits`, `past_key_values`), so `DraftModelDrafter` drafts with
it as with any small model.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from kvspec.decoding.tree import causal_mask
from kvspec.models.draft_vocab import readout_of
from kvspec.neural.moa import llama_layer_config, rope_theta
from kvspec.neural.target_states import (
    Readout,
    TargetStates,
    compute_states,
    target_readout,
    top1_match,
)


class IndependentHead(nn.Module):
    """`layers` decoder layers of the target's width between its embedding and output head."""

    def __init__(self, target: nn.Module, layers: int = 1, intermediate: int = 1536) -> None:
        super().__init__()
        tc = target.config
        config = llama_layer_config(tc.hidden_size, intermediate, tc.num_key_value_heads,
                         tc.max_position_embeddings, tc.rms_norm_eps, rope_theta(tc))  # fmt: skip
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, layer_idx=i) for i in range(layers))
        self.norm = LlamaRMSNorm(tc.hidden_size, eps=tc.rms_norm_eps)
        self.rotary = LlamaRotaryEmbedding(config)
        self.shared = [target]  # a list: the target's parameters are not this module's
        self.to(dtype=next(target.parameters()).dtype)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None,
                use_cache: bool = False, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> SimpleNamespace:  # fmt: skip
        """Next-token logits (B, T, V) of `input_ids` (B, T) after the cache; causal unless a
        4-D additive `attention_mask` and `position_ids` are given (a draft tree's nodes)."""
        hidden = self.final(input_ids, past_key_values, use_cache, attention_mask, position_ids)
        return SimpleNamespace(logits=readout_of(self, self.shared[0])(hidden),
                               past_key_values=past_key_values)  # fmt: skip

    def final(self, input_ids: torch.Tensor, past_key_values: Any = None,
              use_cache: bool = False, attention_mask: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """The normed final hidden states (B, T, H) that `forward` reads out."""
        target = self.shared[0]
        hidden = target.get_input_embeddings()(input_ids)
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        positions = (
            position_ids
            if position_ids is not None
            else torch.arange(past, past + input_ids.shape[1], device=hidden.device)[None]
        )
        mask = (
            attention_mask
            if attention_mask is not None
            else causal_mask(past, input_ids.shape[1], hidden.dtype)
        ).to(hidden.device)
        rope = self.rotary(hidden, position_ids=positions)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_ids=positions,
                           past_key_values=past_key_values, use_cache=use_cache,
                           position_embeddings=rope)  # fmt: skip
        return self.norm(hidden)


Loss = tuple[torch.Tensor, dict[str, float]]


def independent_loss(head: IndependentHead, target: nn.Module, tokens: torch.Tensor,
                     first: int, lambda_kl: float = 0.1, states: TargetStates | None = None,
                     readout: Readout | None = None) -> Loss:  # fmt: skip
    """Soft cross-entropy to the target's next-token distribution on positions `first`..
    (from `states`' final hidden states, or one target forward), over the tokens of
    `readout` (None: all)."""
    states = states or compute_states(target, tokens, 0)
    readout = readout or target_readout(target)
    with torch.no_grad():
        p_logits = readout.target_logits(states.final[0, first:])
        p_target = torch.softmax(p_logits, -1)
    q_logits = readout.head_logits(head.final(tokens)[0, first:])
    ce = -(p_target * torch.log_softmax(q_logits, -1)).sum(-1).mean()
    entropy = -(p_target * torch.log(p_target.clamp_min(1e-30))).sum(-1).mean()
    loss = lambda_kl * ce
    kl = float((ce - entropy).detach())  # the part of the loss training can remove
    return loss, {"ce": float(ce.detach()), "kl": kl, "loss": float(loss.detach()),
                  "match": top1_match(p_logits, q_logits)}  # fmt: skip
