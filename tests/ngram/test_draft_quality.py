"""Draft quality: accepted length under greedy verification and per-forward cost ratios."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from kvspec.ngram.draft_quality import (
    _CachedModel,
    acceptance,
    draft_quality,
    predicted_speedup,
    step_costs,
)

from ..tiny import tiny_llama

VOCAB = 64


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, vocab=VOCAB, hidden=64, intermediate=128)


@pytest.fixture(scope="module")
def prompts() -> list[tuple[str, list[int]]]:
    rng = np.random.default_rng(0)
    return [(f"p{i}", rng.integers(0, VOCAB, 4 + i).tolist()) for i in range(3)]


def test_the_target_as_its_own_draft_is_always_accepted(target, prompts) -> None:
    acc = acceptance(target, copy.deepcopy(target), prompts, k=4, max_new_tokens=11, stops=[])
    assert acc["acceptance"] == 1.0 and acc["tokens"] == 3 * 11
    # per prompt: 5 + 5 tokens from two full steps, then 1 from a step with no budget left
    assert acc["steps"] == 3 * 3 and acc["accept_len"] == pytest.approx(11 / 3)


def test_a_random_draft_is_accepted_less(target, prompts) -> None:
    other = tiny_llama(1, vocab=VOCAB, hidden=32, intermediate=64)
    acc = acceptance(target, other, prompts, k=4, max_new_tokens=11, stops=[])
    assert acc["tokens"] == 3 * 11 and acc["acceptance"] < 0.5
    assert 1.0 <= acc["accept_len"] < 11 / 3


def test_timed_forward_leaves_the_cache_as_it_was(target) -> None:
    cm = _CachedModel(target, cache_len=20, seed=0, drafts=False)
    assert cm.time_feed(5) > 0 and cm.cache.get_seq_length() == 20


def test_the_draft_is_timed_through_its_drafters_forward(target, monkeypatch) -> None:
    """The draft's step cost is that of the forward `DraftModelDrafter` calls (the lean one
    for a plain Llama); the target's that of its own forward, as the decoding loop calls it."""
    from kvspec.decoding.lean import LeanLlama

    seen: list[int] = []
    real = LeanLlama.__call__

    def spy(self, **kw):  # noqa: ANN001, ANN202
        seen.append(id(self.model))
        return real(self, **kw)

    monkeypatch.setattr(LeanLlama, "__call__", spy)
    small = tiny_llama(1, vocab=VOCAB, hidden=16, intermediate=32, layers=1)
    step_costs({"target": target, "draft": small}, cache_len=8, feeds=[1, 2], repeats=2)
    assert seen and set(seen) == {id(small)}


def test_step_costs_and_predicted_speedup(target) -> None:
    small = tiny_llama(1, vocab=VOCAB, hidden=16, intermediate=32, layers=1)
    costs = step_costs({"target": target, "draft": small}, cache_len=16, feeds=[1, 5], repeats=3)
    assert set(costs) == {"target", "draft"} and all(set(c) == {1, 5} for c in costs.values())
    assert all(ms > 0 for c in costs.values() for ms in c.values())
    fake = {"target": {1: 10.0, 2: 12.0, 5: 20.0}, "draft": {1: 1.0}}
    # 6 steps of 4 drafted tokens: the fixed-depth formula L·t_T(1) / (k·t_D(1) + t_T(k+1))
    assert predicted_speedup(18, {"4": 6}, fake) == pytest.approx(3.0 * 10 / (4 * 1 + 20))
    # steps of different depths each pay their own drafting and verification width
    assert predicted_speedup(9, {"1": 2, "4": 3}, fake) == pytest.approx(
        9 * 10 / (2 * (1 + 12) + 3 * (4 + 20))
    )


def test_a_cut_off_drafts_less_and_stays_greedy(target, prompts) -> None:
    draft = tiny_llama(1, vocab=VOCAB, hidden=32, intermediate=64)
    fixed = acceptance(target, draft, prompts, k=4, max_new_tokens=11, stops=[])
    cut = acceptance(target, draft, prompts, k=4, max_new_tokens=11, stops=[], stop_below=0.5)
    assert fixed["cutoff"] == 0.0 and cut["cutoff"] == 0.5
    assert cut["drafted"] < fixed["drafted"] and cut["tokens"] == fixed["tokens"] == 3 * 11
    for acc in (fixed, cut):
        assert sum(acc["depths"].values()) == acc["steps"]
        assert sum(int(d) * n for d, n in acc["depths"].items()) == acc["drafted"]
    assert max(int(d) for d in fixed["depths"]) == 4


def test_draft_quality_reports_every_set_cut_off_and_width(target, prompts) -> None:
    draft = tiny_llama(1, vocab=VOCAB, hidden=32, intermediate=64)
    sets = {"a": prompts[:2], "b": prompts[2:]}
    out = draft_quality(target, draft, sets, k=3, max_new_tokens=8, stops=[], cache_len=16,
                        feeds=[1, 2], repeats=2, cutoffs=[0.0, 0.4])  # fmt: skip
    assert set(out["sets"]) == {"a", "b"} and set(out["sets"]["a"]) == {"0", "0.4"}
    assert out["sets"]["b"]["0"]["prompts"] == 1
    assert sorted(out["costs"]) == [1, 2, 3, 4]  # every verification width up to k + 1
    row = out["costs"][1]
    assert row["ratio"] == pytest.approx(row["draft_ms"] / row["target_ms"])
    assert all(r["predicted_speedup"] > 0 for s in out["sets"].values() for r in s.values())
