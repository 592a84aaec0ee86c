"""The speculative loop: greedy output equals plain greedy decoding for every drafter."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM

from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.drafts import Draft, one_hot
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.ngram.adaptive import AdaptiveDrafter
from kvspec.ngram.drafters import InfiniGramDrafter, PromptLookupDrafter
from kvspec.ngram.index import build_index, open_engine

from ..tiny import tiny_llama

VOCAB = 256
EOS = 255
NEW_TOKENS = 24


def _tiny_llama(seed: int) -> LlamaForCausalLM:
    return tiny_llama(seed, vocab=VOCAB, hidden=64, intermediate=128)


@pytest.fixture(scope="module")
def target() -> LlamaForCausalLM:
    return _tiny_llama(0)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, EOS, rng.integers(1, 12)).tolist() for _ in range(12)]


@pytest.fixture(scope="module")
def expected(target, prompts) -> list[list[int]]:
    return [greedy_generate(target, p, NEW_TOKENS) for p in prompts]


@pytest.fixture(scope="module")
def infgram(tmp_path_factory, target, prompts, expected) -> InfiniGramDrafter:
    """Index of the target's own outputs on half the prompts plus random noise documents."""
    rng = np.random.default_rng(1)
    docs = [p + out for p, out in zip(prompts[::2], expected[::2], strict=True)]
    docs += [rng.integers(0, EOS, 30).tolist() for _ in range(20)]
    path = tmp_path_factory.mktemp("ngram") / "idx"
    build_index(docs, path, vocab_size=VOCAB, eos_token_id=EOS)
    return InfiniGramDrafter(open_engine(path, VOCAB, EOS))


def _drafter(name: str, infgram: InfiniGramDrafter, target: LlamaForCausalLM):
    if name == "infini-gram":
        return infgram
    if name == "prompt-lookup":
        return PromptLookupDrafter(max_ngram=3)
    if name == "draft-model":
        return DraftModelDrafter(_tiny_llama(1))
    if name == "adaptive-hybrid":
        return AdaptiveDrafter({"local": PromptLookupDrafter(), "index": infgram}, threshold=0.2)
    return DraftModelDrafter(target)  # the target drafting for itself: everything accepted


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest single-threaded, and the machine is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("name", "k", "n_prompts"),
    [
        ("infini-gram", 4, 12),
        ("infini-gram", 1, 12),
        ("prompt-lookup", 4, 12),
        ("draft-model", 4, 12),
        ("adaptive-hybrid", 8, 12),
        ("self", 4, 4),
    ],
)
def test_greedy_speculation_equals_greedy_decoding(
    name, k, n_prompts, target, prompts, expected, infgram
):
    drafter = _drafter(name, infgram, target)
    accepted = drafted = 0
    for prompt, want in zip(prompts[:n_prompts], expected[:n_prompts], strict=True):
        tokens, steps = speculative_generate(target, prompt, drafter, NEW_TOKENS, k)
        assert tokens == want
        accepted += sum(s.accepted for s in steps)
        drafted += sum(s.drafted for s in steps)
    if name == "self":
        assert accepted == drafted > 0
    elif name == "infini-gram":
        assert 0 < accepted < drafted


def test_cache_holds_accepted_prefix_after_every_step(target, prompts, infgram):
    rejections = 0
    for prompt in prompts:
        tokens, steps = speculative_generate(target, prompt, infgram, NEW_TOKENS, k=4)
        committed = len(prompt)
        for step in steps:
            committed += step.accepted + 1
            assert step.cache_len == committed - 1  # everything but the newest token
            rejections += step.accepted < step.drafted
        assert committed == len(prompt) + len(tokens)
    assert rejections > 0


def test_drafts_never_overshoot_the_budget(target, prompts, infgram):
    for budget in (1, 2, 5):
        tokens, steps = speculative_generate(target, prompts[0], infgram, budget, k=8)
        assert len(tokens) == budget
        assert sum(s.accepted + 1 for s in steps) == budget


def test_stops_after_eos(target, prompts, expected):
    eos = expected[0][5]
    tokens, _ = speculative_generate(
        target, prompts[0], PromptLookupDrafter(), NEW_TOKENS, k=4, eos_token_id=eos
    )
    assert tokens == expected[0][: expected[0].index(eos) + 1]
    assert greedy_generate(target, prompts[0], NEW_TOKENS, eos_token_id=eos) == tokens


def test_sampling_is_seeded_and_exact_for_a_self_draft(target, prompts):
    run = [
        speculative_generate(
            target,
            prompts[1],
            DraftModelDrafter(target, sample=True, temperature=0.7, seed=0),
            16,
            k=4,
            mode="sample",
            temperature=0.7,
        )
        for _ in range(2)
    ]
    assert run[0][0] == run[1][0] and len(run[0][0]) == 16
    assert all(s.accepted == s.drafted for s in run[0][1])  # p == q: always accepted


