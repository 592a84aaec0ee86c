"""The target's states cached per training sequence: what a head's loss reads from the cache is
what one target forward gives, every job after the first reads instead of computing, and a
head trained on cached states is the head trained on fresh ones. A head's loss over a readout
of N tokens is its loss over the target's distribution renormalised to those tokens."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache

from kvspec.decoding.cache import layer_kv
from kvspec.decoding.features import FeatureTap
from kvspec.models.distil import Sequence
from kvspec.neural.head_train import HeadLoss, sequence_loss
from kvspec.neural.heads import build_head
from kvspec.neural.target_states import (
    StateCache,
    compute_states,
    target_logits,
    target_readout,
    top1_match,
    weights_fingerprint,
)
from tests.tiny import tree_llama

IDS = [3, 17, 5, 9, 21, 4, 30, 11, 2, 8, 13, 40]
HEADS = {
    "moa": {"kind": "moa", "lsa_intermediate": 32, "sa_intermediate": 48, "ca_intermediate": 64},
    "moa_tli1": {
        "kind": "moa",
        "tli": 1,
        "lsa_intermediate": 32,
        "sa_intermediate": 48,
        "ca_intermediate": 64,
    },  # fmt: skip
    "eagle": {"kind": "eagle"},
    "independent": {"kind": "independent", "intermediate": 64},
}


@pytest.fixture(scope="module")
def target():
    return tree_llama(0, layers=3).requires_grad_(False)


def test_states_are_the_targets_kv_features_and_residual_streams(target) -> None:
    tokens = torch.tensor([IDS])
    states = compute_states(target, tokens, 2)
    with FeatureTap(target) as tap, torch.no_grad():
        out = target(input_ids=tokens, past_key_values=DynamicCache(), use_cache=True,
                     output_hidden_states=True)  # fmt: skip
    torch.testing.assert_close(states.kv, layer_kv(out.past_key_values, 0, len(IDS)))
    torch.testing.assert_close(states.final[0], tap.last)  # EAGLE's features
    for d in range(3):
        torch.testing.assert_close(states.hidden[d], out.hidden_states[-1 - d])
    torch.testing.assert_close(target_logits(target, states.final), out.logits.float())
    assert states.kv.shape == (1, len(IDS), 3, 2 * 2 * 8)  # 2 KV heads of width 8, k ‖ v


def test_a_depth_beyond_the_targets_layers_keeps_every_layer(target) -> None:
    states = compute_states(target, torch.tensor([IDS]), 7)  # a 3-layer target
    assert len(states.hidden) == 4  # the final state and the streams entering layers 2, 1, 0
    with pytest.raises(ValueError, match="at least 0"):
        compute_states(target, torch.tensor([IDS]), -1)


def test_soft_capped_logits_match_the_model() -> None:
    target = tree_llama(0, layers=1).requires_grad_(False)
    target.config.final_logit_softcapping = 0.5  # not applied by Llama: compare to the formula
    states = compute_states(target, torch.tensor([IDS]), 0)
    plain = target.get_output_embeddings()(states.final).float()
    torch.testing.assert_close(target_logits(target, states.final), torch.tanh(plain / 0.5) * 0.5)
    assert float(target_logits(target, states.final).abs().max()) <= 0.5


def test_the_second_job_reads_what_the_first_stored(target, tmp_path) -> None:
    first = StateCache(tmp_path, target, "w1", 2, torch.float32)
    a = first.get(IDS)
    assert (first.hits, first.misses) == (0, 1) and first.size_bytes() > 0
    second = StateCache(tmp_path, target, "w1", 2, torch.float32)  # another process's job
    b = second.get(IDS)
    assert (second.hits, second.misses) == (1, 0)
    fresh = compute_states(target, torch.tensor([IDS]), 2)
    triples = zip((a.kv, *a.hidden), (b.kv, *b.hidden), (fresh.kv, *fresh.hidden), strict=True)
    for x, y, z in triples:
        assert x.dtype == torch.float64  # the target's dtype, whatever the cache's
        torch.testing.assert_close(x, y, rtol=0, atol=0)
        torch.testing.assert_close(x, z.float().double(), rtol=0, atol=0)
    other = StateCache(tmp_path, target, "w2", 2, torch.float32)  # other weights: a miss
    other.get(IDS)
    assert (other.hits, other.misses) == (0, 1)


def test_a_cache_without_root_stores_nothing_and_rounds_alike(target, tmp_path) -> None:
    """moa.data.cache_states false (the paper scale): each request runs the target, and its
    states equal a stored cache's bit for bit, so caching never changes a head's training."""
    stored = StateCache(tmp_path, target, "w", 1, torch.bfloat16)
    bare = StateCache(None, target, "w", 1, torch.bfloat16)
    for _ in range(2):
        a, b = stored.get(IDS), bare.get(IDS)
        for x, y in zip((a.kv, *a.hidden), (b.kv, *b.hidden), strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert (stored.hits, stored.misses) == (1, 1)
    assert (bare.hits, bare.misses, bare.size_bytes()) == (0, 2, 0)
    assert [p.name for p in tmp_path.iterdir()] == ["w-d1-bfloat16"]  # only the stored one


def test_computed_and_read_states_are_rounded_alike(target, tmp_path) -> None:
    """A head's training must not depend on which job computed its sequences first."""
    cache = StateCache(tmp_path, target, "w", 0, torch.bfloat16)
    computed, read = cache.get(IDS), cache.get(IDS)
    torch.testing.assert_close(computed.kv, read.kv, rtol=0, atol=0)
    exact = compute_states(target, torch.tensor([IDS]), 0).kv
    assert not torch.equal(computed.kv, exact)  # rounded through bfloat16
    torch.testing.assert_close(computed.kv, exact, rtol=1e-2, atol=1e-3)


