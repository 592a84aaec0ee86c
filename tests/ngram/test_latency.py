"""Draft latency: timings per pattern, with the drafter the caller configures."""

from __future__ import annotations

import numpy as np
import pytest

from kvspec.ngram.drafters import InfiniGramDrafter
from kvspec.ngram.index import build_index, open_engine
from kvspec.ngram.latency import draft_latency, percentiles


def test_percentiles_in_milliseconds():
    t = percentiles([0.001] * 9 + [0.011])
    assert t["p50_ms"] == pytest.approx(1.0) and t["n"] == 10
    assert t["mean_ms"] == pytest.approx(2.0)
    assert np.isnan(percentiles([])["p90_ms"])


def test_draft_latency_walks_every_position_with_the_given_drafter(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 6, 30).tolist() for _ in range(50)]
    build_index(docs, tmp_path / "idx", vocab_size=7, eos_token_id=6)
    engine = open_engine(tmp_path / "idx", 7, 6, max_support=1000)
    made = []

    def make():
        made.append(1)
        return InfiniGramDrafter(engine, min_match=50)  # longer than any match: no drafts

    pairs = [([1, 2], [3, 4, 5]), ([0], [1, 1])]
    result = draft_latency(make, pairs, k=16, sequential_contexts=3)
    assert result["contexts"] == 4 + 3  # every prefix of each response, empty one included
    assert result["decode"]["n"] == 7 and result["sequential"]["n"] == 3
    assert result["lookup"]["n"] == 2  # every fourth context, a fresh drafter each
    assert result["mean_drafted"] == 0.0  # the configured min_match was used
    assert len(made) == 2 + 2 + 1  # per response, per cold lookup, one for the engine
