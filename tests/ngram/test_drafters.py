"""Drafters: inf_nkt equals sequential infgram_ntd, prompt lookup, draft-model caching."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM

from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.decoding.loop import greedy_generate
from kvspec.ngram.drafters import (
    InfiniGramDrafter,
    PromptLookupDrafter,
    RequestSuffixDrafter,
    greedy_token,
    ntd_counts,
    sequential_infgram_draft,
)
from kvspec.ngram.index import build_index, open_engine

from ..tiny import tiny_llama
from .sparse_vocab import build_twin, contexts


def _corpus(seed: int, vocab: int, n_docs: int, eos_suffix: int | None) -> list[list[int]]:
    """Random documents over a small vocabulary (many repeats); optionally each ends in eos."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, vocab, rng.integers(1, 40)).tolist() for _ in range(n_docs)]
    return [d + [eos_suffix] for d in docs] if eos_suffix is not None else docs


def _engine(tmp_path, docs, vocab_size, eos, max_support=1000):
    build_index(docs, tmp_path / "idx", vocab_size=vocab_size, eos_token_id=eos)
    return open_engine(tmp_path / "idx", vocab_size, eos, max_support=max_support)


@pytest.mark.parametrize(
    ("seed", "vocab", "n_docs", "max_support", "eos_ends_docs"),
    [
        (0, 4, 10, 1000, False),  # whole corpus under max_support: pure filtering
        (1, 6, 150, 1000, False),
        (2, 5, 150, 16, False),  # frequent suffixes exceed max_support: sampled steps
        (3, 3, 400, 64, True),  # every document ends with a real eos token
    ],
)
def test_inf_nkt_equals_sequential_infgram_ntd(
    tmp_path, seed, vocab, n_docs, max_support, eos_ends_docs
):
    """Where every count is exact (at most max_support matches) a draft equals sequential
    `infgram_ntd` calls; a sampled step still drafts a token the suffix is followed by."""
    eos = vocab  # never a regular token: see InfiniGramDrafter on the engine's eos quirk
    docs = _corpus(seed, vocab, n_docs, eos if eos_ends_docs else None)
    engine = _engine(tmp_path, docs, vocab + 1, eos, max_support)
    drafter = InfiniGramDrafter(engine)
    exact = InfiniGramDrafter(_engine(tmp_path / "exact", docs, vocab + 1, eos, 10**9))
    sampled = []
    spread = drafter._spread
    drafter._spread = lambda n, segments: sampled.append(n) or spread(n, segments)
    rng = np.random.default_rng(100 + seed)
    compared = 0
    for _ in range(60):
        context = rng.integers(0, vocab, rng.integers(0, 25)).tolist()
        k = int(rng.integers(1, 17))
        before = len(sampled)
        draft = drafter.propose(context, k)
        first = engine.infgram_ntd(context)
        assert draft.match_len == first["suffix_len"]
        assert draft.match_count == first["prompt_cnt"]
        assert draft.q == [{t: 1.0} for t in draft.tokens]
        if len(sampled) == before:  # no sampled step: exact counts throughout
            assert draft.tokens == sequential_infgram_draft(engine, context, k)
            assert draft.dists[0] == pytest.approx(
                {t: r["prob"] for t, r in first["result_by_token_id"].items()}
            )
            compared += 1
        else:
            assert all(n > max_support for n in sampled[before:])
            assert draft.tokens[0] in exact.distribution(context)[0]
    assert compared > 0
    if max_support < 1000:  # frequent suffixes were sampled
        assert sampled
    if n_docs == 10:  # the whole corpus fits under max_support
        assert not sampled


def test_sampled_steps_are_seeded_and_close_to_exact(tmp_path):
    docs = _corpus(2, 5, 150, None)
    engine = _engine(tmp_path, docs, 6, 5, max_support=64)
    exact = InfiniGramDrafter(_engine(tmp_path / "exact", docs, 6, 5, 10**9))
    one, two = InfiniGramDrafter(engine, seed=1), InfiniGramDrafter(engine, seed=1)
    for context in ([], [1], [2, 3]):
        dist, length, count = one.distribution(context)
        assert count > 64 and dist == two.distribution(context)[0]
        want = exact.distribution(context)[0]
        assert set(dist) <= set(want)
        assert sum(abs(dist.get(t, 0) - p) for t, p in want.items()) < 0.3  # 64 of ~1000+


