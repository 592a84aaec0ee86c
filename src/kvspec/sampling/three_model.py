"""Three-model speculative sampling (document 004, Algorithm 2), as nested rejection sampling.

A draft proposes `k_d` tokens, an intermediary model verifies them by speculative sampling
(`k_i` such cycles), and the target verifies the intermediary's batch in one forward pass.
Written as a drafter for the study's loop (`kvspec.decoding.loop.speculative_generate`): the
batch is an exact sample from the intermediary (each cycle's accepted drafts plus its
residual or bonus token), so it is proposed with the intermediary's own distributions as q,
and the outer verification makes every emitted token follow the target exactly.

Where the document's Algorithm 2 resamples a rejected token from the intermediary (or the
target) itself, this resamples from the residual max(0, p - q), which is what keeps the
output distribution exact (the printed variant is `verify_resample_model`, for comparison).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kvspec.decoding.cache import crop_to
from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.drafts import Draft
from kvspec.decoding.lean import lean_forward, new_cache
from kvspec.decoding.verify import verify_greedy, verify_sampling
from kvspec.decoding.warp import warp
from kvspec.seeds import derive


class CachedScorer:
    """A model's warped next-token distributions after a context and after each appended
    token, its KV cache reused across calls for the common prefix."""

    def __init__(self, model: torch.nn.Module, temperature: float, top_p: float) -> None:
        self.model, self.temperature, self.top_p = model.eval(), temperature, top_p
        self.forward = lean_forward(self.model)  # kvspec.decoding.lean where it applies
        self.cache: Any = None
        self.cached: list[int] = []

    @torch.inference_mode()
    def rows(self, context: list[int], tokens: list[int]) -> torch.Tensor:
        """(len(tokens) + 1, V): the distribution after context, then after each token."""
        full = [*context, *tokens]
        keep = min(_common_prefix(self.cached, full), len(context) - 1)
        if self.cache is None or keep == 0:
            self.cache, self.cached, keep = new_cache(self.forward), [], 0
        else:
            crop_to(self.cache, keep)
            self.cached = self.cached[:keep]
        ids = torch.tensor([full[keep:]], device=self.model.device)  # (1, T)
        logits = self.forward(input_ids=ids, past_key_values=self.cache, use_cache=True).logits
        self.cached = list(full)
        return warp(logits[0, -(len(tokens) + 1) :].cpu(), self.temperature, self.top_p)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class SpeculativeDrafter:
    """Proposes up to k tokens sampled from `mid` by `cycles` rounds of speculative sampling
    with `draft` (k_d tokens each); q = the intermediary's distributions. With
    `sample=False` every level is greedy (the proposal is the intermediary's greedy text)."""

    def __init__(self, mid: torch.nn.Module, draft: torch.nn.Module, k_d: int, cycles: int, *,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, sample: bool = True,
                 verifier: Callable[..., tuple[int, int]] = verify_sampling) -> None:  # fmt: skip
        if k_d < 1 or cycles < 1:
            raise ValueError(f"need k_d >= 1 and cycles >= 1, got {k_d}, {cycles}")
        self.mid = CachedScorer(mid, temperature, top_p)
        self.draft = DraftModelDrafter(draft, sample=sample, temperature=temperature,
                                       top_p=top_p, seed=derive(seed, "draft"))  # fmt: skip
        self.sample = sample
        self.k_d, self.cycles, self.verifier = k_d, cycles, verifier
        # the intermediary's verifier: its own stream, not the target verifier's
        self.generator = torch.Generator().manual_seed(derive(seed, "verify"))
        self.inner_drafted = self.inner_accepted = 0

    @property
    def depth(self) -> int:
        """The most tokens one proposal can hold: every cycle's drafts plus its bonus."""
        return self.cycles * (self.k_d + 1)

    def propose(self, context: list[int], k: int) -> Draft:
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for _ in range(self.cycles):
            if len(tokens) >= k:
                break
            budget = min(self.k_d, k - len(tokens) - 1)  # room for the cycle's own last token
            draft = self.draft.propose([*context, *tokens], budget) if budget > 0 else None
            drafted = draft.tokens[:budget] if draft else []
            mid = self.mid.rows([*context, *tokens], drafted)  # (len(drafted) + 1, V)
            q = draft.q[: len(drafted)] if draft else torch.zeros(0, mid.shape[-1])
            if self.sample:
                n_acc, nxt = self.verifier(mid, drafted, q, self.generator)
            else:
                n_acc, nxt = verify_greedy(mid, drafted)
            tokens += [*drafted[:n_acc], nxt]
            rows += [mid[i] for i in range(n_acc + 1)]
            self.inner_drafted += len(drafted)
            self.inner_accepted += n_acc
        return Draft(tokens[:k], torch.stack(rows[:k]) if rows else None, 0, 0)
