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
         "status": "paper numbers only", "reason": "issue_15 *x* `y` |z|", "files": "config/x.csv"},
    ]  # fmt: skip
    out = {
        "csv": str(tmp_path / "s.csv"),
        "md": str(tmp_path / "s.md"),
        "rst": str(tmp_path / "s.rst"),
    }
    render({"rows": rows}, {}, out)
    assert len(pd.read_csv(out["csv"])) == 3
    md = Path(out["md"]).read_text()
    assert "3 numbered tables and figures: " in md
    assert "thesis: 1 measured, 1 not reproducible here" in md and "moa: 1 paper numbers only" in md


def test_front_page_table_is_valid_restructuredtext(tmp_path: Path) -> None:
    from docutils.core import publish_parts

    rows = [{"document": "moa", "source": "002", "artifact": "Table 2", "files": "",
             "status": "not built yet", "reason": "issue_15 *x* `y` |z| a_"}]  # fmt: skip
    out = {
        "csv": str(tmp_path / "s.csv"),
        "md": str(tmp_path / "s.md"),
        "rst": str(tmp_path / "s.rst"),
    }
    render({"rows": rows}, {}, out)
    html = publish_parts(
        Path(out["rst"]).read_text(),
        writer="html",
        settings_overrides={"report_level": 1, "halt_level": 2},
    )["html_body"]
    assert "<table" in html and "issue_15 *x* `y` |z| a_" in html.replace("&quot;", '"')
