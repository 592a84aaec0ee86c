"""Table 3 of the client-server stage: tokens/s pooled per profile, τ and calls from the runs;
a drafter the document lists twice (Independent) gets our numbers on its first row only."""

from __future__ import annotations

import pandas as pd
import pytest

from kvspec.report.remote import table_3

from ..conftest import REPO

PAPER = REPO / "config" / "paper_results" / "moa_table_3.csv"


def _job(name: str, speed: float) -> dict:
    runs = [{"cut": None, "profile": prof, "new_tokens": 10, "tokens_per_s": speed * f,
             "verified": 10, "calls": 5} for prof, f in (("5G", 1.0), ("4G", 0.5))]  # fmt: skip
    runs.append({"cut": 1, "profile": "none", "new_tokens": 10, "tokens_per_s": 99.0,
                 "verified": 1, "calls": 1})  # fmt: skip
    return {"runs": runs, "meta": {"drafter": name, "profiles": ["5G", "4G"]},
            "head": {"trainable_parameters": 2_000_000}}  # fmt: skip


def test_table_3_pools_uncut_runs_and_fills_the_first_duplicate_only() -> None:
    item = {"labels": {"ours": "Ours (TLI=0)", "independent": "Independent"}}
    table = table_3([_job("ours", 8.0), _job("independent", 4.0)], item, str(PAPER))
    ours = table.set_index("drafter").loc["Ours (TLI=0)"]
    assert ours["tps_5g (ours)"] == pytest.approx(8.0) and ours["tps_4g (ours)"] == 4.0
    assert ours["accept_len (ours)"] == 2.0 and ours["calls_large (ours)"] == 5.0
    independent = table[table["drafter"] == "Independent"]
    assert len(independent) == 2  # the document's two sizes
    assert independent["tps_5g (ours)"].notna().sum() == 1
    assert independent["trainable_size"].notna().sum() == 1
    assert pd.isna(table.set_index("drafter").loc["Ours (TLI=3)", "tps_5g (ours)"])
