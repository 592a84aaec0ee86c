"""The target's states cached per training sequence: what a head's loss reads from the cache is
what one target forward gives, every job after the first reads instead of computing, and a
head trained on cached states is the head trained on fresh ones."""

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
