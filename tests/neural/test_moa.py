"""Mixture of Attentions drafter: LSA treats tokens alone; drafting computes exactly what the
teacher-forced training forward computes (with and without TLI); greedy decoding with it is
greedy decoding; training on the target's own K/V raises acceptance."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache

from kvspec.decoding.cache import layer_kv
from kvspec.decoding.loop import greedy_generate, speculative_generate
from kvspec.decoding.tree import tree_generate
from kvspec.neural.moa import (
    MoADrafter,
    MoAHead,
    MoASize,
    MoATreeDrafter,
    finish,
    moa_forward,
    moa_loss,
    verification,
)
from tests.tiny import tree_llama

SIZE = dict(lsa_intermediate=32, sa_intermediate=48, ca_intermediate=64)
PROMPTS = [[3, 17, 5, 9, 21], [5, 5, 5, 5], [40, 2, 19, 7, 7, 31], [11, 30, 4]]


def _head(target, tli: int = 0, seed: int = 1, state: str = "lsa") -> MoAHead:
    torch.manual_seed(seed)
    return MoAHead(target, MoASize(tli=tli, state=state, **SIZE))


# (tli, state): the architecture and Table 5's ablations
VARIANTS = [(0, "lsa"), (1, "lsa"), (1, "kv_mean"), (0, "o"), (1, "o")]


def test_layer_self_attention_treats_each_token_alone() -> None:
    target = tree_llama(0, layers=3)
    head = _head(target)
    kv = torch.randn(1, 5, 3, 32, dtype=torch.float64)
    out = head.lsa(kv)
    kv[0, 2] += 1.0
    changed = (head.lsa(kv) - out).abs().amax(dim=-1)[0]
    assert changed[2] > 1e-3 and changed[[0, 1, 3, 4]].max() == 0


def test_verification_bounds() -> None:
    verified, bound = verification(9, prompt=3, period=3)
    assert verified.tolist() == [1, 1, 1, 0, 0, 1, 0, 0, 1]
    assert bound.tolist() == [-1, 0, 1, 2, 2, 2, 5, 5, 5]


@pytest.mark.parametrize(("tli", "state"), VARIANTS)
def test_drafting_computes_the_teacher_forced_forward(tli, state) -> None:
    """Verified positions 0..n-1; the drafter's activations for the tokens at n, n+1, ...
    (forced, not drafted) equal the training forward's with that verification."""
    target = tree_llama(0, layers=3)
    head = _head(target, tli, state=state)
    seq = [3, 17, 5, 9, 21, 8, 30, 2, 44, 6]
    n = 5
    with torch.no_grad():
        out = target(input_ids=torch.tensor([seq]), use_cache=True, output_hidden_states=True)
        kv = layer_kv(out.past_key_values, 0, len(seq))
        verified, bound = verification(len(seq), prompt=n, period=1000)
        final = out.hidden_states[-1]
        pred = moa_forward(head, target, torch.tensor([seq]), kv, bound, final)
        if tli:
            mixed = torch.where(verified[None, :, None], out.hidden_states[-1 - tli], pred)
            pred = finish(target, tli, mixed, torch.arange(len(seq))[None])
        cache = DynamicCache()
        target(input_ids=torch.tensor([seq[:n]]), past_key_values=cache, use_cache=True)
    drafter = MoADrafter(head, target)
    drafter.observe(final[0, :n], 0)
    drafter.observe_cache(cache)
    drafter.sa_cache = DynamicCache()
    with torch.no_grad():
        q = drafter._queries(seq[: n + 1], 0)[:, -1:]
        for i in range(len(seq) - n - 1):
            got = drafter.activation(q, n + i)
            torch.testing.assert_close(got[0, 0], pred[0, n + i], rtol=0, atol=1e-9)
            q = drafter._queries([seq[n + 1 + i]], n + 1 + i)


@pytest.mark.parametrize(("tli", "state"), VARIANTS)
def test_greedy_decoding_with_the_drafter_is_greedy_decoding(tli, state) -> None:
    target = tree_llama(0, layers=3)
    head = _head(target, tli, state=state)
    for prompt in PROMPTS:
        drafter = MoADrafter(head, target)
        out, steps = speculative_generate(target, prompt, drafter, 16, 3)
        assert out == greedy_generate(target, prompt, 16)
        assert drafter.lsa.shape[1] == steps[-1].cache_len  # one LSA vector per verified position
        if state == "o":  # the loop's features are the training forward's (post-norm) ones
            n = steps[-1].cache_len
            with torch.no_grad():
                final = target(input_ids=torch.tensor([(prompt + out)[:n]]),
                               output_hidden_states=True).hidden_states[-1]  # fmt: skip
            torch.testing.assert_close(drafter.lsa[0], final[0], rtol=0, atol=1e-10)


