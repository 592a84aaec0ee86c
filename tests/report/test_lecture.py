"""Lecture report tables: a missing paper number is an empty cell, never "None"."""

import pandas as pd

from kvspec.report import lecture


def test_missing_paper_numbers_are_empty_cells(tmp_path) -> None:
    rows = [lecture._row("step latency ms", "B=1", 55.6), lecture._row("ridge", "H100", 295.2, 295)]
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    lecture._write(rows, out, "T", ["a note"])
    md = (tmp_path / "t.md").read_text()
    assert "None" not in md and "| 295 |" in md
    assert pd.read_csv(out["csv"])["paper"].isna().tolist() == [True, False]
    lecture._write(rows[:1], out, "T", [])  # a table without any paper number
    assert "None" not in (tmp_path / "t.md").read_text()
