"""Standard errors per cell, paired differences between variants on the same documents, and the
prompt-sampling error of a ratio over prompts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvspec.report.stats import (
    add_stderr,
    display_with_stderr,
    documents_to_resolve,
    paired_difference,
    paired_ratio_difference,
    paired_speed_ratio,
    ratio_stderr,
    stderr_row,
)


def _record(arc: list[float], piqa: list[float], ppl: float = 10.0) -> dict:
    def acc(scores):
        docs = {f"t/{i}": s for i, s in enumerate(scores)}
        se = float(np.std(scores, ddof=1) / math.sqrt(len(scores)))
        return {"metric": "acc", "value": float(np.mean(scores)), "stderr": se, "per_doc": docs}

    wiki = {"metric": "word_perplexity", "value": ppl, "stderr": None, "per_doc": None}
    return {"metrics": {"wiki": wiki, "arc": acc(arc), "piqa": acc(piqa)}}


def test_stderr_row_in_points_with_avg() -> None:
    rec = _record([1, 0, 1, 0], [1, 1, 1, 0])
    row = stderr_row(rec)
    assert row["arc"] == pytest.approx(100 * 0.5773502 / 2, rel=1e-5)
    assert math.isnan(row["wiki_ppl"])
    assert row["avg"] == pytest.approx(math.sqrt(row["arc"] ** 2 + row["piqa"] ** 2) / 2)


def test_paired_difference_uses_only_shared_documents() -> None:
    a = _record([1, 1, 1, 0], [1, 0, 1, 1])
    b = _record([0, 1, 0, 0], [1, 0, 1, 1])
    del b["metrics"]["arc"]["per_doc"]["t/3"]  # scored on three documents only
    diff = paired_difference(a, b)
    mean, se, n = diff["arc"]
    assert n == 3 and mean == pytest.approx(100 * 2 / 3)
    assert se == pytest.approx(100 * np.std([1, 0, 1], ddof=1) / math.sqrt(3))
    assert diff["piqa"] == (0.0, 0.0, 4)  # identical answers: no difference, no error
    assert diff["avg"][0] == pytest.approx((mean + 0.0) / 2)
    assert "wiki" not in diff


def test_stderr_columns_and_markdown_display() -> None:
    df = pd.DataFrame({"m": ["A", "B"], "acc (ours)": [50.0, 40.0], "acc (paper)": [1.0, 2.0]})
    errors = pd.DataFrame({"m": ["A"], "acc": [2.5]})
    out = add_stderr(df, errors, ["m"])
    assert list(out.columns) == ["m", "acc (ours)", "acc stderr (ours)", "acc (paper)"]
    shown = display_with_stderr(out)
    assert list(shown["acc (ours)"]) == ["50 ± 2.5", "40"]
    assert "acc stderr (ours)" not in shown


def test_documents_to_resolve_scale_the_measured_error_as_one_over_root_n() -> None:
    # 80 documents with a 5.5-point paired SE: 1.5 points (3 at 2 SE) needs (5.5/1.5)^2 x 80
    assert documents_to_resolve(5.5, 80) == math.ceil(80 * (5.5 / 1.5) ** 2) == 1076
    assert documents_to_resolve(1.5, 80) == 80  # already there
    assert documents_to_resolve(3.0, 100, points=6.0, z=1.0) == 25
    assert documents_to_resolve(0.0, 80) is None  # identical answers: nothing to scale
    assert documents_to_resolve(float("nan"), 80) is None and documents_to_resolve(2.0, 1) is None


def _prompts(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, forwards) of `n` prompts with unequal lengths and acceptance."""
    rng = np.random.default_rng(seed)
    forwards = rng.integers(20, 60, size=n).astype(float)
    return forwards * rng.uniform(1.1, 1.8, size=n), forwards


def test_ratio_stderr_matches_the_bootstrap_of_the_pooled_ratio() -> None:
    tokens, forwards = _prompts(400, seed=1)
    rng = np.random.default_rng(2)
    draws = rng.integers(0, len(tokens), size=(4000, len(tokens)))
    boot = (tokens[draws].sum(axis=1) / forwards[draws].sum(axis=1)).std()
    assert ratio_stderr(tokens, forwards) == pytest.approx(boot, rel=0.08)


