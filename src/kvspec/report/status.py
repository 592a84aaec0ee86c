"""The reproduction status page: every numbered table and figure of the five documents, and
the lecture's worked examples."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from kvspec.report.tables import write_table


def _counts(statuses: pd.Series) -> str:
    return ", ".join(f"{n} {status}" for status, n in Counter(statuses).most_common())


def render(item: dict[str, Any], inputs: dict[str, list[str]], outputs: dict[str, str]) -> None:
    rows = pd.DataFrame(item["rows"])
    numbered = rows[rows["document"] != "lecture"]
    notes = [
        f"{len(numbered)} numbered tables and figures: {_counts(numbered['status'])}.",
        *(f"{doc}: {_counts(g['status'])}" for doc, g in rows.groupby("document", sort=False)),
        "measured = written from this run's results (beside the paper's numbers where they "
        "were transcribed); paper numbers only = the transcription alone; not built yet = "
        "reproducible here, pending the issue named; the lecture notes (001) have no numbered "
        "tables or figures, so their worked examples are listed instead. Computed from the "
        "experiment plan and config/paper_results, so it changes with them.",
    ]
    write_table(rows, outputs["csv"], outputs["md"], "Reproduction status", notes)
