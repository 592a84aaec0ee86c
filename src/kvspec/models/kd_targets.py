"""The teacher's cached top-k targets of distillation: their type, a batch's rows, their
restriction to a reduced readout, and a student's overlap with them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from kvspec.models.distil import Sequence

# (top-k ids (n, k), their log-probs (n, k), log of the mass outside them (n,)) per sequence
Targets = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def batch_targets(
    targets: Mapping[str, Targets], seqs: list[Sequence], device: torch.device | str = "cpu"
) -> Targets:
    """The cached targets of `seqs`, in sequence order like `Batch.labels`."""
    return tuple(torch.cat([targets[s.id][j] for s in seqs]).to(device) for j in range(3))  # type: ignore[return-value]


def restrict_targets(
    targets: Targets, keep: torch.Tensor, to_draft: torch.Tensor | None
) -> Targets:
    """The targets of the kept positions, their token ids as indices of a reduced readout
    (`to_draft`: (V,) index or -1; None = full vocabulary): a top-k token outside it gets
    log-prob -inf and its mass joins the rest bucket."""
    ids, logp, rest = (t[keep] for t in targets)
    if to_draft is None:
        return ids, logp, rest
    mapped = to_draft[ids]  # (n, k)
    inside = mapped >= 0
    outside_mass = torch.where(inside, torch.zeros_like(logp), logp.exp()).sum(-1)  # (n,)
    rest = torch.log(rest.exp() + outside_mass)
    return mapped.clamp(min=0), logp.masked_fill(~inside, float("-inf")), rest


def overlap(student_logp: torch.Tensor, targets: Targets) -> torch.Tensor:
    """(n,) Σ min(p_T, p_S) over the teacher's (valid) top-k tokens."""
    t_ids, t_logp, _ = targets
    return torch.minimum(t_logp.exp(), student_logp.gather(-1, t_ids).exp()).sum(-1)
