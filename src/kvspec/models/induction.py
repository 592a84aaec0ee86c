"""Where a model copies from its context: the previous-token and induction heads of each
decoder layer (Olsson et al., 2022, "In-context learning and induction heads"), to choose the
layers a draft made from its target keeps (`models.<name>.distil.layers`, docs/drafts.md).

On `batch` sequences of `n` random token ids repeated twice, a previous-token head at position
i attends to i − 1, and an induction head, in the repeat, attends to the position just after
the token's first occurrence (i − n + 1): together they copy what followed the token before.
A layer's score is its best head's mean attention weight on those positions (1: every query
puts all its weight there). Run on a saved model: ``python -m kvspec.models.induction DIR``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class LayerScores:
    """One decoder layer's best previous-token and best induction head (index, score)."""

    layer: int
    previous: float
    previous_head: int
    induction: float
    induction_head: int


def scores_of(attentions: Sequence[torch.Tensor], n: int, start: int = 1) -> list[LayerScores]:
    """Scores per layer from attention maps (B, H, T, T) of sequences made of `start` leading
    tokens, then n tokens, then the same n tokens again (T = start + 2n)."""
    out = []
    for layer, a in enumerate(attentions):
        t = a.shape[-1]
        if t != start + 2 * n:
            raise ValueError(f"attention over {t} positions, expected {start} + 2 x {n}")
        q = torch.arange(start + 1, t)  # every position with a previous one in the sequence
        previous = a[:, :, q, q - 1].float().mean(dim=(0, 2))  # (H,)
        rep = torch.arange(start + n, t)  # the repeat: the first occurrence is n back
        induction = a[:, :, rep, rep - n + 1].float().mean(dim=(0, 2))  # (H,)
        out.append(LayerScores(layer, float(previous.max()), int(previous.argmax()),
                               float(induction.max()), int(induction.argmax())))  # fmt: skip
    return out


@torch.no_grad()
def head_scores(model: nn.Module, *, n: int = 40, batch: int = 8, seed: int = 0,
                ids: tuple[int, int] | None = None) -> list[LayerScores]:  # fmt: skip
    """`scores_of` the model's own attention on random repeated sequences (ids drawn from
    `ids` = [low, high); default the vocabulary's middle four fifths, away from special and
    byte tokens), after its BOS token when it has one; eager attention for the run only."""
    vocab = int(model.config.vocab_size)
    low, high = ids or (vocab // 10, vocab * 9 // 10)
    if not 0 <= low < high <= vocab:
        raise ValueError(f"token ids [{low}, {high}) must lie in the vocabulary of {vocab}")
    gen = torch.Generator().manual_seed(seed)
    rand = torch.randint(low, high, (batch, n), generator=gen)
    bos = getattr(model.config, "bos_token_id", None)
    lead = torch.full((batch, 1), int(bos)) if bos is not None else rand[:, :0]
    tokens = torch.cat([lead, rand, rand], dim=1).to(next(model.parameters()).device)
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")  # the fused kernels return no attention weights
    try:
        out = model(input_ids=tokens, output_attentions=True)
    finally:
        model.set_attn_implementation(before)
    return scores_of(out.attentions, n, start=lead.shape[1])


def main(argv: Sequence[str]) -> None:
    """Print the scores of the model saved in argv[0] (read by `kvspec.models.load`)."""
    from kvspec.models.load import load_model

    if len(argv) != 1:
        raise SystemExit("usage: python -m kvspec.models.induction MODEL_DIR")
    model, _ = load_model(argv[0])
    print("layer  previous-token (head)  induction (head)")
    for s in head_scores(model):
        print(f"{s.layer:5d}  {s.previous:14.2f} ({s.previous_head})  "
              f"{s.induction:9.2f} ({s.induction_head})")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
