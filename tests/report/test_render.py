"""The report entry point: one signature for every renderer, and no torch anywhere in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvspec.report import render

from ..conftest import REPO


def test_render_dispatches_by_name(tmp_path: Path) -> None:
    paper = str(REPO / "config" / "paper_results" / "thesis_table_2_1.csv")
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render("tables:render_paper_only", {}, {"paper": paper}, out)  # a lone path is a group
    assert Path(out["md"]).read_text().startswith("# Table 2.1")


def test_unknown_renderer_is_an_error() -> None:
    with pytest.raises(AttributeError):
        render("tables:no_such_renderer", {}, {}, {})


def test_report_modules_load_without_torch() -> None:
    code = (
        "import sys, kvspec.report.care, kvspec.report.heal, kvspec.report.spec, "
        "kvspec.report.data, kvspec.report.pretrain, kvspec.report.tables, kvspec.report.drafts; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
