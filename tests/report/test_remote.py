"""Tables 3 and 4 of the client-server stage: tokens/s pooled per profile, τ and calls from
the runs; a drafter the document lists twice (Independent) gets our numbers on its first row
only; pass@1 per cut, its lower bound, and the share of the uncut answer a cut answer keeps."""

from __future__ import annotations

import pandas as pd
import pytest

from kvspec.report.remote import table_3, table_4

from ..conftest import REPO

PAPER = REPO / "config" / "paper_results" / "moa_table_3.csv"
PAPER_4 = REPO / "config" / "paper_results" / "moa_table_4.csv"


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


def _cut_job() -> dict:
    uncut = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    runs = [{"prompt": "p", "cut": None, "profile": "5G", "tokens": uncut, "passed": 1.0},
            {"prompt": "p", "cut": None, "profile": "4G", "tokens": uncut, "passed": 1.0},
            {"prompt": "p", "cut": 1, "profile": "none", "tokens": [1, 2, 0, 4, 5],
             "passed": 0.0, "lower_bound_passed": 0.0},
            {"prompt": "p", "cut": 4, "profile": "none", "tokens": uncut[:8] + [0, 0, 0],
             "passed": 1.0, "lower_bound_passed": 0.0}]  # fmt: skip
    return {"runs": runs, "meta": {"drafter": "eagle", "profiles": ["5G", "4G"]}}


def test_table_4_scores_cuts_and_the_share_of_the_uncut_answer_kept() -> None:
    table = table_4([_cut_job()], {"labels": {"eagle": "EAGLE"}, "cuts": [1, 4]}, str(PAPER_4))
    rows = table.set_index(["scenario", "drafter"])
    ours = rows.loc[("disconnect", "EAGLE")]
    assert ours["b_1 (ours)"] == 0.0 and ours["b_4 (ours)"] == 100.0
    assert ours["b_inf (ours)"] == 100.0 and pd.isna(ours["b_10 (ours)"])
    bound = rows.loc[("stop_no_local_model", "Without local model (lower bound)")]
    assert bound["b_4 (ours)"] == 0.0
    same = rows.loc[("same_prefix", "EAGLE")]
    assert same["b_1 (ours)"] == pytest.approx(20.0)  # 2 of the uncut answer's 10 tokens
    assert same["b_4 (ours)"] == pytest.approx(80.0)
    assert same["b_inf (ours)"] == 100.0  # the 4G answer equals the 5G one
    assert pd.isna(same["b_1 (paper)"])  # the document has no such row
