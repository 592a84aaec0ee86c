"""The draft-model drafter: a small causal LM proposing token by token with its own cache."""

from __future__ import annotations

from typing import Any

import torch

from kvspec.decoding.cache import common_prefix, crop_to
from kvspec.decoding.drafts import Dist, Draft
from kvspec.decoding.lean import lean_forward, new_cache
from kvspec.decoding.tree import (
    DraftTree,
    grow_tree,
    model_mask,
    to_device,
    tree_rows,
    tree_shape,
    visible_slots,
)
from kvspec.decoding.warp import draw, warp


class DraftModelDrafter:
    """A small causal LM that drafts token by token with its own KV cache.

    The cache is reused across calls: only the part of the new context that differs from
    what the cache already holds is fed. Greedy drafts report one-hot q; sampled drafts
    (`sample=True`, at `temperature` and `top_p`) report the distribution they were drawn
    from (`kvspec.decoding.warp.warp`).
    `q_format` is "tensor" for a (k, V) tensor or "dict" for sparse dicts.
    The model runs through `kvspec.decoding.lean`'s forward where its layers are plain Llama
    layers (its own forward otherwise): the same modules without transformers' plumbing.
    `stop_below` > 0 ends a draft after the first token whose probability under the draft is
    below it (transformers' `assistant_confidence_threshold`): the draft's own view of where
    verification will likely fail, so it stops paying for tokens that are then rejected. The
    decision reads only the draft's distribution, so verification keeps the target's law.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        sample: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
        q_format: str = "tensor",
        top_p: float = 1.0,
        report_confidence: bool = False,
        stop_below: float = 0.0,
    ) -> None:
        if not 0.0 <= stop_below < 1.0:
            raise ValueError(f"stop_below must lie in [0, 1), got {stop_below}")
        self.model = model.eval()
        self.forward = lean_forward(self.model)
        self.stop_below = stop_below
        self.report_confidence = report_confidence  # top-1 probabilities (PipeInfer's cutoff)
        self.sample = sample
        self.temperature, self.top_p = temperature, top_p
        self.generator = torch.Generator().manual_seed(seed)
        self.q_format = q_format
        self.cache: Any = None
        self.cached: list[int] = []  # tokens whose keys/values are in `cache`

    @torch.inference_mode()
    def propose(self, context: list[int], k: int) -> Draft:
        """Draft k tokens after `context`."""
        ctx = [int(t) for t in context]
        logits = self._sync(ctx)  # (V,) next-token logits after ctx
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        confidence: list[float] = []
        for i in range(k):
            token, probs = self._choose(logits)
            tokens.append(token)
            rows.append(probs)
            if self.report_confidence:
                confidence.append(float(torch.softmax(logits.double(), -1).max()))
            if self._unsure(logits, probs, token) or i + 1 == k:
                break
            logits = self._feed([token])
        q = torch.stack(rows) if rows else torch.zeros(0, 0)  # (k, V)
        q_out = q if self.q_format == "tensor" else _rows_to_dicts(q)
        return Draft(tokens, q_out, 0, 0, confidence=confidence if self.report_confidence else None)

    def _unsure(self, logits: torch.Tensor, probs: torch.Tensor, token: int) -> bool:
        """Whether the draft gives `token` less than `stop_below` (greedy: the softmax of its
        logits; sampled: the law it was drawn from)."""
        if self.stop_below <= 0.0:
            return False
        p = probs[token] if self.sample else torch.softmax(logits.double(), -1)[token]
        return float(p) < self.stop_below

    def _sync(self, ctx: list[int]) -> torch.Tensor:
        """Make the cache hold ctx[:-1] plus the fed tail; return logits after ctx."""
        keep = min(common_prefix(self.cached, ctx), len(ctx) - 1)
        if keep == 0 or self.cache is None:
            self.cache, self.cached = new_cache(self.forward), []
        else:
            crop_to(self.cache, keep)
            self.cached = self.cached[:keep]
        return self._feed(ctx[keep:])

    def _feed(self, tokens: list[int]) -> torch.Tensor:
        ids = torch.tensor([tokens], dtype=torch.long, device=self.model.device)  # (1, T)
        out = self.forward(input_ids=ids, past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        self.cached.extend(tokens)
        return out.logits[0, -1].cpu()  # (V,)

    def _choose(self, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        if not self.sample:
            token = int(torch.argmax(logits))
            probs = torch.zeros(logits.shape[-1], dtype=torch.float64)
            probs[token] = 1.0
            return token, probs
        probs = warp(logits, self.temperature, self.top_p)  # (V,)
        return draw(probs, self.generator), probs


def _rows_to_dicts(q: torch.Tensor) -> list[Dist]:
    """Sparse dicts (nonzero entries) of the rows of a (k, V) probability tensor."""
    dicts = []
    for row in q:
        ids = torch.nonzero(row).flatten().tolist()
        dicts.append({int(t): float(row[t]) for t in ids})
    return dicts


class ModelTreeDrafter(DraftModelDrafter):
    """EAGLE-2's dynamic draft tree grown by a small causal LM (greedy drafting only)."""

    def __init__(self, model: torch.nn.Module, depth: int, topk: int, total: int) -> None:
        super().__init__(model)
        self.depth, self.topk, self.total = tree_shape(depth, topk, total)

    @torch.inference_mode()
    def propose_tree(self, context: list[int], max_depth: int) -> DraftTree:
        ctx = [int(t) for t in context]
        depth = min(self.depth, max_depth)
        if depth < 1:
            return DraftTree()
        fed: dict[int, int] = {}  # node -> its cache position
        tree = grow_tree(
            self._sync(ctx),
            lambda tree, nodes: self._feed_nodes(tree, nodes, fed, len(ctx)),
            depth, self.topk, self.total,
        )  # fmt: skip
        crop_to(self.cache, len(ctx))
        self.cached = ctx
        return tree

    def _feed_nodes(
        self, tree: DraftTree, nodes: list[int], fed: dict[int, int], base: int
    ) -> torch.Tensor:
        """Run the draft model on `nodes` (their ancestors are already cached); logits. Each
        node sees the context (`base` positions), its fed ancestors and itself, not the other
        branches fed before it."""
        past = self.cache.get_seq_length()
        rows = tree_rows(tree, nodes, fed, past)
        depths = tree.depths()
        device = self.model.device
        slot_pos = list(range(past + len(nodes)))  # the context, then fed nodes at their depth
        for node, slot in fed.items():
            slot_pos[slot] = base - 1 + depths[node]
        positions = [base - 1 + depths[n] for n in nodes]
        mask = model_mask(getattr(self.model, "config", None), visible_slots(rows, past, base),
                          positions, slot_pos, next(self.model.parameters()).dtype)  # fmt: skip
        out = self.forward(
            input_ids=torch.tensor([[tree.tokens[n] for n in nodes]], device=device),
            attention_mask=to_device(mask, device),
            position_ids=torch.tensor([positions], device=device),
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache = out.past_key_values
        return out.logits[0].cpu()