def test_ablation_heads_train() -> None:
    """Each of Table 5's MoA variants takes a gradient step on its own parameters only."""
    target = tree_llama(0, layers=3)
    for p in target.parameters():
        p.requires_grad_(False)
    for tli, state in VARIANTS[2:]:
        head = _head(target, tli, state=state)
        loss, parts = moa_loss(head, target, torch.tensor([[3, 17, 5, 9, 21, 8, 30, 2]]), 3,
                               random.Random(0), (2, 3))  # fmt: skip
        loss.backward()
        grads = [p.grad for p in head.parameters() if p.requires_grad]
        assert all(g is not None for g in grads) and parts["loss"] > 0
    assert all(p.grad is None for p in target.parameters())


def test_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="state must be one of"):
        _head(tree_llama(0, layers=3), state="mean")


def test_training_on_the_targets_states_raises_acceptance() -> None:
    target = tree_llama(0, layers=3)
    for p in target.parameters():
        p.requires_grad_(False)
    seqs = []
    for i in range(16):
        gen = torch.Generator().manual_seed(100 + i)
        prompt = torch.randint(0, 48, (5,), generator=gen).tolist()
        seqs.append(prompt + greedy_generate(target, prompt, 24))
    head = _head(target)
    untrained, before = _accepted(target, head), _mean_loss(head, target, seqs)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    rng = random.Random(0)
    for step in range(150):
        head.train()
        loss, _ = moa_loss(head, target, torch.tensor([seqs[step % len(seqs)]]), 4, rng)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert _mean_loss(head, target, seqs) < 0.6 * before
    assert _accepted(target, head) > untrained


def _mean_loss(head, target, seqs) -> float:
    rng = random.Random(7)
    with torch.no_grad():
        losses = [moa_loss(head, target, torch.tensor([s]), 4, rng)[1]["loss"] for s in seqs]
    return sum(losses) / len(losses)


def _accepted(target, head) -> float:
    head.eval()
    total, n = 0, 0
    for prompt in PROMPTS:
        out, steps = speculative_generate(target, prompt, MoADrafter(head, target), 24, 4)
        assert out == greedy_generate(target, prompt, 24)
        total += sum(s.accepted for s in steps)
        n += len(steps)
    return total / n


def _verified_cache(target, context: list[int]) -> DynamicCache:
    cache = DynamicCache()
    with torch.no_grad():
        target(input_ids=torch.tensor([context[:-1]]), past_key_values=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("tli", [0, 1])
def test_tree_scores_are_the_heads_own_chain_probabilities(tli) -> None:
    """Every node's score is the head's joint log-probability of its path by plain chain
    drafting along it: the SA and TLI tree masks and positions are right."""
    target = tree_llama(0, layers=3)
    head = _head(target, tli)
    context = [3, 17, 5, 9, 21, 8]
    n = len(context) - 1
    drafter = MoATreeDrafter(head, target, depth=3, topk=3, total=21)
    drafter.observe_cache(_verified_cache(target, context))
    tree = drafter.propose_tree(context, 3)
    assert len(tree.tokens) == 21
    assert drafter.cache.layers[-1].get_seq_length() == n  # drafted positions dropped
    chain = MoADrafter(head, target)
    chain.observe_cache(_verified_cache(target, context))
    lm_head = target.get_output_embeddings()
    with torch.no_grad():
        for i in range(len(tree.tokens)):
            q, want = chain._sync(context), 0.0
            for j, t in enumerate(tree.tokens[a] for a in tree.path(i)):
                logits = lm_head(chain.activation(q, n + j)[0, -1]).double()
                want += float(torch.log_softmax(logits, -1)[t])
                q = chain._queries([t], n + j + 1)
            chain._rewind(context)
            assert abs(tree.scores[i] - want) < 1e-8


@pytest.mark.parametrize(("tli", "state"), VARIANTS)
def test_greedy_tree_decoding_with_the_head_is_greedy_decoding(tli, state) -> None:
    target = tree_llama(0, layers=3)
    head = _head(target, tli, state=state)
    for prompt in PROMPTS:
        drafter = MoATreeDrafter(head, target, depth=3, topk=2, total=6)
        out, steps = tree_generate(target, prompt, drafter, 16)
        assert out == greedy_generate(target, prompt, 16)
        assert drafter.lsa.shape[1] == steps[-1].cache_len
