"""EAGLE-style feature drafter (document 002's EAGLE-2 baseline; its TLI = 0 case), whole
forward in this file.

The target's feature at position t, f_t, is the decoder output that its output head reads
(after the final norm). The head predicts the next feature from the current one and the
token that follows it:

    f̂_{t+1} = Layer( W [f_t ; e(y_{t+1})] ),     logits_{t+2} = lm_head(f̂_{t+1})

with `e` and `lm_head` the target's own (frozen, shared by reference; drafting reads out
over the head's reduced vocabulary when it has one, `kvspec.models.draft_vocab`) and one trainable
decoder layer of the target's architecture with its own KV cache. Drafting continues from
its own predictions: (f̂_{t+1}, ŷ_{t+2}) is the next input. Training (teacher forcing on the
target's features) minimises λ0·KL[p_target ‖ p_head] + λ1·SmoothL1(f̂, f), the document's
loss with TLI = 0 (Table 6: λ0 = 0.1, λ1 = 1.0), the KL over the tokens the head drafts over
(`kvspec.neural.target_states.Readout`, all by default).

In the decoding loop (`kvspec.decoding.loop`), a drafter with `observe` receives the target's
features of every committed position as verification produces them.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from kvspec.decoding.cache import crop_to
from kvspec.decoding.drafts import Draft
from kvspec.decoding.tree import (
    DraftTree,
    additive_mask,
    causal_mask,
    grow_tree,
    layer_rope,
    tree_rows,
    tree_shape,
)
from kvspec.models.draft_vocab import readout_of
from kvspec.neural.target_states import Readout, target_readout, top1_match


class EagleHead(nn.Module):
    """fc [f ; e(y)] -> H, then `layers` decoder layers of the target's architecture (MLP
    width `intermediate`, default the target's): one layer of the target's shape is EAGLE;
    Table 5's "more params" widens it, "more layers" stacks narrower ones."""

    def __init__(self, target: nn.Module, layers: int = 1, intermediate: int | None = None) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"an EAGLE head needs at least one decoder layer, not {layers}")
        config = copy.deepcopy(target.config)
        config.intermediate_size = intermediate or config.intermediate_size
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        layer_cls = type(target.get_decoder().layers[0])
        self.layer = layer_cls(config, layer_idx=0)
        self.more = nn.ModuleList(layer_cls(config, layer_idx=i) for i in range(1, layers))
        self.rotary = copy.deepcopy(target.get_decoder().rotary_emb)
        self.to(dtype=next(target.parameters()).dtype)

    def forward(
        self,
        features: torch.Tensor,  # (B, T, H): f_t
        next_embeds: torch.Tensor,  # (B, T, H): e(y_{t+1})
        positions: torch.Tensor,  # (B, T): t
        cache: Any = None,
        mask: torch.Tensor | None = None,  # 4-D additive; default causal after the cache
    ) -> torch.Tensor:
        """f̂_{t+1} for every t, causally (each sees the cache and earlier t).  # (B, T, H)"""
        hidden = self.fc(torch.cat([features, next_embeds], dim=-1))
        if mask is None:
            past = cache.get_seq_length() if cache is not None else 0
            mask = causal_mask(past, hidden.shape[1], hidden.dtype).to(hidden.device)
        layers = [self.layer, *self.more]
        for layer, rope in zip(layers, layer_rope(self.rotary, hidden, positions, layers),
                               strict=True):  # fmt: skip
            hidden = layer(hidden, attention_mask=mask, position_ids=positions,
                           past_key_values=cache, use_cache=cache is not None,
                           position_embeddings=rope)  # fmt: skip
        return hidden


def eagle_loss(
    head: EagleHead,
    target: nn.Module,
    features: torch.Tensor,  # (B, T, H) the target's features of a sequence
    tokens: torch.Tensor,  # (B, T) that sequence's tokens
    lambda_kl: float = 0.1,
    lambda_reg: float = 1.0,
    readout: Readout | None = None,  # the tokens it reads out over (None: all)
) -> tuple[torch.Tensor, dict[str, float]]:
    """Teacher-forced loss over positions 0..T-2: KL of the target's next-token distribution
    from lm_head(f_{t+1}) to the head's from lm_head(f̂_{t+1}) (over `readout`'s tokens),
    plus SmoothL1(f̂, f)."""
    embed, readout = target.get_input_embeddings(), readout or target_readout(target)
    positions = torch.arange(features.shape[1] - 1, device=features.device)[None]
    pred = head(features[:, :-1], embed(tokens[:, 1:]), positions.expand(len(tokens), -1))
    truth = features[:, 1:]
    with torch.no_grad():
        p_logits = readout.head_logits(truth)  # the target's as the head's (no soft-cap)
    q_logits = readout.head_logits(pred)
    logp, logq = torch.log_softmax(p_logits, -1), torch.log_softmax(q_logits, -1)
    kl = F.kl_div(logq, logp, log_target=True, reduction="none").sum(-1).mean()
    reg = F.smooth_l1_loss(pred, truth)
    loss = lambda_kl * kl + lambda_reg * reg
    parts = {
        "kl": float(kl.detach()),
        "smooth_l1": float(reg.detach()),
        "loss": float(loss.detach()),
        "match": top1_match(p_logits, q_logits),
    }
    return loss, parts


