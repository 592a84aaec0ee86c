"""The status page renders every row with counts per status and per document."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvspec.report.status import render


def test_counts_per_status_and_document(tmp_path: Path) -> None:
    rows = [
        {"document": "thesis", "source": "000", "artifact": "Table 3.1", "status": "measured",
         "reason": "", "files": "results/report/thesis_table_3_1.csv"},
        {"document": "thesis", "source": "000", "artifact": "Figure 3.2",
         "status": "not reproducible here", "reason": "a diagram", "files": ""},
        {"document": "moa", "source": "002", "artifact": "Table 2",
         "status": "paper numbers only", "reason": "issue 15", "files": "config/x.csv"},
    ]  # fmt: skip
    out = {"csv": str(tmp_path / "s.csv"), "md": str(tmp_path / "s.md")}
    render({"rows": rows}, {}, out)
    assert len(pd.read_csv(out["csv"])) == 3
    md = Path(out["md"]).read_text()
    assert "3 numbered tables and figures: " in md
    assert "thesis: 1 measured, 1 not reproducible here" in md and "moa: 1 paper numbers only" in md
