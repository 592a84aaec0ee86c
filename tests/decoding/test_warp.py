"""The shared sampling warp (temperature, top-p) and classical sampling."""

import pytest
import torch

from kvspec.decoding import warp as warp_module
from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.warp import draw, sample_generate, sample_rows, warp
from tests.tiny import tiny_llama


def sorted_warp(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Top-p by a stable sort of the whole row: what `warp` computed before its partial sort."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    keep_sorted = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(-1, keepdim=True)


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


@pytest.mark.parametrize("head", [1, 3, 256])
def test_partial_sort_equals_the_full_sort_bit_for_bit(head: int, monkeypatch) -> None:
    """Random rows, rows with many ties (the nucleus's edge inside a tie: index order decides),
    flat rows (the head must grow to the whole row), peaked rows, a batch, SmolLM2's width."""
    monkeypatch.setattr(warp_module, "HEAD", head)
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(3, 50, generator=gen) * 3,
            torch.randint(0, 4, (4, 40), generator=gen).float(),  # ties everywhere
            torch.zeros(2, 30),  # one tie: top-p keeps the first ceil(p * 30) by index
            torch.randn(2, 49152, generator=gen) * 4,
            torch.randn(1, 49152, generator=gen) * 0.01]  # fmt: skip
    cuts = 0
    for logits in rows:
        for temperature in (0.3, 0.7, 1.0, 2.5):
            for top_p in (1e-9, 0.1, 0.5, 0.9, 0.95, 0.999):
                reference = sorted_warp(logits, temperature, top_p)
                assert torch.equal(warp(logits, temperature, top_p), reference), top_p
                row = sorted_warp(logits[0], temperature, top_p)
                assert torch.equal(warp(logits[0], temperature, top_p), row)
                cuts += int(((reference > 0).sum(-1) < logits.shape[-1]).any())
    assert cuts > 80  # most settings cut the row somewhere
    flat = warp(torch.zeros(30), 1.0, 0.5)
    assert flat[:15].tolist() == [1 / 15] * 15 and not flat[15:].any()
    with pytest.raises(ValueError, match="NaN"):
        warp(torch.tensor([0.0, float("nan"), 1.0]), 1.0, 0.5)


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


def test_draw_follows_the_weights_and_never_draws_a_zero() -> None:
    """`draw` (every sampler's draw): counts of 40,000 draws against p by chi-square, the same
    law whether or not p sums to 1; a zero weight is never drawn; bad weights are refused."""
    from scipy.stats import chisquare

    p = torch.tensor([0.0, 0.5, 0.0, 0.2, 0.25, 0.05, 0.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(7)
    for scale in (1.0, 3.0):
        counts = torch.zeros(len(p))
        for _ in range(20_000):
            counts[draw(p * scale, gen)] += 1
        assert counts[p == 0].sum() == 0
        support = p > 0
        assert chisquare(counts[support].numpy(), (p[support] * 20_000).numpy()).pvalue > 1e-3
    wrong = torch.tensor([0.5, 0.2, 0.2, 0.1], dtype=torch.float64)  # a law it must not follow
    counts = torch.zeros(4)
    for _ in range(20_000):
        counts[draw(torch.tensor([0.25, 0.25, 0.25, 0.25]), gen)] += 1
    assert chisquare(counts.numpy(), (wrong * 20_000).numpy()).pvalue < 1e-6
    for bad in ([0.0, 0.0], [0.5, float("nan")], [1.0, -0.1], [float("inf"), 1.0]):
        with pytest.raises(ValueError, match="draw: weights"):
            draw(torch.tensor(bad, dtype=torch.float64), gen)


def test_draw_is_seeded() -> None:
    p = torch.softmax(torch.randn(49_152, generator=torch.Generator().manual_seed(0)), -1)
    a = [draw(p, torch.Generator().manual_seed(3)) for _ in range(3)]
    gen = torch.Generator().manual_seed(3)
    assert a[0] == a[1] == a[2] and draw(p, gen) == a[0]
    assert len({draw(p, gen) for _ in range(20)}) > 1