def test_reused_matches_equal_fresh_lookups(tmp_path):
    """A drafter that reuses the previous context's match drafts what a fresh one drafts."""
    docs = _corpus(9, 4, 200, None)
    engine = _engine(tmp_path, docs, 5, 4, max_support=100)
    reusing = InfiniGramDrafter(engine)
    rng = np.random.default_rng(3)
    for _ in range(10):
        ctx = rng.integers(0, 4, rng.integers(1, 6)).tolist()
        for _ in range(15):
            fresh = InfiniGramDrafter(engine)
            a, b = reusing.propose(ctx, 6), fresh.propose(ctx, 6)
            assert (a.tokens, a.match_len, a.match_count, a.lengths) == (
                b.tokens, b.match_len, b.match_count, b.lengths,
            )  # fmt: skip
            accepted = int(rng.integers(0, len(a.tokens) + 1))
            ctx = ctx + a.tokens[:accepted] + [int(rng.integers(0, 4))]


def test_a_single_match_is_followed_to_its_document_end(tmp_path):
    """Once one match is left the walk copies its continuation, then the document end, as the
    column-by-column walk (sequential `infgram_ntd`) does; the next step looks up afresh."""
    docs = [[0, 1, 2, 3, 0, 2], [1, 1, 2, 0, 3, 3, 1], [2, 2, 2]]
    engine = _engine(tmp_path, docs, 5, 4)
    drafter = InfiniGramDrafter(engine)
    draft = drafter.propose([0, 1, 2], 5)  # [0, 1, 2] occurs once: 3, 0, 2, then the end
    assert draft.match_count == 1
    # the walk read off the corpus by hand (doc 0 after [0, 1, 2]: 3, 0, 2, then its end), not
    # through the engine's C++ infgram_ntd: on this three-document index that call segfaulted
    # now and then in `make test` (2026-12-01, and on 2026-12-02 inside the reference walk
    # of the first three tokens), which is also why the drafter counts from the index itself
    assert draft.tokens[:4] == [3, 0, 2, 4]
    assert draft.dists[:4] == [{3: 1.0}, {0: 1.0}, {2: 1.0}, {4: 1.0}]
    assert draft.lengths[:4] == [3, 4, 5, 6]


def test_continuations_match_engine_documents(tmp_path):
    docs = _corpus(5, 4, 40, None)
    engine = _engine(tmp_path, docs, 5, 4)
    drafter = InfiniGramDrafter(engine)
    match = drafter.longest_suffix([1, 2])
    conts = drafter.continuations(match, 6)  # (count, 6)
    lo, _ = match.segments[0]
    for i in range(match.count):
        doc = engine.get_doc_by_rank_2(s=0, rank=lo + i, needle_len=2 + 6, max_ctx_len=0)
        after = doc["token_ids"][2:]
        expected = after + [-1] * (6 - len(after))
        assert conts[i].tolist() == expected


def test_confidence_cutoff_stops_drafting(tmp_path):
    engine = _engine(tmp_path, _corpus(6, 4, 100, None), 5, 4)
    full = InfiniGramDrafter(engine)
    cut = InfiniGramDrafter(engine, confidence=0.6)
    rng = np.random.default_rng(7)
    shorter = 0
    for _ in range(40):
        context = rng.integers(0, 4, 6).tolist()
        a, b = full.propose(context, 8), cut.propose(context, 8)
        assert b.tokens == a.tokens[: len(b.tokens)]
        assert all(max(d.values()) >= 0.6 for d in b.dists)
        if len(b.tokens) < len(a.tokens):
            assert max(a.dists[len(b.tokens)].values()) < 0.6
            shorter += 1
    assert shorter > 0


def test_sampled_infgram_draft_is_seeded_and_in_support(tmp_path):
    engine = _engine(tmp_path, _corpus(8, 4, 100, None), 5, 4)
    one, two = (InfiniGramDrafter(engine, sample=True, seed=3) for _ in range(2))
    context = [0, 1, 2]
    a, b = one.propose(context, 8), two.propose(context, 8)
    assert a.tokens == b.tokens
    assert a.q == a.dists
    assert all(t in d for t, d in zip(a.tokens, a.q, strict=True))


def _model_draft(twin, draft):
    """A reference draft with its tokens and distributions in model ids."""
    dists = [twin.dist_to_model(d) for d in draft.dists]
    return twin.to_model(draft.tokens), draft.match_len, draft.match_count, dists