def test_states_that_overflow_the_cache_dtype_are_refused(tmp_path) -> None:
    target = tree_llama(0, layers=1)
    with torch.no_grad():
        target.get_input_embeddings().weight.mul_(1e8)  # residual stream beyond float16
    with pytest.raises(ValueError, match="state_dtype"):
        StateCache(tmp_path, target, "w", 1, torch.float16).get(IDS)


@pytest.mark.parametrize("name", list(HEADS))
def test_a_loss_on_cached_states_is_the_loss_on_a_fresh_forward(target, tmp_path, name) -> None:
    decl = HEADS[name]
    torch.manual_seed(1)
    head = build_head(target, decl)
    seq = Sequence("s", tuple(IDS), 4)
    cache = StateCache(tmp_path, target, "w", 3, torch.float64)
    cache.get(list(IDS))  # stored by an earlier job
    fresh = lambda ids: compute_states(target, torch.tensor([ids]), 3)  # noqa: E731
    a, pa = sequence_loss(decl["kind"], head, target, seq, random.Random(5), HeadLoss(), cache.get)
    b, pb = sequence_loss(decl["kind"], head, target, seq, random.Random(5), HeadLoss(), fresh)
    assert cache.hits == 1
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert pa == pytest.approx(pb, rel=1e-12)


def test_the_fingerprint_follows_the_weights(target, tmp_path) -> None:
    target.save_pretrained(tmp_path / "a")
    before = weights_fingerprint(tmp_path / "a")
    assert weights_fingerprint(tmp_path / "a") == before
    changed = tree_llama(7, layers=3)
    changed.save_pretrained(tmp_path / "a")
    assert weights_fingerprint(tmp_path / "a") != before


def _fresh(target):
    return lambda ids: compute_states(target, torch.tensor([ids]), 3)


SUBSET = [2, 3, 4, 5, 8, 9, 11, 13, 17, 21, 30, 40, 41, 47]  # of a 48-token vocabulary


def test_a_readout_scores_its_tokens_as_the_full_output_layer() -> None:
    target = tree_llama(0, layers=1).requires_grad_(False)
    final = compute_states(target, torch.tensor([IDS]), 0).final
    full = target.get_output_embeddings()(final).float()
    rows = target_readout(target, SUBSET)
    torch.testing.assert_close(rows.target_logits(final), full[..., SUBSET], rtol=0, atol=0)
    torch.testing.assert_close(rows.head_logits(final), full[..., SUBSET], rtol=0, atol=0)
    target.config.final_logit_softcapping = 0.5  # the target's logits only
    capped = target_readout(target, SUBSET)
    cap = torch.tanh(full[..., SUBSET] / 0.5) * 0.5
    torch.testing.assert_close(capped.target_logits(final), cap)
    torch.testing.assert_close(capped.head_logits(final), full[..., SUBSET], rtol=0, atol=0)
    assert not capped.weight.requires_grad


