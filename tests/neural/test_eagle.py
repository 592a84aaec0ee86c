"""EAGLE-style feature drafter: the loop hands it the target's features of exactly the committed
positions; greedy decoding is reproduced; training on the target's features raises acceptance."""

from __future__ import annotations

import pytest
import torch

from kvspec.decoding.cache import crop_to
from kvspec.decoding.features import FeatureTap
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.tree import tree_generate
from kvspec.neural.eagle import EagleDrafter, EagleHead, EagleTreeDrafter, eagle_loss
from tests.tiny import tree_llama

PROMPTS = [[3, 17, 5, 9, 21], [5, 5, 5, 5], [40, 2, 19, 7, 7, 31], [11, 30, 4]]


def _features(target, tokens: list[int]) -> torch.Tensor:
    with FeatureTap(target) as tap, torch.no_grad():
        target(input_ids=torch.tensor([tokens]))
    return tap.last  # (T, H)


def test_the_drafter_holds_the_targets_features_of_the_committed_sequence() -> None:
    target = tree_llama(0)
    torch.manual_seed(1)
    drafter = EagleDrafter(EagleHead(target), target)
    prompt = PROMPTS[0]
    out, steps = speculative_generate(target, prompt, drafter, 16, 3)
    assert out == greedy_generate(target, prompt, 16)
    seq = prompt + out
    known = torch.stack(drafter.features)  # every committed position except the last
    assert len(known) >= len(seq) - 2
    torch.testing.assert_close(known, _features(target, seq)[: len(known)], rtol=0, atol=1e-10)
    context = seq[: len(known) + 1]  # asking twice for the same context drafts the same
    assert drafter.propose(context, 3).tokens == drafter.propose(context, 3).tokens


def test_training_on_target_features_raises_acceptance() -> None:
    """A head trained (teacher-forced) on the target's own greedy continuations accepts more
    than the same head untrained; greedy output is unchanged either way."""
    target = tree_llama(0)
    for p in target.parameters():
        p.requires_grad_(False)
    seqs = []
    for i in range(24):
        gen = torch.Generator().manual_seed(100 + i)
        prompt = torch.randint(0, 48, (5,), generator=gen).tolist()
        seqs.append(prompt + greedy_generate(target, prompt, 24))
    torch.manual_seed(1)
    head = EagleHead(target)
    untrained = _accepted(target, head)
    feats = torch.stack([_features(target, s) for s in seqs])  # (24, 29, H)
    tokens = torch.tensor(seqs)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    head.train()
    first = None
    for _ in range(150):
        loss, parts = eagle_loss(head, target, feats, tokens)
        first = first if first is not None else parts["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert parts["loss"] < 0.5 * first
    assert _accepted(target, head) > untrained


def _accepted(target, head) -> float:
    """Mean accepted drafts per step over the prompts (greedy output checked on the way)."""
    total, steps_n = 0, 0
    for prompt in PROMPTS:
        out, steps = speculative_generate(target, prompt, EagleDrafter(head, target), 24, 4)
        assert out == greedy_generate(target, prompt, 24)
        total += sum(s.accepted for s in steps)
        steps_n += len(steps)
    return total / steps_n


def test_tree_scores_are_the_heads_own_chain_probabilities() -> None:
    """Every node's score is the head's joint log-probability of its path computed by plain
    chain drafting along it: the tree mask, positions and parent features are right."""
    target = tree_llama(0)
    torch.manual_seed(2)
    head = EagleHead(target)
    context = [3, 17, 5, 9, 21, 8]
    drafter = EagleTreeDrafter(head, target, depth=3, topk=3, total=21)
    drafter.observe(_features(target, context)[:-1], 0)
    tree = drafter.propose_tree(context, 3)
    assert len(tree.tokens) == 21
    chain = EagleDrafter(head, target)
    chain.observe(_features(target, context)[:-1], 0)
    n = len(context) - 1
    with torch.no_grad():
        for i in range(len(tree.tokens)):
            out, want = chain._sync(context), 0.0
            for j, t in enumerate(tree.tokens[a] for a in tree.path(i)):
                want += float(torch.log_softmax(chain.lm_head(out[0, -1]).double(), -1)[t])
                out = chain._step(out, [t], n + j)
            crop_to(chain.cache, n)
            assert abs(tree.scores[i] - want) < 1e-8
    assert drafter.cache.get_seq_length() == n


@pytest.mark.parametrize(("layers", "intermediate"), [(1, None), (2, 24)])
def test_greedy_tree_decoding_with_the_head_is_greedy_decoding(layers, intermediate) -> None:
    """EAGLE and Table 5's deeper variant ("more layers": two narrower layers)."""
    target = tree_llama(0)
    torch.manual_seed(1)
    head = EagleHead(target, layers, intermediate)
    assert len(head.more) == layers - 1
    assert head.layer.mlp.up_proj.out_features == (intermediate or target.config.intermediate_size)
    for prompt in PROMPTS:
        drafter = EagleTreeDrafter(head, target, depth=3, topk=2, total=6)
        out, steps = tree_generate(target, prompt, drafter, 16)
        assert out == greedy_generate(target, prompt, 16)
        seq = prompt + out
        known = torch.stack(drafter.features)
        torch.testing.assert_close(known, _features(target, seq)[: len(known)], rtol=0, atol=1e-10)
