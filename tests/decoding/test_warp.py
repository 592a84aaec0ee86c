"""The shared sampling warp (temperature, top-p) and classical sampling."""

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.warp import sample_generate, sample_rows, warp
from tests.tiny import tiny_llama


def test_warp_is_softmax_without_top_p() -> None:
    logits = torch.randn(3, 7)
    torch.testing.assert_close(warp(logits, 0.5), torch.softmax(logits.double() / 0.5, -1))


def test_top_p_keeps_the_smallest_head_reaching_p() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert warp(logits, 1.0, 0.5).tolist() == [1.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(warp(logits, 1.0, 0.8), torch.tensor([5 / 8, 3 / 8, 0, 0]).double())
    torch.testing.assert_close(warp(logits, 1.0, 0.81)[2], torch.tensor(0.15 / 0.95).double())
    with pytest.raises(ValueError):
        warp(logits, 0.0)
    with pytest.raises(ValueError):
        warp(logits, 1.0, 0.0)


def test_classical_sampling_is_seeded_and_greedy_at_tiny_top_p() -> None:
    model = tiny_llama(0)
    a, _ = sample_generate(model, [1, 2, 3], 8, temperature=1.0, seed=5)
    b, _ = sample_generate(model, [1, 2, 3], 8, temperature=1.0, seed=5)
    assert a == b and len(a) == 8
    greedy, _ = sample_generate(model, [1, 2, 3], 8, top_p=1e-9)
    assert greedy == greedy_generate(model, [1, 2, 3], 8)
    stopped, _ = sample_generate(model, [1, 2, 3], 8, top_p=1e-9, eos_token_id=[greedy[2]])
    assert stopped == greedy[:3]


def test_batched_rows_are_the_single_row_samples_of_their_seeds() -> None:
    model = tiny_llama(0)
    seeds = [5, 11, 12, 40]
    alone = [sample_generate(model, [1, 2, 3], 12, temperature=1.3, top_p=0.9, seed=s)[0]
             for s in seeds]  # fmt: skip
    rows = sample_rows(model, [1, 2, 3], seeds, 12, temperature=1.3, top_p=0.9)
    assert rows == alone and len({tuple(r) for r in rows}) > 1
    # a stop ends its own row only; the others keep decoding in a smaller batch
    stop = alone[1][4]
    stopped = sample_rows(model, [1, 2, 3], seeds, 12, temperature=1.3, top_p=0.9,
                          eos_token_id=[stop])  # fmt: skip
    expected = [sample_generate(model, [1, 2, 3], 12, temperature=1.3, top_p=0.9, seed=s,
                                eos_token_id=[stop])[0] for s in seeds]  # fmt: skip
    assert stopped == expected and len(stopped[1]) == 5
    assert any(len(r) == 12 for r in stopped)
