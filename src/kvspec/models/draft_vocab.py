"""A draft's reduced vocabulary: its readout covers only the N most frequent tokens of its
target's outputs (FR-Spec; EAGLE-3 keeps 32k of 128k), so a drafted position costs an
N-row output layer instead of the full one.

The head still answers in the target's vocabulary: `ReducedHead.forward` returns full-width
logits whose entries outside the subset are the dtype's lowest value, so a drafter's argmax
never leaves the subset and its sampling law q is exactly zero outside it (softmax underflows
to 0). Verification runs on the target over the full vocabulary, so greedy speculative
decoding stays exact and the standard verifier keeps the target's law (q = 0 where the
target may still put mass only lowers acceptance). Training reads the N logits directly
(`ReducedHead.reduced`). A saved model records N in its config (`draft_vocab_size`) and the
subset in the head's `ids` buffer; `kvspec.models.load` rebuilds the head from both.

Document 002's neural heads (MoA, EAGLE, Independent) read out through the target's own
output layer: they train over its rows of the N tokens (`kvspec.neural.target_states.Readout`)
and draft through a `frozen_readout` of the same rows (`kvspec.neural.heads` saves the ids
with the head).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import nn

CONFIG_KEY = "draft_vocab_size"


def frequency_order(documents: Iterable[Sequence[int]], vocab_size: int) -> list[int]:
    """Every token id of the vocabulary, the most frequent in `documents` first (ties: lower
    id first), then the unseen ones by id (a byte-level BPE numbers its earliest, most
    frequent merges first)."""
    counts: Counter[int] = Counter()
    for doc in documents:
        counts.update(int(t) for t in doc)
    seen = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return seen + [t for t in range(vocab_size) if t not in counts]


def top_tokens(
    order: Sequence[int], size: int, vocab_size: int, always: Sequence[int] = ()
) -> list[int]:
    """The first `size` tokens of `order` (a `frequency_order`), `always` (the stop tokens)
    included whatever their rank. Sorted by id."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"a draft vocabulary of {size} tokens does not fit in {vocab_size}")
    chosen = {int(t) for t in always}
    if len(chosen) > size:
        raise ValueError(f"{len(chosen)} stop tokens do not fit in a vocabulary of {size}")
    for token in order:
        if len(chosen) == size:
            break
        chosen.add(int(token))
    return sorted(chosen)


def frequent_tokens(
    documents: Iterable[Sequence[int]], size: int, vocab_size: int, always: Sequence[int] = ()
) -> list[int]:
    """The `size` most frequent token ids of `documents` (ties: lower id first), `always`
    (the stop tokens) included whatever their count; filled, when fewer distinct tokens
    occur, with the lowest unused ids. Sorted by id."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"a draft vocabulary of {size} tokens does not fit in {vocab_size}")
    return top_tokens(frequency_order(documents, vocab_size), size, vocab_size, always)


def vocabulary_of(model: nn.Module, order: Sequence[int], size: int | None) -> list[int] | None:
    """The `size` first tokens of `order` with `model`'s stop tokens; None (the full
    vocabulary) for `size` None or at least the vocabulary."""
    vocab_size = model.config.vocab_size
    if size is None or size >= vocab_size:
        return None
    from kvspec.decoding.loop import stop_set

    stops = sorted(stop_set(model.generation_config.eos_token_id))
    return top_tokens(order, size, vocab_size, stops)


class ReducedHead(nn.Module):
    """An output layer over `ids` (N of the `vocab_size` tokens) answering in full width."""

    def __init__(self, ids: Sequence[int] | torch.Tensor, hidden: int, vocab_size: int) -> None:
        super().__init__()
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.ndim != 1 or len(ids) == 0 or int(ids.max()) >= vocab_size or int(ids.min()) < 0:
            raise ValueError(f"draft vocabulary ids must be a subset of 0..{vocab_size - 1}")
        self.vocab_size = vocab_size
        self.weight = nn.Parameter(torch.zeros(len(ids), hidden))
        self.register_buffer("ids", ids)

    def reduced(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., N) logits over the subset."""
        return nn.functional.linear(hidden, self.weight)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., vocab_size) logits: the subset's, the dtype's lowest value elsewhere."""
        small = self.reduced(hidden)
        full = small.new_full((*small.shape[:-1], self.vocab_size), torch.finfo(small.dtype).min)
        return full.index_copy_(-1, self.ids, small)

    def to_draft(self) -> torch.Tensor:
        """(vocab_size,) each token's index in the subset, -1 outside it."""
        index = torch.full((self.vocab_size,), -1, dtype=torch.long, device=self.ids.device)
        return index.index_copy_(0, self.ids, torch.arange(len(self.ids), device=self.ids.device))


def attach_reduced_head(model: nn.Module, ids: Sequence[int] | torch.Tensor) -> ReducedHead:
    """Replace `model`'s output layer by a `ReducedHead` over `ids`, initialised with the
    old layer's rows for those tokens; untie it from the input embedding; record N in the
    config. Returns the head."""
    head = subset_of(model.get_output_embeddings(), ids)
    model.config.tie_word_embeddings = False
    if hasattr(model.config, "get_text_config"):
        model.config.get_text_config().tie_word_embeddings = False
    model.set_output_embeddings(head)
    setattr(model.config, CONFIG_KEY, len(head.ids))
    return head


def subset_of(layer: nn.Module, ids: Sequence[int] | torch.Tensor) -> ReducedHead:
    """A `ReducedHead` over `ids` whose rows are a copy of output layer `layer`'s rows."""
    vocab_size, hidden = layer.weight.shape
    head = ReducedHead(ids, hidden, vocab_size).to(layer.weight.device, layer.weight.dtype)
    with torch.no_grad():
        head.weight.copy_(layer.weight[head.ids])
    return head


def frozen_readout(target: nn.Module, ids: Sequence[int] | torch.Tensor) -> ReducedHead:
    """A drafting head's readout: `target`'s output rows of `ids`, frozen (not trained)."""
    return subset_of(target.get_output_embeddings(), ids).requires_grad_(False)


def readout_of(head: nn.Module, target: nn.Module) -> nn.Module:
    """The layer a neural head drafts through: its `readout` (a `frozen_readout`) if it has
    one, else `target`'s full output layer."""
    readout = getattr(head, "readout", None)
    return readout if readout is not None else target.get_output_embeddings()


def reduced_head(model: nn.Module) -> ReducedHead | None:
    """`model`'s output layer if it is a reduced one."""
    head = model.get_output_embeddings()
    return head if isinstance(head, ReducedHead) else None


def readout_logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """(..., N) logits over `model`'s readout: its reduced head's N tokens, else the whole
    vocabulary."""
    head = reduced_head(model)
    return head.reduced(hidden) if head else model.get_output_embeddings()(hidden)
