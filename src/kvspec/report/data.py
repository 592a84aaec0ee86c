"""Report item: which data each dataset came from at this scale, and how it differs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvspec.io import read_json
from kvspec.report.tables import write_table


def sources_frame(meta_paths: list[str | Path], notes: dict[str, str]) -> pd.DataFrame:
    """One row per dataset: name, kind, records, role, origin and substitution note."""
    rows = []
    for path in meta_paths:
        m = read_json(path)
        rows.append(
            {
                "dataset": m["dataset"],
                "kind": m["kind"],
                "records": m["records"],
                "role": "evaluation" if m["eval"] else "training/calibration",
                "origin": m["origin"],
                "differs from the documents' data": notes.get(m["dataset"], ""),
            }
        )
    return pd.DataFrame(rows)


def render_sources(
    meta_paths: list[str | Path], dataset_notes: dict[str, str], csv: str | Path, md: str | Path
) -> None:
    """Write the data-sources table (CSV + Markdown)."""
    notes = [
        "Where this scale's mirror lacks the documents' data, the closest available file "
        "is used and the last column says how it differs."
    ]
    write_table(
        sources_frame(meta_paths, dataset_notes), csv, md, "Datasets used at this scale", notes
    )
