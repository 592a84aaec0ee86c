"""Continuous and static batching over one left-padded cache give every request its greedy
tokens; continuous batching wastes no slot on finished rows."""

import pytest
import torch

from kvspec.decoding.loop import greedy_generate
from kvspec.lecture import scheduler as sch
from tests.tiny import tiny_llama


def _requests() -> list[sch.Request]:
    gen = torch.Generator().manual_seed(0)
    lengths, wants = [3, 9, 5, 2, 7, 4], [6, 1, 9, 3, 2, 5]
    return [sch.Request(i, torch.randint(0, 64, (n,), generator=gen).tolist(), k)
            for i, (n, k) in enumerate(zip(lengths, wants, strict=True))]  # fmt: skip


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_every_request_gets_its_greedy_tokens(policy: str) -> None:
    model = tiny_llama(0)
    requests = _requests()
    finished, batch = sch.run(model, requests, slots=3, policy=policy)
    assert [f.rid for f in finished] == [r.rid for r in requests]
    for f, r in zip(finished, requests, strict=True):
        assert f.tokens == greedy_generate(model, r.prompt, r.new_tokens), r.rid
    assert not batch.rows


def test_continuous_uses_fewer_row_steps_than_static() -> None:
    model = tiny_llama(0)
    static = sch.run(model, _requests(), slots=3, policy="static")[1]
    continuous = sch.run(model, _requests(), slots=3, policy="continuous")[1]
    useful = sum(r.new_tokens - 1 for r in _requests())  # the first token comes from prefill
    assert continuous.row_steps == useful < static.row_steps


def test_summary_and_errors() -> None:
    model = tiny_llama(0)
    finished, batch = sch.run(model, _requests(), slots=2, policy="continuous")
    s = sch.summary(finished, batch, seconds=1.0)
    assert s["tokens"] == sum(r.new_tokens for r in _requests()) and s["useful_share"] == 1
    with pytest.raises(ValueError, match="policy"):
        sch.run(model, _requests(), slots=2, policy="fifo")


def test_arrivals_are_waited_for() -> None:
    model = tiny_llama(0)
    requests = [sch.Request(0, [1, 2], 2, 0.0), sch.Request(1, [3, 4, 5], 2, 0.05)]
    finished, _ = sch.run(model, requests, slots=2, policy="continuous")
    assert finished[1].first_token >= 0.05


def test_sliding_window_models_are_refused() -> None:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                           head_dim=16, sliding_window=8)  # fmt: skip
    with pytest.raises(ValueError, match="full attention"):
        sch.Batch(Gemma3ForCausalLM(cfg))
