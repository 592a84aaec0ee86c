"""The draft-model drafter's confidence cut-off: where a draft ends and what it proposes."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.draft_model import DraftModelDrafter

from ..tiny import tiny_llama

VOCAB = 32


@pytest.fixture(scope="module")
def draft() -> torch.nn.Module:
    return tiny_llama(2, vocab=VOCAB, hidden=32, intermediate=64)


@pytest.mark.parametrize("context", [[1, 2, 3], [7, 7, 30, 4, 9], [5]])
def test_a_draft_ends_after_its_first_token_below_the_cut_off(draft, context) -> None:
    full = DraftModelDrafter(draft, report_confidence=True).propose(context, 6)
    conf = full.confidence or []
    assert len(full.tokens) == 6 and len(conf) == 6
    for cut in (0.05, 0.1, 0.2, 0.5, 0.99):
        short = DraftModelDrafter(draft, stop_below=cut).propose(context, 6)
        end = next((i + 1 for i, c in enumerate(conf) if c < cut), 6)  # the unsure token stays
        assert short.tokens == full.tokens[:end], cut
        assert short.q.shape == (end, VOCAB)  # one proposal row per drafted token


def test_the_cut_off_decides_after_every_token_of_a_call(draft) -> None:
    """A reused cache (the next call's context extends the last draft) gives the same draft."""
    drafter = DraftModelDrafter(draft, stop_below=0.1)
    first = drafter.propose([3, 1, 4], 5)
    again = drafter.propose([3, 1, 4, *first.tokens], 5)
    fresh = DraftModelDrafter(draft, stop_below=0.1).propose([3, 1, 4, *first.tokens], 5)
    assert again.tokens == fresh.tokens


def test_a_sampled_draft_stops_on_the_probability_it_drew_from() -> None:
    sharp = tiny_llama(2, vocab=VOCAB, hidden=32, intermediate=64)
    with torch.no_grad():
        sharp.lm_head.weight.mul_(30.0)  # peaked laws, so some drafts run on
    drafter = DraftModelDrafter(sharp, sample=True, seed=4, stop_below=0.2)
    lengths = []
    for context in ([1, 2], [9, 9, 9], [20, 3, 11, 6], [4, 4], [8], [5, 6, 7], [30, 31]):
        out = drafter.propose(context, 6)
        probs = [float(out.q[i, t]) for i, t in enumerate(out.tokens)]
        assert all(p >= 0.2 for p in probs[:-1]) and (len(probs) == 6 or probs[-1] < 0.2)
        lengths.append(len(probs))
    assert min(lengths) < 3 < max(lengths)


@pytest.mark.parametrize("cut", [-0.1, 1.0, 2.0])
def test_a_cut_off_outside_zero_one_is_refused(draft, cut) -> None:
    with pytest.raises(ValueError, match="stop_below"):
        DraftModelDrafter(draft, stop_below=cut)