def test_sampling_with_a_deterministic_drafter(target, prompts, infgram):
    tokens, steps = speculative_generate(
        target, prompts[2], infgram, 16, k=4, mode="sample", seed=3
    )
    assert len(tokens) == 16 and all(0 <= t < VOCAB for t in tokens)
    assert all(s.draft_seconds >= 0 and s.verify_seconds > 0 for s in steps)


def test_bad_mode_is_rejected(target, infgram):
    with pytest.raises(ValueError, match="mode"):
        speculative_generate(target, [1, 2], infgram, 4, k=2, mode="beam")


# ------------------------------------------- speculative sampling end to end: exact law


class PeakedDrafter:
    """Samples draft token i from a fixed, peaked law of its own (one per draft position),
    far from the target's, and reports it as q."""

    def __init__(self, vocab: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.laws = torch.softmax(3 * torch.randn(4, vocab, generator=gen, dtype=torch.float64), -1)
        self.gen = gen

    def propose(self, context: list[int], k: int) -> Draft:
        tokens = [int(torch.multinomial(self.laws[i], 1, generator=self.gen)) for i in range(k)]
        return Draft(tokens, self.laws[:k].clone(), 0, 0)


def _sharp_tiny(vocab: int) -> LlamaForCausalLM:
    model = tiny_llama(3, vocab=vocab, hidden=16, intermediate=32, layers=1)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked, context-dependent next-token laws
    return model


def _first_two_counts(model, prompt: list[int], draws: int, vocab: int) -> np.ndarray:
    drafter = PeakedDrafter(vocab, seed=1)
    counts = np.zeros((vocab, vocab), dtype=np.int64)
    for seed in range(draws):
        tokens, _ = speculative_generate(model, prompt, drafter, 3, k=2, mode="sample", seed=seed)
        counts[tokens[0], tokens[1]] += 1
    return counts


@torch.inference_mode()
def _exact_first_two(model, prompt: list[int], vocab: int) -> np.ndarray:
    """(V, V) exact law of the first two sampled tokens: p(a | prompt) p(b | prompt, a)."""
    first = torch.softmax(model(torch.tensor([prompt])).logits[0, -1], -1)  # (V,)
    ids = torch.tensor([prompt + [a] for a in range(vocab)])  # (V, P+1)
    second = torch.softmax(model(ids).logits[:, -1], -1)  # (V, V)
    return (first[:, None] * second).numpy()


def test_speculative_sampling_matches_plain_sampling_and_broken_verifiers_fail(monkeypatch):
    from scipy.stats import chisquare

    from kvspec.decoding import loop as decode

    from .test_verify import _broken

    vocab, draws, prompt = 5, 2500, [1, 3, 2]
    model = _sharp_tiny(vocab)
    law = _exact_first_two(model, prompt, vocab).ravel()
    keep = law > 1e-12  # cells with any mass (chi-square needs positive expectations)
    expected = law[keep] / law[keep].sum() * draws

    def pvalue(counts: np.ndarray) -> float:
        if counts.ravel()[~keep].sum():  # a draw where the law has no mass: not the law
            return 0.0
        return chisquare(counts.ravel()[keep], expected).pvalue

    assert pvalue(_first_two_counts(model, prompt, draws, vocab)) > 0.001
    for bug in ("draft_row", "target_row"):
        monkeypatch.setattr(decode, "verify_sampling", _broken(bug))
        assert pvalue(_first_two_counts(model, prompt, draws, vocab)) < 1e-6, bug


def test_batches_are_refused(target):
    with pytest.raises(ValueError, match="batch size 1"):
        speculative_generate(
            target, torch.ones(2, 3, dtype=torch.long), PromptLookupDrafter(), 4, 2
        )
    tokens, _ = speculative_generate(target, torch.tensor([[1, 2, 3]]), PromptLookupDrafter(), 4, 2)
    assert len(tokens) == 4


class Scripted:
    """Drafts a fixed continuation (the target's own greedy output: always accepted)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def propose(self, context: list[int], k: int) -> Draft:
        return Draft(self.tokens[:k], one_hot(self.tokens[:k]), 0, 0)


def test_drafts_after_an_accepted_eos_are_not_counted(target, prompts, expected):
    want = expected[0]
    eos = want[2]  # the third greedy token ends generation
    tokens, steps = speculative_generate(
        target, prompts[0], Scripted(want), NEW_TOKENS, k=6, eos_token_id=eos
    )
    assert tokens == want[: want.index(eos) + 1]
    assert len(steps) == 1
    assert (steps[0].drafted, steps[0].accepted) == (len(tokens), len(tokens))
