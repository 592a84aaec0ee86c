"""Tables: read the documents' numbers, place ours beside them, write CSV + Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from kvspec.io import write_text


def read_paper_table(path: str | Path) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """A `config/paper_results/` CSV and its `# key: value` header (source, table, notes)."""
    meta: dict[str, list[str]] = {}
    with open(path) as fh:
        for line in fh:
            if not line.startswith("#"):
                break
            key, _, value = line[1:].strip().partition(":")
            meta.setdefault(key.strip(), []).append(value.strip())
    if "source" not in meta or "table" not in meta:
        raise ValueError(f"{path}: header must name the source document and the table")
    return pd.read_csv(path, comment="#", dtype=str, keep_default_na=False), meta


def side_by_side(
    ours: pd.DataFrame,
    paper: pd.DataFrame,
    keys: list[str],
    metrics: Sequence[str],
    keep_rest: bool = False,
) -> pd.DataFrame:
    """Join on `keys`; each metric becomes two columns, `<m> (ours)` and `<m> (paper)` (a
    metric one side lacks: empty); with `keep_rest`, our other columns follow."""
    rest = [c for c in ours.columns if c not in keys and c not in metrics] if keep_rest else []
    left = ours[[*keys, *(m for m in metrics if m in ours), *rest]]
    left = left.rename(columns={m: f"{m} (ours)" for m in metrics})
    right = paper[[*keys, *(m for m in metrics if m in paper)]]
    right = right.rename(columns={m: f"{m} (paper)" for m in metrics})
    merged = left.merge(right, on=keys, how="outer", sort=False)
    pairs = [f"{m} ({w})" for m in metrics for w in ("ours", "paper")]
    for column in (c for c in pairs if c not in merged):
        merged[column] = float("nan")
    return merged[[*keys, *pairs, *rest]]


def to_markdown(df: pd.DataFrame, floatfmt: str = "{:.4g}") -> str:
    """A GitHub-flavoured Markdown table (no extra dependency)."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "" if pd.isna(v) else floatfmt.format(v)
        return str(v).replace("|", "\\|").replace("\n", " ")

    header = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def write_table(
    df: pd.DataFrame,
    csv_path: str | Path,
    md_path: str | Path,
    title: str,
    notes: list[str],
    shown: pd.DataFrame | None = None,
) -> None:
    """Write `df` as CSV and as Markdown (`shown`, e.g. values with their errors, if given)
    with a title and notes (source, provenance)."""
    write_text(csv_path, df.to_csv(index=False))
    body = to_markdown(df if shown is None else shown)
    lines = [f"# {title}", "", *[f"- {n}" for n in notes], "", body]
    write_text(md_path, "\n".join(lines))


def render_paper_only(item: dict[str, Any], inputs: dict[str, list[str]], outputs: dict) -> None:
    """Render a table that has nothing to reproduce (e.g. a literature table) from its CSV."""
    df, meta = read_paper_table(inputs["paper"][0])
    notes = [
        f"Paper numbers only (nothing to measure): source {meta['source'][0]}",
        *meta.get("notes", []),
    ]
    write_table(df, outputs["csv"], outputs["md"], meta["table"][0], notes)


def paper_numeric(path: str | Path) -> pd.DataFrame:
    """A paper table with every fully numeric column as numbers (empty cells NaN)."""
    df, _ = read_paper_table(path)
    for col in df.columns:
        as_num = pd.to_numeric(df[col].replace("", float("nan")), errors="coerce")
        if as_num.notna().sum() == (df[col] != "").sum():
            df[col] = as_num
    return df


def paper_subset(inputs: dict[str, list[str]], column: str, value: str) -> pd.DataFrame:
    """The rows of a report item's paper table (`inputs["paper"][0]`) where `column` is
    `value` (one CSV holding several figures or examples)."""
    df, _ = read_paper_table(inputs["paper"][0])
    return df[df[column] == value]


def save_with_paper(
    table: pd.DataFrame,
    csv: str | Path,
    md: str | Path,
    paper_csv: str | Path,
    notes: list[str],
    shown: pd.DataFrame | None = None,
) -> None:
    """Write a table with the paper table's title and our notes (`shown`: its Markdown form)."""
    _, meta = read_paper_table(paper_csv)
    paper_notes = [f"(paper) columns: {meta['source'][0]}, {n}" for n in meta.get("notes", [])]
    write_table(table, csv, md, meta["table"][0], [*notes, *paper_notes], shown=shown)