def test_top1_match_counts_the_positions_whose_argmax_agrees() -> None:
    a = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    b = torch.tensor([[0.0, 5.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 9.0], [0.0, 2.0, 0.0]])
    assert top1_match(a, b) == 0.5


@pytest.mark.parametrize("name", list(HEADS))
def test_a_loss_over_every_token_is_the_loss_without_a_readout(target, name) -> None:
    decl = HEADS[name]
    torch.manual_seed(1)
    head = build_head(target, decl)
    seq, states = Sequence("s", tuple(IDS), 4), _fresh(target)
    every = target_readout(target, range(target.config.vocab_size))
    a, pa = sequence_loss(decl["kind"], head, target, seq, random.Random(5), HeadLoss(), states)
    b, pb = sequence_loss(decl["kind"], head, target, seq, random.Random(5), HeadLoss(), states,
                          every)  # fmt: skip
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert pa == pytest.approx(pb, rel=1e-12)


def _close(expected: torch.Tensor):
    # The loss reads out in float32, its subset's rows through another product than the full
    # head's here: a KL of ~5e-3 then differs by ~2e-8 on an AVX2-only CPU (2026-12-08).
    return pytest.approx(float(expected.detach()), rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("name", list(HEADS))
def test_a_loss_over_a_readout_learns_the_targets_renormalised_distribution(target, name) -> None:
    """Every head's KD part over N tokens: the target's softmax over those N tokens against the
    head's, whatever the two put on the other tokens."""
    decl = HEADS[name]
    torch.manual_seed(1)
    head = build_head(target, decl)
    seq, states = Sequence("s", tuple(IDS), 4), _fresh(target)
    rows = target_readout(target, SUBSET)
    loss, parts = sequence_loss(decl["kind"], head, target, seq, random.Random(5), HeadLoss(),
                                states, rows)  # fmt: skip
    final = states(list(IDS)).final[0]
    if name == "eagle":  # positions 0..T-2 predict the next feature
        feats = states(list(IDS))
        pred = head(feats.final[:, :-1], target.get_input_embeddings()(torch.tensor([IDS[1:]])),
                    torch.arange(len(IDS) - 1)[None])[0]  # fmt: skip
        p = torch.log_softmax(target.lm_head(final[1:])[:, SUBSET], -1)
        q = torch.log_softmax(target.lm_head(pred)[:, SUBSET], -1)
        assert parts["kl"] == _close((p.exp() * (p - q)).sum(-1).mean())
    elif name == "independent":
        p = torch.softmax(target.lm_head(final[4:])[:, SUBSET], -1)
        q = torch.log_softmax(head(torch.tensor([IDS])).logits[0, 4:, SUBSET], -1)
        assert parts["ce"] == _close(-(p * q).sum(-1).mean())
    else:  # MoA: its prediction of the final state from the seeded verification periods
        from kvspec.neural.moa import finish, moa_forward, verification

        known, tli = states(list(IDS)), decl.get("tli", 0)
        verified, bound = verification(len(IDS), 4, random.Random(5).randint(5, 15))
        pred = moa_forward(head, target, torch.tensor([IDS]), known.kv, bound, known.final)
        learned = torch.arange(len(IDS)) >= 4
        if tli:  # verified positions are the target's own; the rest are learned
            mixed = torch.where(verified[None, :, None], known.hidden[tli], pred)
            pred = finish(target, tli, mixed, torch.arange(len(IDS))[None])
            learned &= ~verified
        p = torch.softmax(target.lm_head(final[learned])[:, SUBSET], -1)
        q = torch.log_softmax(target.lm_head(pred[0, learned])[:, SUBSET], -1)
        assert parts["ce"] == _close(-(p * q).sum(-1).mean())
    assert 0.0 <= parts["match"] <= 1.0
    loss.backward()  # the gradient reaches the head, never the target's frozen output rows
    assert any(p.grad is not None for p in head.parameters())
    assert target.lm_head.weight.grad is None
