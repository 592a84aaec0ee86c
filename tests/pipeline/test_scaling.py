"""The simulator's calibration from real-run records, its validation, and its sweeps."""

from __future__ import annotations

import pytest

from kvspec.pipeline import scaling
from kvspec.pipeline.simulate import Calibration, Link, Setting, simulate

CAL = Calibration(layer=(1e-3, 1e-4), head=(2e-3, 1e-4), draft=(1e-3, 5e-4), layers=8,
                  hidden=64)  # fmt: skip
LINK = Link(2e-4, 1e9)
SETTINGS = {"k": 4, "max_new_tokens": 24,
            "pipeinfer": {"micro_batch": 4, "partitions": 8}}  # fmt: skip


def _record(alpha: float = 0.7) -> dict:
    """Runs 'measured' by the simulator itself, so validation must find no error."""
    rows = []
    for strategy, n in (("iterative", 1), ("iterative", 2), ("speculative", 2)):
        out = simulate(CAL, LINK, Setting(strategy, n, alpha, prompt=20, new_tokens=24, k=4))
        kept = {m: out[m] for m in ("tokens_per_s", "ttft_s", "itl_s", "accepted")}
        rows.append({"strategy": strategy, "n_stages": n, "prompt_tokens": 20,
                     "pipeline_runs": out["runs"], "link": vars(LINK) if n > 1 else None,
                     "exact": True, **kept})  # fmt: skip
    return {"runs": rows, "settings": SETTINGS, "calibration": vars(CAL),
            "calibration_raw": {"bytes": {"layer": 2**20, "embed": 2**21, "head": 0,
                                          "draft": 2**22}}}  # fmt: skip


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
def test_estimate_alpha_inverts_the_geometric_mean(alpha) -> None:
    mean = sum(alpha**i for i in range(1, 5))
    assert scaling.estimate_alpha(100 * mean, 100, 4) == pytest.approx(alpha, abs=1e-6)


def test_validation_of_simulated_runs_has_no_error_for_iterative() -> None:
    rows = {(r["strategy"], r["n_stages"]): r for r in scaling.validation(_record(), seeds=1)}
    assert rows[("iterative", 1)]["speed_error"] == pytest.approx(0.0, abs=1e-9)
    assert rows[("iterative", 2)]["speed_error"] == pytest.approx(0.0, abs=1e-9)
    assert 0.0 < rows[("speculative", 2)]["alpha"] <= 1.0


def test_curves_ablation_and_memory_cover_what_was_asked() -> None:
    record = _record()
    links = {"slow": {"latency_s": 1e-3, "bandwidth_bps": 1e7}}
    curves = scaling.curves(record, links, {"paper": 0.5}, nodes=[1, 2, 8, 16], seeds=2)
    assert {c["link"] for c in curves} == {"loopback (measured)", "slow"}
    assert {c["nodes"] for c in curves} == {1, 2, 8}  # 16 > the model's 8 layers
    assert len(curves) == 2 * 2 * 3 * 3
    abl = scaling.ablation(record, None, {"pair": 0.5}, nodes=4, batch=8, seeds=2)
    assert [a["variant"] for a in abl] == ["PipeInfer", "no early cancellation",
                                          "no continuous speculation", "speculative",
                                          "iterative"]  # fmt: skip
    mem = {m["nodes"]: m for m in scaling.memory(record, [1, 3, 8])}
    assert mem[1]["head_node_mb"] == pytest.approx(8 + 2)
    assert mem[3]["head_node_mb"] == pytest.approx(3 + 2) and mem[3]["other_node_mb"] == 2
    assert mem[8]["draft_node_mb"] == 4


def test_no_link_or_no_speculation_is_an_error() -> None:
    record = _record()
    with pytest.raises(ValueError, match="no run measured the link"):
        scaling.measured_link([r for r in record["runs"] if r["n_stages"] == 1])
    with pytest.raises(ValueError, match="speculative strategy did not run"):
        scaling.measured_alpha([r for r in record["runs"] if r["strategy"] != "speculative"], 4)


def test_measured_ablations_stay_out_of_the_validation_and_get_their_own_rows() -> None:
    record = _record()
    spec = next(r for r in record["runs"] if r["strategy"] == "speculative")
    for variant, speed in (("", 9.0), ("no early cancellation", 7.0)):
        record["runs"].append({**spec, "strategy": "pipeinfer", "variant": variant,
                               "tokens_per_s": speed, "exact": True})  # fmt: skip
    record["settings"] = {**SETTINGS, "n_stages": [2], "ablations": ["no early cancellation"],
                          "pipeinfer": {**SETTINGS["pipeinfer"], "batch": 8}}  # fmt: skip
    valid = {(v["strategy"], v["n_stages"]): v for v in scaling.validation(record, seeds=1)}
    assert valid[("pipeinfer", 2)]["measured_tokens_per_s"] == 9.0  # not the ablation's 7
    rows = {r["variant"]: r for r in scaling.measured_ablation(record, seeds=1)}
    assert set(rows) == {"iterative", "speculative", "PipeInfer", "no early cancellation"}
    assert rows["no early cancellation"]["measured_tokens_per_s"] == 7.0
    assert rows["PipeInfer"]["simulated_tokens_per_s"] > 0 and rows["PipeInfer"]["all_exact"]
    record["settings"]["ablations"] = []
    assert scaling.measured_ablation(record, seeds=1) == []
