"""Paired validation-perplexity rows of Table 3.3 from per-window NLLs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvspec.report.heal_paired import paired_rows

LABELS = {"svd": "SVD", "transmla": "TransMLA", "transmla-care": "CARE(E) Init"}


def test_paired_difference_and_its_standard_error() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(5.0, 1.0, 50)  # shared window difficulty: pairing removes it
    care = base + rng.normal(-0.10, 0.02, 50)
    windows = {
        "transmla-care": {"0": care.tolist(), "64": (care - 1).tolist()},
        "transmla": {"0": base.tolist(), "64": (base - 1).tolist()},
        "svd": {"0": base.tolist()},  # evaluated at step 0 only: one row
    }
    rows = paired_rows(windows, LABELS)
    assert [(r["comparison"], r["tokens"]) for r in rows] == [
        ("CARE(E) Init vs TransMLA", 0), ("CARE(E) Init vs TransMLA", 64),
        ("CARE(E) Init vs SVD", 0),
    ]  # fmt: skip
    row = rows[0]
    d = care - base
    assert row["nll_diff"] == pytest.approx(d.mean())
    assert row["nll_diff_se"] == pytest.approx(d.std(ddof=1) / math.sqrt(50))
    assert row["z"] < -20  # paired: far beyond the unpaired spread of window difficulty
    assert row["ppl_ratio"] == pytest.approx(math.exp(d.mean()))
    assert row["val_ppl (CARE(E) Init)"].startswith(f"{math.exp(care.mean()):.4g} ± ")
