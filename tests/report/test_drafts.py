"""The draft-model table: one row per draft, prompt set and confidence cut-off, distillation
stats when present."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvspec.report import render
from kvspec.report.drafts import quality_frame


def _quality(accept: dict[str, float]) -> dict:
    costs = {"1": {"target_ms": 60.0, "draft_ms": 6.0, "ratio": 0.1},
             "4": {"target_ms": 90.0, "draft_ms": 9.0, "ratio": 0.1},
             "5": {"target_ms": 100.0, "draft_ms": 10.0, "ratio": 0.1}}  # fmt: skip

    def row(cut: float, a: float) -> dict:
        return {"cutoff": cut, "accept_len": a, "acceptance": 0.5, "predicted_speedup": 1.5,
                "drafted": 30, "steps": 10 if cut else 30 / 4}  # fmt: skip

    sets = {s: {"0": row(0.0, a), "0.5": row(0.5, a - 0.1)} for s, a in accept.items()}
    return {"k": 4, "cache_len": 256, "costs": costs, "sets": sets,
            "parameters": {"target": 134_515_008, "draft": 16_000_000}}  # fmt: skip


def test_draft_table(tmp_path: Path) -> None:
    files = {}
    for name, accept in (
        ("draft", {"humaneval": 2.0, "general": 1.5}),
        ("old", {"humaneval": 1.2, "general": 1.1}),
    ):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(_quality(accept)))
    stats = tmp_path / "stats.json"
    stats.write_text(
        json.dumps({"train_seconds_this_run": 123.45, "final": {"val_match": 0.61234}})
    )
    item = {
        "rows": [
            {
                "model": "draft",
                "target": "target",
                "quality": str(files["draft"]),
                "stats": str(stats),
            },
            {"model": "old", "target": "target", "quality": str(files["old"]), "stats": None},
        ],
        "labels": {"humaneval": "HumanEval", "general": "General"},
    }
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render(
        "drafts:render",
        item,
        {"quality": [str(f) for f in files.values()], "stats": [str(stats)]},
        out,
    )
    df = pd.read_csv(out["csv"])
    assert list(df["draft"]) == ["draft"] * 4 + ["old"] * 4
    assert list(df["set"]) == ["HumanEval", "HumanEval", "General", "General"] * 2
    assert list(df["cutoff"]) == [0.0, 0.5] * 4
    row, cut = df.iloc[0], df.iloc[1]
    assert row["accept_len"] == 2.0 and row["acceptance_%"] == 50.0 and row["cost_ratio_q5"] == 0.1
    assert row["drafted_per_step"] == 4.0 and cut["drafted_per_step"] == 3.0
    assert cut["accept_len"] == 1.9
    assert row["distil_seconds"] == 123.5 and row["val_match"] == pytest.approx(0.612)
    assert pd.isna(df.iloc[4]["distil_seconds"])  # not distilled here
    assert "predicted_speedup = " in Path(out["md"]).read_text()


def _one_run() -> dict:
    run = {"cutoff": 0.5, "drafted": 10, "steps": 5, "accept_len": 1.5, "acceptance": 0.3,
           "predicted_speedup": 1.2}  # fmt: skip
    costs = {str(q): {"ratio": 0.06} for q in (1, 5)}
    return {"k": 4, "costs": costs, "parameters": {"draft": 4e7, "target": 1.3e8},
            "sets": {"humaneval": {"0.5": run}}}  # fmt: skip


def _item(tmp_path, stats: dict) -> dict:
    (tmp_path / "q.json").write_text(json.dumps(_one_run()))
    (tmp_path / "s.json").write_text(json.dumps(stats))
    row = {"model": "draft", "target": "target", "quality": str(tmp_path / "q.json"),
           "stats": str(tmp_path / "s.json")}  # fmt: skip
    return {"rows": [row], "labels": {"humaneval": "HumanEval"}}


def test_a_calibrated_draft_shows_its_temperature_and_both_alphas(tmp_path) -> None:
    calibration = {"temperature": 0.7, "uncalibrated": {"val_alpha": 0.4899}}
    stats = {"final": {"val_alpha": 0.5113, "val_match": 0.54}, "calibration": calibration}
    row = quality_frame(_item(tmp_path, stats)).iloc[0]
    assert row["temperature"] == 0.7 and row["val_alpha"] == 0.511
    assert row["val_alpha_at_1"] == 0.49 and row["set"] == "HumanEval"


def test_an_uncalibrated_draft_has_temperature_one(tmp_path) -> None:
    stats = {"final": {"val_alpha": 0.49}, "calibration": None}
    row = quality_frame(_item(tmp_path, stats)).iloc[0]
    assert row["temperature"] == 1.0 and row["val_alpha_at_1"] == row["val_alpha"] == 0.49
