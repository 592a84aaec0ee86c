"""The lecture's worked examples at ci scale: every rule ran and its numbers hang together."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ..conftest import shared_mirror

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")


def _read(ci_run: Path, example: str) -> dict:
    return json.loads((ci_run / "results" / "lecture" / f"{example}.json").read_text())


def test_roofline_and_batching(ci_run: Path) -> None:
    roof = _read(ci_run, "roofline")
    assert roof["machine"]["ridge"] > 0 and roof["h100"]["ridge"] == pytest.approx(295.2, abs=0.1)
    batching = _read(ci_run, "batching")
    assert [b["B"] for b in batching["batch"]] == [1, 4]
    assert (
        batching["batch"][1]["kv_bytes_per_sequence"]
        == batching["batch"][0]["kv_bytes_per_sequence"]
    )


def test_kv_cache_measured_equals_formula(ci_run: Path) -> None:
    kv = _read(ci_run, "kv_cache")
    labels = [m["model"] for m in kv["measured"]]
    assert labels[:2] == ["target", "target as MHA (KV heads repeated)"]
    assert any(label.startswith("MLA") for label in labels)  # the timed CARE conversion
    for m in kv["measured"]:
        assert m["ratio"] == pytest.approx(1.0), m


def test_quantization_and_speculative_example(ci_run: Path) -> None:
    q = _read(ci_run, "quantization")
    assert {r["method"] for r in q["model"]} == {"none", "rtn", "mixed", "awq"}
    toy = {r["method"]: r["y"] for r in q["toy"]}
    assert toy["RTN"] == 0 and toy["mixed precision"] == pytest.approx(3.0)
    spec = _read(ci_run, "speculative")
    ours = [e for e in spec["exactness"] if e["verifier"].startswith("verify_sampling")]
    assert ours and all(e["p_value"] > 1e-4 for e in ours)
    assert [a["k"] for a in spec["accepted_length"]] == [1, 2]


def test_scheduling_gives_every_request_the_same_tokens(ci_run: Path) -> None:
    s = _read(ci_run, "scheduling")
    assert set(s["runs"]) == {"static", "continuous"}
    assert s["same_tokens_as_first_policy"] == {"static": 1.0, "continuous": 1.0}
    assert s["runs"]["continuous"]["useful_share"] == 1.0


def test_paged_example_replays_the_scheduling_batches(ci_run: Path) -> None:
    p = _read(ci_run, "paged")
    layouts = {(a["policy"], a["layout"].split(" (")[0]): a for a in p["layouts"]}
    assert {policy for policy, _ in layouts} == {"static", "continuous"}
    for policy in ("static", "continuous"):
        blocks = next(a for (q, name), a in layouts.items() if q == policy and "blocks" in name)
        padded = layouts[(policy, "padded batch")]
        assert blocks["used_slots"] == padded["used_slots"] > 0
        assert 0 <= blocks["wasted_share"] < 1
    assert p["shared"]["reads_back_exactly"] and p["kv_bytes_per_token"] > 0


def test_lecture_tables_rendered(ci_run: Path) -> None:
    for example in ("roofline", "batching", "kv_cache", "quantization", "speculative", "paged"):
        table = pd.read_csv(ci_run / "results" / "report" / f"lecture_{example}.csv")
        assert {"quantity", "setting", "ours", "paper"} <= set(table.columns), example
    assert (ci_run / "results/report/lecture_roofline_figure.png").read_bytes()[:4] == b"\x89PNG"
