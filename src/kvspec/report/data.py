"""Report item: which data each dataset came from at this scale, and how it differs."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.tables import write_table


def sources_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per dataset ({dataset, meta, note}): kind, records, role, origin and note."""
    out = []
    for row in rows:
        m = read_json(row["meta"])
        out.append(
            {
                "dataset": row["dataset"],
                "kind": m["kind"],
                "records": m["records"],
                "role": "evaluation" if m["eval"] else "training/calibration",
                "origin": m["origin"],
                "differs from the documents' data": row["note"] or "",
            }
        )
    return pd.DataFrame(out)


def render_sources(
    item: dict[str, Any], inputs: dict[str, list[str]], outputs: dict[str, str]
) -> None:
    """Write the data-sources table (CSV + Markdown) of `item["rows"]`."""
    notes = [
        "Where this scale's mirror lacks the documents' data, the closest available file "
        "is used and the last column says how it differs."
    ]
    write_table(
        sources_frame(item["rows"]),
        outputs["csv"],
        outputs["md"],
        "Datasets used at this scale",
        notes,
    )
