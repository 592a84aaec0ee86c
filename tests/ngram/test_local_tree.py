"""Request-local trie + index drafts as one tree: matching, the trie's counts and cut-offs,
merging, gating, and greedy tree decoding with it equals greedy decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from kvspec.decoding.drafts import Draft, one_hot
from kvspec.decoding.loop import greedy_generate
from kvspec.decoding.tree import ROOT, DraftTree, tree_generate
from kvspec.ngram.local_tree import (
    HybridTreeDrafter,
    LocalTreeSettings,
    continuation_tree,
    earlier_matches,
    merge_trees,
)


def _paths(tree: DraftTree) -> set[tuple[int, ...]]:
    return {tuple(tree.tokens[i] for i in tree.path(n)) for n in range(len(tree.tokens))}


def test_earlier_matches_finds_the_longest_suffix_and_all_its_occurrences() -> None:
    ctx = np.array([1, 2, 3, 9, 2, 3, 8, 1, 2, 3])
    n, ends = earlier_matches(ctx, 32)
    assert n == 3 and ends.tolist() == [2]  # "1 2 3" ended at 2; "2 3" also at 5, shorter
    n, ends = earlier_matches(ctx, 2)
    assert n == 2 and ends.tolist() == [2, 5]
    assert earlier_matches(np.array([4, 5, 6]), 8)[0] == 0
    assert earlier_matches(np.array([7]), 8)[0] == 0


def test_earlier_matches_inside_a_loop() -> None:
    ctx = np.array([5, 6, 5, 6, 5, 6])
    n, ends = earlier_matches(ctx, 32)
    assert n == 4 and ends.tolist() == [3]  # "5 6 5 6" ends at 3, not at the last position


def test_continuation_tree_scores_cuts_and_closure() -> None:
    ctx = np.array([1, 7, 8, 1, 7, 9, 1, 7, 8, 1])
    tree = continuation_tree(ctx, np.array([0, 3, 6]), depth=2, min_prob=0.0, max_nodes=10)
    assert _paths(tree) == {(7,), (7, 8), (7, 9)}
    prob = {tuple(tree.tokens[i] for i in tree.path(n)): tree.scores[n] for n in range(3)}
    assert prob[(7,)] == 1.0 and prob[(7, 8)] == pytest.approx(2 / 3)
    assert _paths(continuation_tree(ctx, np.array([0, 3, 6]), 2, 0.5, 10)) == {(7,), (7, 8)}
    small = continuation_tree(ctx, np.array([0, 3, 6]), 2, 0.0, 2)
    assert _paths(small) == {(7,), (7, 8)}  # the most probable two, parent kept


def test_merge_shares_prefixes() -> None:
    a = DraftTree([1, 2, 3], [ROOT, 0, 1], [1.0, 0.5, 0.5])
    b = DraftTree.chain([1, 2, 4, 5])
    merged = merge_trees([a, b])
    assert _paths(merged) == {(1,), (1, 2), (1, 2, 3), (1, 2, 4), (1, 2, 4, 5)}
    assert len(merged.tokens) == 5 and merge_trees([]).tokens == []


class FixedIndex:
    """An index drafter that always proposes `tokens` with match length `match_len`."""

    def __init__(self, tokens: list[int], match_len: int) -> None:
        self.tokens, self.match_len, self.calls = tokens, match_len, 0

    def propose(self, context: list[int], k: int) -> Draft:
        self.calls += 1
        return Draft(self.tokens[:k], one_hot(self.tokens[:k]), self.match_len, 1)


def test_gates_drop_short_matches() -> None:
    ctx = [1, 2, 3, 4, 1, 2]  # request-local match "1 2" (n = 2)
    settings = LocalTreeSettings.defaults(min_local=3, min_index=5)
    assert HybridTreeDrafter(FixedIndex([9, 9], 4), settings).propose_tree(ctx, 8).tokens == []
    both = HybridTreeDrafter(
        FixedIndex([9, 9], 5), LocalTreeSettings.defaults(min_local=2, min_index=5)
    )
    assert _paths(both.propose_tree(ctx, 8)) == {(3,), (3, 4), (3, 4, 1), (3, 4, 1, 2), (9,),
                                                 (9, 9)}  # fmt: skip
    assert both.chosen == {"local": 1, "index": 1}
    assert all(d <= 1 for d in DraftTree.depths(both.propose_tree(ctx, 1)))


def test_unknown_setting_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown local_tree settings"):
        LocalTreeSettings.from_config({"factr": 2})


def _llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=24, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    return LlamaForCausalLM(config).double().eval()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_tree_decoding_with_the_hybrid_equals_greedy(seed: int) -> None:
    target = _llama(seed)
    prompt = [3, 5, 7, 3, 5, 7, 3, 5, 1, 2, 3, 5]
    want = greedy_generate(target, prompt, 40)
    index = FixedIndex(want[2:10] + [0, 1], 3)  # partly right branches, to accept and reject
    drafter = HybridTreeDrafter(index, LocalTreeSettings.defaults(min_local=1, min_index=3))
    got, steps = tree_generate(target, prompt, drafter, 40)
    assert got == want
    assert drafter.chosen["local"] > 0 and index.calls >= len(steps) - 1  # last: no budget
    assert any(s.accepted for s in steps) and any(s.drafted > s.accepted for s in steps)
