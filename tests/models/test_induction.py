"""Previous-token and induction head scores (kvspec.models.induction)."""

from __future__ import annotations

import pytest
import torch

from kvspec.models.induction import head_scores, scores_of

from ..tiny import tiny_llama


def _causal_uniform(t: int) -> torch.Tensor:
    """(T, T): each query spreads its weight evenly over itself and every earlier position."""
    a = torch.ones(t, t).tril()
    return a / a.sum(-1, keepdim=True)


def _maps(n: int, start: int) -> list[torch.Tensor]:
    """Two layers of (B=2, H=3) maps: layer 0 head 1 attends to the previous position, layer 1
    head 2 to the position after the earlier occurrence in the repeat; the rest uniform."""
    t = start + 2 * n
    layers = [_causal_uniform(t).repeat(2, 3, 1, 1) for _ in range(2)]
    prev = torch.zeros(t, t)
    prev[0, 0] = 1.0
    prev[torch.arange(1, t), torch.arange(0, t - 1)] = 1.0
    layers[0][:, 1] = prev
    ind = _causal_uniform(t)
    rep = torch.arange(start + n, t)
    ind[rep] = 0.0
    ind[rep, rep - n + 1] = 1.0
    layers[1][:, 2] = ind
    return layers


@pytest.mark.parametrize("start", [0, 1])
def test_scores_find_the_planted_heads(start: int) -> None:
    n = 6
    first, second = scores_of(_maps(n, start), n, start=start)
    assert (first.layer, first.previous_head, second.layer, second.induction_head) == (0, 1, 1, 2)
    assert first.previous == pytest.approx(1.0) and second.induction == pytest.approx(1.0)
    # uniform heads spread their weight: far below a planted head
    assert first.induction < 0.3 and second.previous < 0.3


def test_scores_refuse_maps_of_another_length() -> None:
    with pytest.raises(ValueError, match="expected 1 \\+ 2 x 5"):
        scores_of(_maps(6, 1), 5, start=1)


def test_head_scores_run_the_model_and_restore_its_attention() -> None:
    model = tiny_llama(0, vocab=200, layers=3)
    before = model.config._attn_implementation
    scores = head_scores(model, n=12, batch=3, seed=5)
    assert [s.layer for s in scores] == [0, 1, 2]
    assert all(0.0 <= s.previous <= 1.0 and 0.0 <= s.induction <= 1.0 for s in scores)
    assert all(0 <= s.previous_head < 4 and 0 <= s.induction_head < 4 for s in scores)
    assert model.config._attn_implementation == before
    assert head_scores(model, n=12, batch=3, seed=5) == scores  # seeded
    assert head_scores(model, n=12, batch=3, seed=6) != scores


def test_head_scores_reject_ids_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="vocabulary of 200"):
        head_scores(tiny_llama(0, vocab=200), n=12, ids=(150, 260))
