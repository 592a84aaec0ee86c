"""Tree speculative decoding: the tree forward equals per-branch forwards, the cache after a
step equals greedy decoding's, and greedy tree decoding equals greedy decoding."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaForCausalLM

from kvspec.decoding.cache import keep_positions
from kvspec.decoding.draft_model import DraftModelDrafter, ModelTreeDrafter
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.tree import (
    ROOT,
    ChainTree,
    DraftTree,
    _best_subtree,
    tree_generate,
    tree_logits,
    verify_tree_greedy,
)
from tests.tiny import tree_llama

VOCAB = 48


@pytest.fixture(scope="module")
def target() -> LlamaForCausalLM:
    return tree_llama(0)


@pytest.fixture(scope="module")
def draft() -> LlamaForCausalLM:
    return tree_llama(1, layers=1)


PROMPT = [3, 17, 5, 9, 21, 4, 30, 11]
# root -> {7, 12}; 7 -> {2, 40}; 40 -> {5}; 12 -> {7}
TREE = DraftTree([7, 12, 2, 40, 5, 7], [ROOT, ROOT, 0, 0, 3, 1], [0.0] * 6)


def _cache(model, tokens) -> DynamicCache:
    cache = DynamicCache()
    model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True)
    return cache


def test_tree_structure() -> None:
    assert TREE.depths() == [1, 1, 2, 2, 3, 2]
    assert TREE.path(4) == [0, 3, 4] and TREE.path(5) == [1, 5]
    assert DraftTree.chain([4, 5, 6]).parents == [ROOT, 0, 1]
    with pytest.raises(ValueError, match="precede"):
        DraftTree([1, 2], [1, ROOT], [0.0, 0.0])


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_forward_equals_each_branch_alone(attn) -> None:
    """Row of node i = the next-token logits after prompt + path(i), computed plainly."""
    model = tree_llama(0, attn=attn)
    # transformers' eager attention takes its softmax in float32 even for a float64 model, so
    # its rows agree to float32 rounding, which depends on the CPU's vector width (exact on
    # AVX-512, ~4e-9 on AVX2); a wrong mask moves logits by ~1e-1
    atol = 1e-10 if attn == "sdpa" else 1e-7
    cache = _cache(model, PROMPT[:-1])
    logits = tree_logits(model, cache, PROMPT[-1], TREE)  # (7, V)
    plain = model(input_ids=torch.tensor([PROMPT])).logits[0, -1]
    torch.testing.assert_close(logits[0], plain, rtol=0, atol=atol)
    for i in range(len(TREE.tokens)):
        ids = PROMPT + [TREE.tokens[a] for a in TREE.path(i)]
        plain = model(input_ids=torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(logits[i + 1], plain, rtol=0, atol=atol)


def test_cache_after_keeping_a_path_equals_the_plain_cache(target) -> None:
    cache = _cache(target, PROMPT[:-1])
    past = cache.get_seq_length()
    tree_logits(target, cache, PROMPT[-1], TREE)
    keep_positions(cache, [*range(past + 1), *(past + 1 + i for i in TREE.path(4))])
    plain = _cache(target, PROMPT + [7, 40, 5])
    for ours, ref in zip(cache.layers, plain.layers, strict=True):
        torch.testing.assert_close(ours.keys, ref.keys, rtol=0, atol=1e-12)
        torch.testing.assert_close(ours.values, ref.values, rtol=0, atol=1e-12)


def test_verify_walks_the_branch_the_target_picks() -> None:
    logits = torch.zeros(7, VOCAB)
    logits[0, 7] = logits[1, 40] = logits[4, 5] = logits[5, 33] = 1.0  # root->7->40->5->33
    assert verify_tree_greedy(logits, TREE) == ([0, 3, 4], 33)
    logits[1, 40], logits[1, 2] = 0.0, 1.0  # 7 -> 2, a leaf: stop after it
    logits[3, 19] = 1.0
    assert verify_tree_greedy(logits, TREE) == ([0, 2], 19)
    logits[0, 7], logits[0, 8] = 0.0, 1.0  # no child of the root matches
    assert verify_tree_greedy(logits, TREE) == ([], 8)


def test_draft_tree_scores_are_the_draft_models_own_path_probabilities(draft) -> None:
    """Every node's score is the draft model's joint log-probability of its path, computed
    plainly: each branch saw only the context and its own ancestors. The drafter keeps the
    context in its cache between calls."""
    drafter = ModelTreeDrafter(draft, depth=3, topk=3, total=21)  # keeps all 3 + 9 + 9
    for context in (PROMPT, PROMPT + [7, 12]):
        tree = drafter.propose_tree(context, 3)
        assert len(tree.tokens) == 21 and max(tree.depths()) == 3
        for i in range(len(tree.tokens)):
            path = [tree.tokens[a] for a in tree.path(i)]
            logits = draft(input_ids=torch.tensor([context + path])).logits[0]
            logp = torch.log_softmax(logits[len(context) - 1 : -1], -1)
            want = float(sum(logp[j, t] for j, t in enumerate(path)).detach())
            assert abs(tree.scores[i] - want) < 1e-9
        assert drafter.cached == context and drafter.cache.get_seq_length() == len(context)


def test_best_subtree_is_closed_under_ancestors() -> None:
    tree = DraftTree([1, 2, 3, 4, 5], [ROOT, ROOT, 0, 0, 2], [-0.1, -0.5, -0.1, -0.3, -0.2])
    sub = _best_subtree(tree, 3)  # scores -0.1 (0), -0.1 (2), -0.2 (4): a chain 1 -> 3 -> 5
    assert sub.tokens == [1, 3, 5] and sub.parents == [ROOT, 0, 1]


@pytest.mark.parametrize("drafter_seed", [0, 1])  # the target itself, then a different model
def test_greedy_tree_decoding_equals_greedy(target, drafter_seed) -> None:
    model = target if drafter_seed == 0 else tree_llama(1, layers=1)
    for prompt in (PROMPT, [5, 5, 5, 5], [40, 2, 19, 7, 7, 31]):
        ref = greedy_generate(target, prompt, 20)
        drafter = ModelTreeDrafter(model, depth=4, topk=3, total=10)
        out, steps = tree_generate(target, prompt, drafter, 20)
        assert out == ref
        assert sum(s.accepted + 1 for s in steps) >= 20
        assert all(s.drafted <= 10 for s in steps)
        if drafter_seed == 0:  # drafting for itself: the root's greedy child (the tree's
            # best node) always passes, whatever else the tree holds
            assert all(s.accepted >= 1 for s in steps if s.drafted)


def test_tree_decoding_stops_at_eos_and_budget(target) -> None:
    ref = greedy_generate(target, PROMPT, 30)
    eos = ref[6]
    stop = ref.index(eos) + 1
    drafter = ModelTreeDrafter(target, depth=5, topk=2, total=8)
    out, _ = tree_generate(target, PROMPT, drafter, 30, eos_token_id=eos)
    assert out == ref[:stop]
    for budget in (1, 2, 7):
        out, steps = tree_generate(target, PROMPT, drafter, budget)
        assert out == ref[:budget] and len(out) == budget


def test_chain_tree_matches_chain_speculative_decoding(target, draft) -> None:
    """A one-branch tree verifies exactly what the chain loop verifies."""
    out_chain, steps_chain = speculative_generate(target, PROMPT, DraftModelDrafter(draft), 24, 4)
    out_tree, steps_tree = tree_generate(target, PROMPT, ChainTree(DraftModelDrafter(draft), 4), 24)
    assert out_tree == out_chain == greedy_generate(target, PROMPT, 24)
    assert [s.accepted for s in steps_tree] == [s.accepted for s in steps_chain]


def test_a_wider_tree_accepts_at_least_as_much_as_its_first_branch(target, draft) -> None:
    """The tree holds the greedy chain among its branches, so its accepted length per step
    (summed over a generation) is not below the chain's on the same drafter."""
    chain = tree_generate(target, PROMPT, ModelTreeDrafter(draft, 4, 1, 4), 40)[1]
    wide = tree_generate(target, PROMPT, ModelTreeDrafter(draft, 4, 4, 16), 40)[1]
    tau = [40 / len(s) for s in (chain, wide)]
    assert tau[1] >= tau[0]


def test_sliding_window_caches_are_refused_once_they_drop_positions() -> None:
    from transformers.cache_utils import DynamicSlidingWindowLayer

    cache = DynamicCache()
    cache.layers = [DynamicSlidingWindowLayer(sliding_window=4)]
    kv = torch.arange(3.0).view(1, 1, 3, 1)
    cache.layers[0].update(kv, kv)
    keep_positions(cache, [0, 2])
    assert cache.layers[0].keys.flatten().tolist() == [0.0, 2.0] and cache.get_seq_length() == 2
    cache.layers[0].update(kv, kv)  # 5 positions: the layer kept the last 3
    with pytest.raises(ValueError, match="sliding-window cache layer"):
        keep_positions(cache, [0])
