"""Speculative decoding under continuous batching (document 002's Figure 4, on CPU): chain
drafting for every request in the batch, one batched target forward that verifies them all.

`SpecBatch` extends the lecture's continuous-batching `Batch` (one left-padded KV cache whose
mask marks real positions, requests prefilled alone and merged). A step feeds every row its
last committed token and its drafts (padded to the batch's longest draft), each at its own
position ids; greedy verification per row keeps the accepted drafts, and the cache columns of
rejected or padded drafts stay in place but are masked out (holes), so no row's cache is ever
cropped; holes are squeezed out when they make up more than half the cache's width. Each
request has its own drafter instance (drafters keep per-request state: the n-gram drafters'
adaptive depth, a head's own KV cache); drafters run row by row, the target once per step.
Drafters that read the target's features (`observe`: EAGLE) get their row's features of the
committed positions, those that read its cache (`observe_cache`: MoA) a one-row cache of
their request's real positions, gathered after each step (its time counts as drafting).

Requests generate exactly `new_tokens` tokens (no end-of-sequence stop), as in the lecture's
scheduling example, so every method does the same work. With no drafter (`k = 0`) a step is the
lecture's plain batched greedy step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from kvspec.decoding.features import FeatureTap
from kvspec.lecture.scheduler import Batch, Request, Row


@dataclass
class SpecRow(Row):
    drafter: Any = None  # this request's own drafter


class SpecBatch(Batch):
    """A continuous batch whose rows draft `k` tokens each with `make_drafter()`'s drafters."""

    def __init__(self, model: torch.nn.Module, make_drafter: Callable[[], Any] | None,
                 k: int) -> None:  # fmt: skip
        super().__init__(model)
        if (make_drafter is None) != (k == 0):
            raise ValueError("a drafter needs a draft depth k >= 1, and k >= 1 a drafter")
        self.make_drafter, self.k = make_drafter, k
        self.draft_seconds = self.verify_seconds = 0.0
        # over the steps of unfinished rows: steps, tokens drafted, drafts accepted
        self.row_drafts = self.drafted = self.accepted = 0

    @torch.inference_mode()
    def admit(self, request: Request, clock: float) -> Row:
        """Prefill `request` alone (features to its drafter), merge it into the batch."""
        drafter = self.make_drafter() if self.make_drafter else None
        ids = torch.tensor([request.prompt], device=self.model.device)  # (1, P)
        cache = DynamicCache()
        with FeatureTap(self.model) as tap:
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True,
                             logits_to_keep=1)  # fmt: skip
        first = int(out.logits[0, -1].argmax())
        row = SpecRow(request, [first], len(request.prompt), clock, drafter=drafter)
        if hasattr(drafter, "observe"):
            drafter.observe(tap.batch[0], 0)
        self._merge(cache, len(request.prompt))
        self.rows.append(row)
        return row

    @torch.inference_mode()
    def step(self) -> None:
        """Draft for every unfinished row, verify every row in one forward."""
        t0 = time.perf_counter()
        drafts = [self._draft(i, row) for i, row in enumerate(self.rows)]
        t1 = time.perf_counter()
        width = max(map(len, drafts))
        pairs = zip(self.rows, drafts, strict=True)
        fed = [[row.tokens[-1], *d, *[0] * (width - len(d))] for row, d in pairs]
        device = self.model.device
        positions = torch.tensor([[r.position + j for j in range(width + 1)] for r in self.rows],
                                 device=device)  # fmt: skip
        past = self.mask.shape[1]
        self.mask = F.pad(self.mask, (0, width + 1), value=1)  # (B, T + width + 1)
        with FeatureTap(self.model) as tap:
            out = self.model(input_ids=torch.tensor(fed, device=device),
                             attention_mask=self.mask.to(device), position_ids=positions,
                             past_key_values=self.cache, use_cache=True)  # fmt: skip
        choice = out.logits.argmax(-1).tolist()  # (B, width + 1)
        for i, (row, d) in enumerate(zip(self.rows, drafts, strict=True)):
            n_acc = _accepted(choice[i], d)
            self.mask[i, past + n_acc + 1 :] = 0  # rejected and padded drafts: holes
            self._commit(row, d, n_acc, choice[i][n_acc], tap.batch[i, : n_acc + 1])
        self.steps += 1
        self.row_steps += len(self.rows)
        self.verify_seconds += time.perf_counter() - t1
        self.draft_seconds += t1 - t0
        if self.mask.shape[1] > 2 * int(self.mask.sum(1).max()):
            self._squeeze()

    def _draft(self, i: int, row: SpecRow) -> list[int]:
        """Up to k drafts of one row (none once it is done or has one token left)."""
        budget = min(self.k, row.request.new_tokens - len(row.tokens) - 1)
        if row.drafter is None or row.done or budget < 1:
            return []
        if hasattr(row.drafter, "observe_cache"):
            row.drafter.observe_cache(self._row_cache(i))
        draft = row.drafter.propose([*row.request.prompt, *row.tokens], budget)
        return list(draft.tokens[:budget]) if draft else []

    def _commit(self, row: SpecRow, drafts: list[int], n_acc: int, nxt: int,
                features: torch.Tensor) -> None:  # fmt: skip
        if hasattr(row.drafter, "observe"):  # features of the old last token and the accepted
            row.drafter.observe(features, row.position)
        row.position += n_acc + 1
        if not row.done:
            row.tokens += [*drafts[:n_acc], nxt][: row.request.new_tokens - len(row.tokens)]
            self.row_drafts += 1
            self.drafted += len(drafts)
            self.accepted += n_acc

    def _row_cache(self, i: int) -> DynamicCache:
        """Row i's real cache positions as a one-row cache (what MoA's drafter reads)."""
        index = torch.nonzero(self.mask[i]).flatten()
        cache = DynamicCache()
        for layer_idx, layer in enumerate(self.cache.layers):
            keys = layer.keys[i : i + 1, :, index.to(layer.keys.device)]
            values = layer.values[i : i + 1, :, index.to(layer.values.device)]
            cache.update(keys, values, layer_idx)
        return cache

    def _squeeze(self) -> None:
        """Drop the holes: each row's real positions, right-aligned (left padding)."""
        counts = self.mask.sum(1)
        width = int(counts.max())
        index = torch.zeros(len(self.rows), width, dtype=torch.long)
        mask = torch.zeros(len(self.rows), width, dtype=self.mask.dtype)
        for i in range(len(self.rows)):
            real = torch.nonzero(self.mask[i]).flatten()
            index[i, width - len(real) :] = real
            mask[i, width - len(real) :] = 1
        for layer in self.cache.layers:
            gather = index[:, None, :, None].to(layer.keys.device)
            layer.keys = layer.keys.gather(2, gather.expand(-1, layer.keys.shape[1], -1,
                                                            layer.keys.shape[3]))  # fmt: skip
            layer.values = layer.values.gather(2, gather.expand(-1, layer.values.shape[1], -1,
                                                                layer.values.shape[3]))  # fmt: skip
        self.mask = mask


def _accepted(choice: list[int], drafts: list[int]) -> int:
    """How many leading drafts equal the target's greedy choice at their position."""
    n = 0
    while n < len(drafts) and choice[n] == drafts[n]:
        n += 1
    return n