@pytest.mark.parametrize(
    ("eos_in_corpus", "max_support"), [(True, 1000), (False, 1000), (False, 8)]
)
def test_infgram_drafter_on_compact_vocab_equals_reference(tmp_path, eos_in_corpus, max_support):
    twin = build_twin(tmp_path, 11, eos_in_corpus, max_support)
    compact, reference = InfiniGramDrafter(twin.compact), InfiniGramDrafter(twin.reference)
    sampled = [InfiniGramDrafter(e, sample=True, seed=4) for e in (twin.compact, twin.reference)]
    rng = np.random.default_rng(12)
    drafted = set()
    for ctx in contexts(twin, 13, 60):
        ref, k = twin.to_ref(ctx), int(rng.integers(1, 17))
        draft = compact.propose(ctx, k)
        want = _model_draft(twin, reference.propose(ref, k))
        assert (draft.tokens, draft.match_len, draft.match_count) == want[:3]
        assert [list(d.items()) for d in draft.dists] == [list(d.items()) for d in want[3]]
        one = sampled[0].propose(ctx, k)
        assert one.tokens == _model_draft(twin, sampled[1].propose(ref, k))[0]
        assert one.q == one.dists
        dist, length, count = compact.distribution(ctx)
        ref_dist, ref_length, ref_count = reference.distribution(ref)
        assert (dist, length, count) == (twin.dist_to_model(ref_dist), ref_length, ref_count)
        drafted.update(draft.tokens)
    assert twin.eos in drafted  # document ends are drafted as the model's eos


def test_compact_continuations_are_model_ids(tmp_path):
    twin = build_twin(tmp_path, 14, eos_in_corpus=False)
    compact, reference = InfiniGramDrafter(twin.compact), InfiniGramDrafter(twin.reference)
    tokens, counts = np.unique(np.concatenate(twin.docs), return_counts=True)
    ctx = [int(tokens[counts.argmax()])]  # the most frequent token: many continuations
    conts = compact.continuations(compact.longest_suffix(ctx), 6)  # (count, 6)
    ref_conts = reference.continuations(reference.longest_suffix(twin.to_ref(ctx)), 6)
    mapped = np.where(ref_conts < 0, -1, twin.universe[np.maximum(ref_conts, 0)])
    assert len(conts) > 1 and np.array_equal(conts, mapped)


def test_greedy_token_tie_breaks_to_smallest_id():
    assert greedy_token({5: 2, 3: 2, 9: 1}) == 3
    assert ntd_counts({"result_by_token_id": {2: {"cont_cnt": 4, "prob": 1.0}}}) == {2: 4}


def test_prompt_lookup_copies_earliest_or_latest_match():
    context = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3]
    latest = PromptLookupDrafter(max_ngram=3, policy="latest")
    draft = latest.propose(context, 3)
    assert draft.tokens == [7, 8, 6]
    assert (draft.match_len, draft.match_count) == (3, 2)
    assert draft.q == [{7: 1.0}, {8: 1.0}, {6: 1.0}]
    assert PromptLookupDrafter(max_ngram=3).propose(context, 3).tokens == [4, 5, 9]
    assert latest.propose([4, 1, 2, 9, 2], 2).tokens == [9, 2]  # backs off to a 1-gram
    assert latest.propose([1, 2, 3], 4).tokens == []
    with pytest.raises(ValueError, match="policy"):
        PromptLookupDrafter(policy="best")


def test_prompt_lookup_equals_hugging_face_candidates():
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = np.random.default_rng(5)
    drafter = PromptLookupDrafter()
    drafted = 0
    for _ in range(200):
        ctx = rng.integers(0, 6, rng.integers(2, 30)).tolist()
        k = int(rng.integers(1, 9))
        hf = PromptLookupCandidateGenerator(num_output_tokens=k, max_length=10**6)
        ids, _ = hf.get_candidates(torch.tensor([ctx]))
        assert drafter.propose(ctx, k).tokens == ids[0, len(ctx) :].tolist()
        drafted += ids.shape[1] > len(ctx)
    assert drafted > 100


def _suffix_reference(ctx: list[int], k: int, max_match: int) -> tuple[int, list[int]]:
    """(match length, draft) by brute force: the longest suffix (<= max_match) that also ends
    at an earlier position with a continuation, then majority votes over the occurrences that
    still agree, a tie going to the continuation seen first."""
    last = len(ctx) - 1
    best = 0
    for n in range(1, min(max_match, last) + 1):
        if any(ctx[e - n + 1 : e + 1] == ctx[last - n + 1 :] for e in range(n - 1, last)):
            best = n
        else:
            break
    if not best:
        return 0, []
    tail = ctx[last - best + 1 :]
    alive = [e for e in range(best - 1, last) if ctx[e - best + 1 : e + 1] == tail]
    draft: list[int] = []
    for j in range(1, k + 1):
        extended = ctx + draft  # a continuation that reaches the present reads the draft
        votes = [extended[e + j] for e in alive]
        pick = max(dict.fromkeys(votes), key=votes.count)
        draft.append(pick)
        alive = [e for e in alive if extended[e + j] == pick]
    return best, draft


