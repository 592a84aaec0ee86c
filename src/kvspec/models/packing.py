"""Training batches of whole sequences with little padding: a batch's sequences packed
first-fit-decreasing into rows as wide as its longest one, each sequence at positions 0, 1, …
of its own and seeing only its own earlier tokens (a block-diagonal causal mask; sliding
windows kept, `kvspec.decoding.tree.model_mask`).

Random batches of chat sequences are mostly padding when each sequence takes a row of its
own: the distillation batches of the mini drafts (8 sequences of 57–184 tokens at the
10th–90th percentile, up to 512) hold 1.86 padded slots per real token, ~1.19 packed. Every
learned position sees exactly what it sees alone in a row, so losses and gradients equal the
padded layout's up to float rounding (`tests/models/test_packing.py`). A batch whose sequences
cannot share a row keeps one per row and needs no mask (plain causal attention, as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch


class Tokens(Protocol):
    """A sequence to train on: its token ids and the first position whose next token is
    learned."""

    @property
    def ids(self) -> tuple[int, ...]: ...

    @property
    def start(self) -> int: ...


@dataclass
class Batch:
    """Rows of packed sequences; `index` picks the learned positions (each position whose
    next token is learned), sequence by sequence, out of the flattened (R·W) rows."""

    ids: torch.Tensor  # (R, W)
    index: torch.Tensor  # (N,) row * W + slot of each learned position, in sequence order
    labels: torch.Tensor  # (N,) the next token at each of them
    positions: torch.Tensor | None = None  # (R, W) position of each slot in its sequence
    segments: torch.Tensor | None = None  # (R, W) which sequence of its row a slot holds; -1 pad

    def to(self, device: torch.device | str) -> Batch:
        move = [None if t is None else t.to(device) for t in (self.positions, self.segments)]
        return Batch(self.ids.to(device), self.index.to(device), self.labels.to(device), *move)

    def inputs(self, model: torch.nn.Module) -> dict[str, Any]:
        """The keyword arguments of `model.base_model` for these rows."""
        if self.segments is None:  # one sequence per row: causal attention as it is
            return {"input_ids": self.ids}
        from kvspec.decoding.tree import model_mask, stack_masks, to_device

        dtype = next(model.parameters()).dtype
        config = getattr(model.config, "base_config", model.config)
        masks = [model_mask(config, _allowed(seg), pos.tolist(), pos.tolist(), dtype)
                 for seg, pos in zip(self.segments.cpu(), self.positions.cpu(), strict=True)]  # type: ignore[union-attr]  # fmt: skip
        return {"input_ids": self.ids, "position_ids": self.positions,
                "attention_mask": to_device(stack_masks(masks), self.ids.device)}  # fmt: skip

    def learned(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, H) the hidden states (R, W, H) of the learned positions."""
        return hidden.flatten(0, 1)[self.index]


def _allowed(segments: torch.Tensor) -> torch.Tensor:
    """(W, W) bool: a slot sees the earlier slots of its own sequence; padding sees itself."""
    same = (segments[:, None] == segments[None, :]) & (segments[:, None] >= 0)
    width = len(segments)
    return (same & torch.ones(width, width, dtype=torch.bool).tril()) | torch.eye(
        width, dtype=torch.bool
    )


def rows_of(lengths: Sequence[int]) -> list[list[int]]:
    """First-fit decreasing: the sequence indices of each row of width max(lengths)."""
    width = max(lengths)
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        row = next((r for r, free in enumerate(room) if free >= lengths[i]), None)
        if row is None:
            rows.append([])
            room.append(width)
            row = len(rows) - 1
        rows[row].append(i)
        room[row] -= lengths[i]
    return rows


def make_batch(seqs: Sequence[Tokens], pad_id: int = 0) -> Batch:
    """`seqs` packed into rows (`rows_of`); padding after each row's last sequence."""
    lengths = [len(s.ids) for s in seqs]
    rows, width = rows_of(lengths), max(lengths)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    segments = torch.full((len(rows), width), -1, dtype=torch.long)
    where: dict[int, int] = {}  # sequence -> flat offset of its first slot
    for r, row in enumerate(rows):
        at = 0
        for j, i in enumerate(row):
            n = lengths[i]
            ids[r, at : at + n] = torch.tensor(seqs[i].ids, dtype=torch.long)
            positions[r, at : at + n] = torch.arange(n)
            segments[r, at : at + n] = j
            where[i] = r * width + at
            at += n
    index = torch.cat([where[i] + torch.arange(s.start, len(s.ids) - 1)
                       for i, s in enumerate(seqs)])  # fmt: skip
    labels = ids.flatten()[index + 1]
    if len(rows) == len(seqs):  # one sequence per row: no mask needed
        return Batch(ids, index, labels)
    return Batch(ids, index, labels, positions, segments)