class EagleDrafter:
    """Greedy drafts from an EagleHead, fed the target's features of committed positions."""

    def __init__(self, head: EagleHead, target: nn.Module) -> None:
        self.head = head.eval()
        self.embed = target.get_input_embeddings()
        self.lm_head = readout_of(head, target)  # the target's, or its rows of N tokens
        self.features: list[torch.Tensor] = []  # f_t of committed positions, each (H,)
        self.cache: Any = None
        self.fed = 0  # positions whose (f_t, y_{t+1}) pair is in the head's cache
        self.last: torch.Tensor | None = None  # the head's output for the last fed pair
        self.tokens: list[int] = []

    def observe(self, features: torch.Tensor, start: int) -> None:
        """The target's features (n, H) of positions start .. start + n - 1."""
        del self.features[start:]
        self.features += list(features)
        if self.fed > start:  # a rejected branch was fed: rebuild from the common part
            self.fed = start
            if self.cache is not None:
                crop_to(self.cache, start)

    @torch.inference_mode()
    def propose(self, context: list[int], k: int) -> Draft:
        """Up to k greedy tokens after `context` (needs features of all but its last token)."""
        n = len(context) - 1  # pairs (f_t, y_{t+1}) for t < n are known
        out = self._sync(context)  # (1, 1, H): f̂ of the last context position
        if k < 1 or out is None:
            return Draft([], None)
        drafts: list[int] = []
        for i in range(k):
            token = int(torch.argmax(self.lm_head(out[0, -1])))
            drafts.append(token)
            if i + 1 < k:
                out = self._step(out[:, -1:], [token], n + i)
        crop_to(self.cache, n)  # keep committed pairs only
        return Draft(drafts, None)

    def _sync(self, context: list[int]) -> torch.Tensor | None:
        """Feed the pairs committed since the last call; f̂ of the last context position
        (None for a one-token context).  # (1, 1, H)"""
        from transformers import DynamicCache

        n = len(context) - 1
        if len(self.features) < n:
            raise RuntimeError(f"EagleDrafter has features of {len(self.features)} positions, "
                               f"needs {n}: the loop must call observe()")  # fmt: skip
        if n < 1:
            return None
        if self.cache is None or self.tokens[: self.fed] != context[: self.fed]:
            self.cache, self.fed = DynamicCache(), 0
        if self.fed < n:
            feats = torch.stack(self.features[self.fed : n])[None]  # (1, m, H)
            self.last = self._step(feats, context[self.fed + 1 : n + 1], self.fed)[:, -1:]
            self.fed, self.tokens = n, list(context)
        return self.last

    def _step(self, feats: torch.Tensor, tokens: list[int], start: int) -> torch.Tensor:
        ids = torch.tensor([tokens], dtype=torch.long, device=feats.device)
        positions = torch.arange(start, start + len(tokens), device=feats.device)[None]
        return self.head(feats, self.embed(ids), positions, self.cache)


class EagleTreeDrafter(EagleDrafter):
    """EAGLE-2's dynamic draft tree grown by the head: a node's input is its parent's predicted
    feature and its own token; the fed nodes see the committed pairs and their ancestors (a
    tree mask over the head's cache). Greedy verification only (`kvspec.decoding.tree`)."""

    def __init__(self, head: EagleHead, target: nn.Module, depth: int, topk: int,
                 total: int) -> None:  # fmt: skip
        super().__init__(head, target)
        self.depth, self.topk, self.total = tree_shape(depth, topk, total)

    @torch.inference_mode()
    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree:
        n, depth = len(context) - 1, min(self.depth, max_depth)
        last = self._sync(context)
        if depth < 1 or last is None:
            return DraftTree()
        outs: dict[int, torch.Tensor] = {}  # node -> its predicted feature (1, 1, H)
        fed: dict[int, int] = {}

        def feed(tree: DraftTree, nodes: list[int]) -> torch.Tensor:
            past = self.cache.get_seq_length()
            rows = tree_rows(tree, nodes, fed, past)
            mask = additive_mask(rows, past, last.dtype, prefix=n).to(last.device)
            depths = tree.depths()
            feats = torch.cat([outs.get(tree.parents[v], last) for v in nodes], dim=1)
            ids = torch.tensor([[tree.tokens[v] for v in nodes]], device=last.device)
            positions = torch.tensor([[n + depths[v] - 1 for v in nodes]], device=last.device)
            out = self.head(feats, self.embed(ids), positions, self.cache, mask)  # (1, m, H)
            outs.update({v: out[:, j : j + 1] for j, v in enumerate(nodes)})
            return self.lm_head(out[0])  # (m, V)

        tree = grow_tree(self.lm_head(last[0, -1]), feed, depth, self.topk, self.total)
        crop_to(self.cache, n)
        return tree
