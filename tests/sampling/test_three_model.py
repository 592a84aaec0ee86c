"""Three-model speculative sampling: greedy equals greedy decoding; sampling follows the warped
target law exactly, and the document's printed resampling does not."""

import numpy as np
import torch
from scipy.stats import chisquare

from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.verify import verify_resample_model
from kvspec.decoding.warp import warp
from kvspec.sampling.three_model import CachedScorer, SpeculativeDrafter
from kvspec.seeds import derive
from tests.tiny import tiny_llama


def _sharp(seed: int, vocab: int, scale: float):
    model = tiny_llama(seed, vocab=vocab, hidden=16, intermediate=32, layers=1)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def test_cached_scorer_equals_a_fresh_forward() -> None:
    model = tiny_llama(0)
    scorer = CachedScorer(model, temperature=0.7, top_p=0.9)
    for context, tokens in (([1, 2, 3], [4, 5]), ([1, 2, 3, 4], [9]), ([7, 8], [1, 2, 3])):
        got = scorer.rows(context, tokens)
        logits = model(torch.tensor([context + tokens])).logits[0, len(context) - 1 :]
        torch.testing.assert_close(got, warp(logits, 0.7, 0.9))


def test_greedy_three_model_equals_greedy_decoding() -> None:
    target, mid, draft = tiny_llama(0, vocab=32), tiny_llama(1, vocab=32), tiny_llama(2, vocab=32)
    for prompt in ([1, 2, 3], [5, 9, 2, 7, 7]):
        drafter = SpeculativeDrafter(mid, draft, k_d=3, cycles=2, sample=False)
        tokens, steps = speculative_generate(target, prompt, drafter, 20, k=drafter.depth)
        assert tokens == greedy_generate(target, prompt, 20)
        assert max(s.drafted for s in steps) <= drafter.depth


def _counts(target, mid, draft, prompt, draws: int, vocab: int, verifier=None) -> np.ndarray:
    counts = np.zeros((vocab, vocab), dtype=np.int64)
    for seed in range(draws):
        kw = {"verifier": verifier} if verifier else {}
        drafter = SpeculativeDrafter(mid, draft, k_d=2, cycles=2, temperature=0.8, top_p=0.9,
                                     seed=derive(seed, "three_model"), **kw)  # fmt: skip
        tokens, _ = speculative_generate(target, prompt, drafter, 3, k=drafter.depth,
                                         mode="sample", temperature=0.8, top_p=0.9,
                                         seed=derive(seed, "verify"), **kw)  # fmt: skip
        counts[tokens[0], tokens[1]] += 1
    return counts


@torch.inference_mode()
def _law(model, prompt: list[int], vocab: int) -> np.ndarray:
    first = warp(model(torch.tensor([prompt])).logits[0, -1], 0.8, 0.9)  # (V,)
    ids = torch.tensor([prompt + [a] for a in range(vocab)])
    second = warp(model(ids).logits[:, -1], 0.8, 0.9)  # (V, V)
    return (first[:, None] * second).numpy().ravel()


def test_three_model_sampling_follows_the_warped_target_and_printed_variant_fails() -> None:
    vocab, draws, prompt = 5, 1500, [1, 3, 2]
    target, mid, draft = _sharp(3, vocab, 8.0), _sharp(4, vocab, 6.0), _sharp(5, vocab, 6.0)
    law = _law(target, prompt, vocab)
    keep = law > 1e-12

    def pvalue(counts: np.ndarray) -> float:
        if counts.ravel()[~keep].sum():
            return 0.0
        return chisquare(counts.ravel()[keep], law[keep] / law[keep].sum() * draws).pvalue

    assert pvalue(_counts(target, mid, draft, prompt, draws, vocab)) > 1e-3
    printed = _counts(target, mid, draft, prompt, draws, vocab, verify_resample_model)
    assert pvalue(printed) < 1e-6
