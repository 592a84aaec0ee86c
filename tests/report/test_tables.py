"""Paper tables: header parsing, ours-beside-paper joins, Markdown, paper-only rendering."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kvspec.report.tables import (
    read_paper_table,
    render_paper_only,
    side_by_side,
    to_markdown,
    write_table,
)

from ..conftest import REPO


def _paper(path: Path, header: str = "# source: doc.txt\n# table: Table 9.9 - toy\n") -> Path:
    path.write_text(header + "# notes: one\n# notes: two\nmethod,acc\nA,1.5\nB,\n")
    return path


def test_read_paper_table_keeps_header_and_text(tmp_path: Path) -> None:
    df, meta = read_paper_table(_paper(tmp_path / "p.csv"))
    assert meta == {"source": ["doc.txt"], "table": ["Table 9.9 - toy"], "notes": ["one", "two"]}
    assert list(df["acc"]) == ["1.5", ""]  # read as text: empty cells stay empty, not NaN


def test_read_paper_table_needs_source_and_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must name the source document and the table"):
        read_paper_table(_paper(tmp_path / "p.csv", header="# source: doc.txt\n"))


def test_side_by_side_pairs_metrics_and_keeps_unmatched_rows() -> None:
    ours = pd.DataFrame({"method": ["A", "C"], "acc": [1.0, 3.0]})
    paper = pd.DataFrame({"method": ["A", "B"], "acc": [1.5, 2.5]})
    df = side_by_side(ours, paper, ["method"], ["acc"])
    assert list(df.columns) == ["method", "acc (ours)", "acc (paper)"]
    rows = {r.method: (r[1], r[2]) for r in df.itertuples(index=False)}
    assert rows["A"] == (1.0, 1.5) and pd.isna(rows["B"][0]) and pd.isna(rows["C"][1])


def test_markdown_escapes_pipes_and_blanks_nan() -> None:
    md = to_markdown(pd.DataFrame({"a|b": ["x|y"], "v": [float("nan")]}))
    assert md.splitlines() == ["| a|b | v |", "|---|---|", "| x\\|y |  |"]


def test_write_table_title_notes_and_csv(tmp_path: Path) -> None:
    df = pd.DataFrame({"m": ["A"], "v": [0.123456]})
    write_table(df, tmp_path / "t.csv", tmp_path / "t.md", "Title", ["note 1"])
    text = (tmp_path / "t.md").read_text()
    assert text.startswith("# Title\n\n- note 1\n") and "| A | 0.1235 |" in text
    assert pd.read_csv(tmp_path / "t.csv")["v"].iloc[0] == pytest.approx(0.123456)


def test_render_paper_only_says_so(tmp_path: Path) -> None:
    paper = REPO / "config" / "paper_results" / "thesis_table_2_1.csv"
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render_paper_only({}, {"paper": [str(paper)]}, out)
    assert "Paper numbers only (nothing to measure)" in Path(out["md"]).read_text()
    assert len(pd.read_csv(out["csv"])) == len(read_paper_table(paper)[0])
