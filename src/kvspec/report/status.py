"""The reproduction status page: every numbered table and figure of the five documents, and
the lecture's worked examples."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pandas as pd

from kvspec.io import write_text
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
        "were transcribed); simulated = computed by a simulator calibrated on costs measured "
        "by this run; measured where it ran, simulated beyond = this run's points (at the "
        "rank counts it ran) drawn over such curves (document 003's node-count figures); "
        "paper numbers only = the transcription alone; not built yet = "
        "reproducible here, pending the issue named; the lecture notes (001) have no numbered "
        "tables or figures, so their worked examples are listed instead. Computed from the "
        "experiment plan and config/paper_results, so it changes with them.",
    ]
    write_table(rows, outputs["csv"], outputs["md"], "Reproduction status", notes)
    write_text(outputs["rst"], front_page(rows, notes[0]))


def rst_text(text: str) -> str:
    """`text` with reStructuredText's inline markup characters escaped."""
    return re.sub(r"([\\*`_|])", r"\\\1", str(text))


def front_page(rows: pd.DataFrame, summary: str) -> str:
    """The status for the report's front page: counts per document and status, then every
    artifact, as reStructuredText list-tables."""
    counts = pd.crosstab(rows["document"], rows["status"]).reset_index()
    lines = [rst_text(summary), ""]
    lines += _list_table([tuple(counts.columns), *counts.itertuples(index=False)])
    lines += ["", *_list_table([("document", "artifact", "status", "reason"),
                                *rows[["document", "artifact", "status", "reason"]]
                                .itertuples(index=False)])]  # fmt: skip
    return "\n".join(lines) + "\n"


def _list_table(cells: list[tuple]) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in cells:
        first, *rest = (rst_text(c) or "-" for c in row)
        lines += [f"   * - {first}", *(f"     - {c}" for c in rest)]
    return lines
