"""Replaying greedy outputs through a drafter takes the steps the decoding loops take."""

from __future__ import annotations

import numpy as np
import pytest

from kvspec.decoding.drafts import Draft
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.tree import ChainTree, DraftTree, tree_generate
from kvspec.ngram.drafters import RequestSuffixDrafter
from kvspec.ngram.replay import accepted_path, replay

from ..tiny import tiny_llama

NEW = 24


@pytest.fixture(scope="module")
def runs() -> tuple:
    target = tiny_llama(3, vocab=12)  # a small vocabulary: outputs repeat, drafts get accepted
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 12, 5 + i).tolist() for i in range(4)]
    return target, [(p, greedy_generate(target, p, NEW)) for p in prompts]


def test_chain_replay_takes_the_loops_steps(runs):
    target, pairs = runs
    costs = {1: 1.0, 2: 1.2, 3: 1.3, 4: 1.4, 5: 1.5}
    replayed = replay(RequestSuffixDrafter(), pairs, costs, k=4)
    tokens = steps = drafted = 0
    verify = 0.0
    for prompt, greedy in pairs:
        out, loop_steps = speculative_generate(target, prompt, RequestSuffixDrafter(), NEW, 4)
        assert out == greedy
        tokens += len(out)
        steps += len(loop_steps)
        drafted += sum(s.drafted for s in loop_steps)
        verify += sum(costs[s.drafted + 1] for s in loop_steps)
    assert (replayed.tokens, replayed.steps, replayed.drafted) == (tokens, steps, drafted)
    assert replayed.verify_seconds == pytest.approx(verify)
    assert replayed.steps < tokens  # drafts were accepted, so the check compares something


def test_tree_replay_takes_the_tree_loops_steps(runs):
    target, pairs = runs
    replayed = replay(ChainTree(RequestSuffixDrafter(), 3), pairs, {1: 1.0, 2: 1.5})
    steps = 0
    for prompt, greedy in pairs:
        out, loop_steps = tree_generate(target, prompt, ChainTree(RequestSuffixDrafter(), 3), NEW)
        assert out == greedy
        steps += len(loop_steps)
    assert replayed.steps == steps < replayed.tokens


class _Recording(ChainTree):
    """A chain as a tree; records what the loop tells it after each step."""

    def __init__(self) -> None:
        super().__init__(RequestSuffixDrafter(), 3)
        self.heard: list[tuple[list[int], list[int]]] = []

    def tree_feedback(self, tree: DraftTree, path: list[int], seconds: float) -> None:
        assert seconds > 0
        self.heard.append((list(tree.tokens), list(path)))


def test_tree_feedback_hears_what_the_tree_loop_tells(runs):
    target, pairs = runs
    replayed, looped = _Recording(), _Recording()
    replay(replayed, pairs, {1: 1.0, 2: 1.5})
    for prompt, _ in pairs:
        tree_generate(target, prompt, looped, NEW)
    assert replayed.heard == looped.heard
    assert any(path for _, path in looped.heard)  # some drafts were accepted


class _Oracle:
    """Drafts the next recorded token; records the feedback it gets."""

    def __init__(self, greedy: list[int], prompt_len: int) -> None:
        self.greedy, self.prompt_len, self.seen = greedy, prompt_len, []

    def propose(self, context: list[int], k: int) -> Draft:
        i = len(context) - self.prompt_len
        return Draft(self.greedy[i : i + 1], None)

    def feedback(self, drafted: int, accepted: int, seconds: float) -> None:
        self.seen.append((drafted, accepted, seconds))


def test_speedup_is_greedy_time_over_replayed_time_and_feedback_gets_the_cost():
    greedy = [5, 6, 7, 8, 9]
    oracle = _Oracle(greedy, 2)
    r = replay(oracle, [([1, 2], greedy)], {1: 0.01, 2: 0.015}, k=1)
    # steps: draft 5 (+6), draft 7 (+8), then the last token alone
    assert (r.steps, r.tokens, r.drafted) == (3, 5, 2)
    assert oracle.seen == [(1, 1, 0.015), (1, 1, 0.015), (0, 0, 0.01)]
    assert r.accept_len == pytest.approx(5 / 3)
    assert r.speedup == pytest.approx(5 * 0.01 / (0.04 + r.draft_seconds))
    gaps = replay(_Oracle(greedy, 2), [([1, 2], greedy)], {1: 0.01, 3: 0.02}, k=1)
    assert gaps.verify_seconds == pytest.approx(0.02 + 0.02 + 0.01)  # 2 positions cost 3's
    with pytest.raises(ValueError, match="one position"):
        replay(oracle, [], {2: 0.015}, k=1)


def test_accepted_path():
    tree = DraftTree([1, 2, 3, 4], [-1, 0, 0, 2], [0.0] * 4)  # 1 -> {2, 3 -> 4}
    assert accepted_path(tree, [1, 3, 4, 9]) == 3
    assert accepted_path(tree, [1, 2, 4]) == 2
    assert accepted_path(tree, [7]) == 0