def test_ratio_stderr_edges() -> None:
    assert ratio_stderr([3.0, 6.0, 9.0], [2.0, 4.0, 6.0]) == pytest.approx(0.0)  # one ratio
    assert math.isnan(ratio_stderr([3.0], [2.0]))
    with pytest.raises(ValueError, match="as many numerators"):
        ratio_stderr([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="summing above 0"):
        ratio_stderr([1.0, 2.0], [0.0, 0.0])


def test_paired_ratio_difference_cancels_what_the_prompts_share() -> None:
    tokens, forwards = _prompts(30, seed=3)
    better = (tokens * 1.05, forwards)  # every prompt 5 % more tokens per forward
    diff, se = paired_ratio_difference(better, (tokens, forwards))
    assert diff == pytest.approx(0.05 * tokens.sum() / forwards.sum())
    assert se == pytest.approx(0.05 * ratio_stderr(tokens, forwards), rel=1e-9)
    unpaired = math.hypot(ratio_stderr(*better), ratio_stderr(tokens, forwards))
    assert se < unpaired / 10  # a shared difficulty is not noise of the difference
    with pytest.raises(ValueError, match="same units"):
        paired_ratio_difference((tokens[:5], forwards[:5]), (tokens, forwards))


def test_paired_speed_ratio_matches_the_paired_bootstrap() -> None:
    rng = np.random.default_rng(4)
    n = 300
    tokens = rng.integers(40, 129, size=n).astype(float)
    base = tokens * rng.uniform(0.01, 0.03, size=n)  # prompts differ a lot in speed
    ours, peer = base * rng.uniform(0.9, 1.0, size=n), base * rng.uniform(0.95, 1.05, size=n)
    peer_tokens = tokens + rng.integers(-5, 6, size=n)  # a peer engine's outputs may differ
    ratio, se = paired_speed_ratio((tokens, ours), (peer_tokens, peer))
    speed = lambda t, s: t.sum(axis=-1) / s.sum(axis=-1)  # noqa: E731
    assert ratio == pytest.approx(speed(tokens, ours) / speed(peer_tokens, peer))
    draws = rng.integers(0, n, size=(4000, n))
    boot = speed(tokens[draws], ours[draws]) / speed(peer_tokens[draws], peer[draws])
    assert se == pytest.approx(boot.std(), rel=0.08)
    # ours takes 5 % less time on every prompt: paired, that is many errors from a tie
    assert (ratio - 1.0) / se > 5


def test_paired_speed_ratio_with_equal_tokens_is_the_ratio_of_times() -> None:
    tokens, seconds_a, seconds_b = [100.0, 80.0, 128.0], [1.0, 2.0, 1.5], [1.2, 2.1, 2.0]
    ratio, se = paired_speed_ratio((tokens, seconds_a), (tokens, seconds_b))
    assert ratio == pytest.approx(sum(seconds_b) / sum(seconds_a))
    assert se == pytest.approx(ratio_stderr(seconds_b, seconds_a))
    assert math.isnan(paired_speed_ratio(([1.0], [1.0]), ([1.0], [2.0]))[1])
    with pytest.raises(ValueError, match="same units"):
        paired_speed_ratio(([1.0, 2.0], [1.0, 1.0]), ([1.0], [1.0]))
    with pytest.raises(ValueError, match="above 0"):
        paired_speed_ratio(([1.0, 2.0], [0.0, 0.0]), ([1.0, 1.0], [1.0, 1.0]))


def test_paired_runs_ratio_pairs_the_prompts_both_methods_ran() -> None:
    from kvspec.report.stats import paired_runs_ratio

    def runs(times: dict[str, float]) -> dict[str, dict]:
        return {q: {"tokens": [0] * 10, "seconds": t} for q, t in times.items()}

    ours, peer = runs({"a": 1.0, "b": 2.0, "c": 9.0}), runs({"b": 3.0, "a": 1.5})
    ratio, se, n = paired_runs_ratio(ours, peer)  # "c" only ours ran: left out
    assert n == 2
    assert (ratio, se) == paired_speed_ratio(([10, 10], [1.0, 2.0]), ([10, 10], [1.5, 3.0]))
    with pytest.raises(ValueError, match="no prompt in common"):
        paired_runs_ratio(ours, runs({"z": 1.0}))
