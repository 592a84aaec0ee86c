"""Decode-step and prefill timing on a real cache."""

import torch

from kvspec.lecture import batching as b
from tests.tiny import tiny_llama


def test_decode_steps_report_the_cache_per_sequence() -> None:
    model = tiny_llama(0, double=False)
    times, kv = b.decode_steps(model, batch=3, context=10, steps=2, gen=torch.Generator())
    assert len(times) == 2 and all(t > 0 for t in times)
    assert kv == 2 * 2 * 2 * 8 * 10 * 4  # layers x (K, V) x kv heads x head_dim x tokens x bytes


def test_batch_and_ttft_rows() -> None:
    model = tiny_llama(0, double=False)
    rows = b.batch_rows(model, [1, 4], context=8, steps=2, bandwidth=1e10, seed=0)
    assert [r["B"] for r in rows] == [1, 4]
    assert rows[1]["predicted_step_ms"] > rows[0]["predicted_step_ms"]
    assert all(r["tok_s"] == r["B"] / (r["step_ms"] / 1e3) for r in rows)
    ttft = b.ttft_rows(model, [4, 16], repeats=1, seed=0)
    assert [t["prompt_tokens"] for t in ttft] == [4, 16]
