"""The shared sampling warp (temperature, top-p) and classical sampling."""

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.warp import sample_generate, warp
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
