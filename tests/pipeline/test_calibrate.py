"""The simulator's calibration: the line fit, and what each timed call runs (the timer replaced
by a count of the draft model's forwards, so nothing here depends on the machine's speed)."""

from __future__ import annotations

import pytest

import kvspec.pipeline.calibrate as calibration
from kvspec.decoding.draft_model import DraftModelDrafter
from kvspec.pipeline.calibrate import calibrate, fit_line
from tests.pipeline.test_stage import tiny_llama


def test_fit_line_is_least_squares_with_the_intercept_floored() -> None:
    assert fit_line([1, 2, 4], [3.0, 5.0, 9.0]) == pytest.approx((1.0, 2.0))
    assert fit_line([1, 2, 4], [0.0, 2.0, 6.0]) == pytest.approx((0.0, 2.0))  # -2 floored


def test_drafting_k_tokens_runs_k_draft_forwards(monkeypatch) -> None:
    """Each timed drafting call feeds one new context token and drafts k: k forwards of the
    draft, one token each (the cost line the simulator fits over k)."""
    fed: list[int] = []
    feed = DraftModelDrafter._feed

    def counted(self, tokens):
        fed.append(len(tokens))
        return feed(self, tokens)

    def forwards(fn, repeats: int) -> float:  # the draft forwards of one call, after a warm-up
        fn()
        fed.clear()
        fn()
        assert all(n == 1 for n in fed)
        return float(len(fed))

    monkeypatch.setattr(DraftModelDrafter, "_feed", counted)
    monkeypatch.setattr(calibration, "median_seconds", forwards)
    cal, raw = calibrate(tiny_llama(0, 3), tiny_llama(1, 1), context=16, repeats=1, seed=0)
    assert raw["medians_s"]["draft"] == {1: 1.0, 2: 2.0, 4: 4.0}
    assert cal.draft == pytest.approx((0.0, 1.0))
    assert cal.layers == 3 and cal.hidden == 32 and cal.bytes_per_value == 8
