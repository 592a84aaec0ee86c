"""The pipeline simulator: closed forms where they exist, and PipeInfer's behaviour at the
extremes of acceptance."""

from __future__ import annotations

import math

import pytest

from kvspec.pipeline.simulate import Calibration, Link, Pipeline, Setting, _Run, simulate

CAL = Calibration(layer=(1e-3, 1e-4), head=(2e-3, 1e-4), draft=(1e-3, 5e-4), layers=12,
                  hidden=64)  # fmt: skip
LINK = Link(latency_s=5e-4, bandwidth_bps=1e8)


def _run(strategy: str, nodes: int, alpha: float = 0.8, **kw) -> dict:
    return simulate(CAL, LINK, Setting(strategy, nodes, alpha, prompt=16, new_tokens=20, **kw))


@pytest.mark.parametrize("nodes", [1, 2, 3, 12])
def test_iterative_matches_its_closed_form(nodes) -> None:
    hop = LINK.time(CAL.hidden * 4) if nodes > 1 else 0.0
    per_token = CAL.stage(12, 1) + nodes * hop + CAL.sample(1)
    out = _run("iterative", nodes)
    assert out["itl_s"] == pytest.approx(per_token)
    assert out["new_tokens"] == 20 and out["runs"] == 20


def test_speculative_with_perfect_drafts_matches_its_closed_form() -> None:
    per_run = CAL.drafting(4) + CAL.stage(12, 5) + CAL.sample(5)
    out = _run("speculative", 1, alpha=1.0)
    assert out["runs"] == 4 and out["accepted"] == 16  # 5 tokens per run
    assert out["tokens_per_s"] == pytest.approx(19 / (3 * per_run))


def test_pipeinfer_on_one_node_is_iterative() -> None:
    """No pipeline, no idle head: never speculates."""
    out = _run("pipeinfer", 1, alpha=1.0)
    assert out["drafted"] == 0
    assert out["itl_s"] == pytest.approx(_run("iterative", 1)["itl_s"])


@pytest.mark.parametrize("nodes", [2, 4, 12])
def test_pipeinfer_with_perfect_drafts_beats_iterative_and_cancels_nothing(nodes) -> None:
    out = _run("pipeinfer", nodes, alpha=1.0)
    assert out["cancelled"] == 0 and out["drafted"] > 0 and out["new_tokens"] == 20
    assert out["tokens_per_s"] > _run("iterative", nodes)["tokens_per_s"]


def test_pipeinfer_with_useless_drafts_cancels_and_still_finishes() -> None:
    out = _run("pipeinfer", 4, alpha=0.0)
    assert out["cancelled"] > 0 and out["accepted"] == 0 and out["new_tokens"] == 20


def test_a_cancelled_run_skips_the_stages_it_has_not_reached() -> None:
    """Two runs queued behind a long one; cancelling the second before it reaches node 2
    frees node 2 for the third and brings both results back sooner."""
    pipe = Pipeline(CAL, LINK, 3)
    runs = [_Run(64, 0.0, False), _Run(4, 0.001, True), _Run(1, 0.002, False)]
    for r in runs:
        pipe.send(r)
    before = [r.back for r in runs]
    pipe.cancel(runs[1], 0.0015)  # node 1 is busy with run 0 until well after this
    assert runs[1].finish[0] == runs[0].finish[0]  # no time on node 1 or node 2
    assert runs[1].back < before[1] and runs[2].back < before[2]
    assert runs[0].back == before[0]


def test_cancellation_with_poor_drafts_counts_cancelled_runs() -> None:
    on = _run("pipeinfer", 6, alpha=0.3, seed=1)
    off = _run("pipeinfer", 6, alpha=0.3, seed=1, cancellation=False)
    assert on["cancelled"] > 0 and off["cancelled"] > 0
    assert on["new_tokens"] == off["new_tokens"] == 20


def test_deterministic_per_seed() -> None:
    assert _run("pipeinfer", 3, alpha=0.6, seed=5) == _run("pipeinfer", 3, alpha=0.6, seed=5)
    assert math.isfinite(_run("speculative", 3, alpha=0.6)["ttft_s"])


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="strategy must be one of"):
        _run("telepathy", 2)
    with pytest.raises(ValueError, match="alpha must lie in"):
        _run("pipeinfer", 2, alpha=1.5)
    with pytest.raises(ValueError, match="cannot split 12 layers over 13 nodes"):
        _run("iterative", 13)