def test_request_suffix_drafter_follows_the_longest_earlier_match():
    context = [2, 3, 4, 6, 1, 2, 3, 4, 5, 7, 1, 2, 3, 4]
    draft = RequestSuffixDrafter().propose(context, 3)
    assert draft.tokens == [5, 7, 1]  # after [1, 2, 3, 4]; prompt lookup's [3, 4] gives 6
    assert PromptLookupDrafter().propose(context, 3).tokens == [6, 1, 2]
    assert (draft.match_len, draft.match_count, draft.lengths) == (4, 1, [4, 4, 4])
    assert draft.q == [{5: 1.0}, {7: 1.0}, {1: 1.0}]
    votes = RequestSuffixDrafter().propose([8, 9, 2, 5, 8, 9, 1, 6, 8, 9, 1, 7, 8, 9], 3)
    assert votes.tokens == [1, 6, 8]  # 1 wins 2 to 1; then a tie goes to the earlier 6
    assert votes.dists == [{2: 1 / 3, 1: 2 / 3}, {6: 1 / 3, 7: 1 / 3}, {8: 1 / 3}]
    short = [8, 9, 1, 8, 9]  # its longest earlier suffix has 2 tokens
    assert RequestSuffixDrafter(min_match=3).propose(short, 2).tokens == []
    assert RequestSuffixDrafter().propose(short, 2).tokens == [1, 8]
    assert RequestSuffixDrafter().propose([1, 2, 3], 4).tokens == []


def test_request_suffix_drafter_repeats_a_loop_past_the_present():
    # the only earlier occurrence of [5, 5] ends one token back: its copy reaches the present
    # after one token and goes on with what it drafted (before 2026-12-07: [5] alone)
    run = RequestSuffixDrafter().propose([7, 5, 5, 5], 4)
    assert (run.match_len, run.tokens) == (2, [5, 5, 5, 5])
    assert run.dists == [{5: 1.0}] * 4
    loop = RequestSuffixDrafter().propose([9, 1, 2, 1, 2], 5)  # period 2: was [1, 2]
    assert loop.tokens == [1, 2, 1, 2, 1]
    # both earlier [2, 2] (ending 2 and 1 tokens back) keep voting past the present: every
    # token has both votes (before: the later one dropped out at the second token, {2: 1/2})
    both = RequestSuffixDrafter(max_match=2).propose([0, 2, 2, 2, 2], 4)
    assert (both.match_count, both.tokens) == (2, [2, 2, 2, 2])
    assert both.dists == [{2: 1.0}] * 4
    with pytest.raises(ValueError, match="min_match"):
        RequestSuffixDrafter(max_match=2, min_match=3)


def test_request_suffix_drafter_equals_a_brute_force_search():
    rng = np.random.default_rng(7)
    drafted = 0
    for _ in range(300):
        ctx = rng.integers(0, 4, rng.integers(2, 40)).tolist()
        k, max_match = int(rng.integers(1, 9)), int(rng.integers(1, 6))
        n, want = _suffix_reference(ctx, k, max_match)
        draft = RequestSuffixDrafter(max_match=max_match).propose(ctx, k)
        assert (draft.match_len, draft.tokens) == (n, want), (ctx, k, max_match)
        drafted += bool(want)
    assert drafted > 200


def _tiny_llama(seed: int) -> LlamaForCausalLM:
    return tiny_llama(seed)


def test_draft_model_greedy_matches_greedy_decoding_and_reuses_cache():
    model = _tiny_llama(0)
    drafter = DraftModelDrafter(model)
    context = [3, 14, 15, 9, 26]
    draft = drafter.propose(context, 6)
    assert draft.tokens == greedy_generate(model, context, 6)
    assert torch.equal(draft.q.sum(-1), torch.ones(6, dtype=draft.q.dtype))
    longer = context + draft.tokens[:3] + [7]  # accepted 3, then a correction
    again = drafter.propose(longer, 4)
    assert drafter.cache.get_seq_length() == len(longer) + 3  # context, then 3 fed drafts
    assert again.tokens == greedy_generate(model, longer, 4)


def test_draft_model_sampling_reports_its_distribution():
    model = _tiny_llama(1)
    drafter = DraftModelDrafter(model, sample=True, temperature=0.8, seed=0, q_format="dict")
    draft = drafter.propose([1, 2, 3], 5)
    assert len(draft.tokens) == 5
    for token, q in zip(draft.tokens, draft.q, strict=True):
        assert q[token] > 0
        assert sum(q.values()) == pytest.approx(1.0)
