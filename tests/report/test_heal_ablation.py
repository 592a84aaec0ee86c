"""The Table 3.3 ablation table from heal_ablation's per-variant records."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from kvspec.report.heal_ablation import render_ablation


def _run(nll0: np.ndarray, nll1: np.ndarray, method: str, ranks: list[int], **restore) -> dict:
    restoration = {"method": method, "shrinkage": "none", "schedule": "uniform",
                   "rank_bounds": None, "latent_ranks": ranks, **restore}  # fmt: skip
    return {"budget": 64, "seconds": 1.0, "restoration": restoration,
            "val_nll_windows": {"0": nll0.tolist(), "64": nll1.tolist()}}  # fmt: skip


def test_rows_pair_every_variant_with_the_first(tmp_path) -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(5.0, 1.0, 16)
    worse = base + rng.normal(0.5, 0.05, 16)
    runs = {
        "pca": _run(base, base - 1, "transmla-pca", [8, 8]),
        "bounded": _run(
            worse,
            base - 0.9,
            "transmla-care",
            [6, 10],
            schedule="waterfill",
            rank_bounds=[0.5, 2.0],
            shrinkage="lambda_max",
        ),  # fmt: skip
    }
    files = {}
    for name, run in runs.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(run))
    item = {"model": "m", "rank": 8, "budget": 64, "reference": "pca", "runs": files,
            "variants": {"pca": {"calibration": "wikitext2"},
                         "bounded": {"calibration": "alpaca"}}}  # fmt: skip
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render_ablation(item, out)
    df = pd.read_csv(out["csv"])
    assert df["variant"].tolist() == ["pca", "bounded"]
    ref, row = df.iloc[0], df.iloc[1]
    assert ref["Δnll step 0"] == 0 and ref["Δnll healed"] == 0
    d = worse - base
    assert row["Δnll step 0"] == pytest.approx(d.mean())
    assert row["Δnll step 0 SE"] == pytest.approx(d.std(ddof=1) / math.sqrt(16))
    assert row["Δnll healed"] == pytest.approx(0.1)
    assert row["schedule"] == "waterfill [0.5, 2.0]" and row["ranks min/median/max"] == "6/8/10"
    assert row["shrinkage"] == "lambda_max" and ref["shrinkage"] == "-"
    assert row["calibration"] == "alpaca"
