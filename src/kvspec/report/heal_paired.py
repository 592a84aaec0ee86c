"""Table 3.3, paired: CARE(E) Init against every other healing initialisation on the same
held-out windows, before healing and at each budget (validation perplexity with standard
errors, and the paired difference of mean NLL)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from kvspec.io import read_json
from kvspec.report.tables import write_table

REFERENCE = "transmla-care"


def paired_rows(windows: dict[str, dict[str, list[float]]], labels: dict[str, str]) -> list[dict]:
    """One row per (other method, tokens seen) both methods were evaluated at."""
    ref = windows[REFERENCE]
    rows = []
    for other, theirs in windows.items():
        for tokens in (t for t in ref if t in theirs and other != REFERENCE):
            a, b = np.asarray(ref[tokens]), np.asarray(theirs[tokens])
            rows.append({
                "comparison": f"{labels[REFERENCE]} vs {labels[other]}",
                "tokens": int(tokens),
                f"val_ppl ({labels[REFERENCE]})": ppl_text(a),
                "val_ppl (other)": ppl_text(b),
                **paired_difference(a, b),
            })  # fmt: skip
    return rows


def paired_difference(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Mean per-window NLL difference a − b (negative: a lower), its paired SE, z and the
    perplexity ratio exp(diff)."""
    d = np.asarray(a) - np.asarray(b)
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")
    return {
        "ppl_ratio": math.exp(float(d.mean())),
        "nll_diff": float(d.mean()),
        "nll_diff_se": se,
        "z": float(d.mean()) / se if se > 0 else float("nan"),
        "windows": len(d),
    }


def ppl_text(nll: np.ndarray) -> str:
    """exp(mean NLL) ± its delta-method standard error, as text."""
    ppl = math.exp(float(nll.mean()))
    se = ppl * float(nll.std(ddof=1)) / math.sqrt(len(nll)) if len(nll) > 1 else float("nan")
    return f"{ppl:.4g} ± {se:.2g}"


def render_paired(item: dict[str, Any], labels: dict[str, str], outputs: dict[str, str]) -> None:
    windows = {m: read_json(path)["val_nll_windows"] for m, path in item["stats"].items()}
    rows = paired_rows(windows, labels) if REFERENCE in windows else []
    notes = [
        "Measured here on the healing run's held-out windows (the same windows for every "
        "method): val_ppl = exp(mean window NLL) ± delta-method SE; nll_diff = mean over "
        "windows of NLL(CARE(E) Init) − NLL(other), with its paired SE and z = diff / SE "
        "(|z| > 2: the difference is beyond two standard errors). tokens 0 = before healing.",
        "No paper numbers: the thesis reports no validation perplexities for Table 3.3.",
    ]
    if not rows:
        notes.append(f"NOT MEASURED: no {REFERENCE} restoration in care.heal.methods.")
    write_table(
        pd.DataFrame(rows),
        outputs["paired_csv"],
        outputs["paired_md"],
        "Table 3.3, paired validation perplexity",
        notes,
    )
