"""The ci-scale HTML report as a reader sees it: rendered by headless Chromium (Debian's
`chromium`, installed by .ci/run), with a screenshot of its front page."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvspec.config import validate
from kvspec.plan import Plan

from ..conftest import REPO, snakemake

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (Debian package `chromium`; .ci/run installs it)"
)
# as root, without a sandbox, and without Chromium's own network traffic (this machine has none)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=15000"]  # fmt: skip


@pytest.fixture(scope="module")
def report_html(ci_run: Path) -> Path:
    snakemake(ci_run, "--report", "results/report.html")
    return ci_run / "results" / "report.html"


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True)


def test_front_page_renders_without_system_messages(report_html: Path, tmp_path: Path) -> None:
    dom = _chromium(tmp_path / "profile", "--dump-dom", report_html.as_uri()).stdout
    assert "Reproduction status" in dom and "list-table" not in dom  # the table, rendered
    assert "System Message" not in dom, dom[dom.find("System Message") - 500 :][:1500]
    for artifact in ("Table 3.1", "Figure 4.1", "continuous vs static batching"):
        assert artifact in dom  # rows of the status table on the front page


def test_every_report_item_is_in_the_rendered_report(report_html: Path, tmp_path: Path) -> None:
    dom = _chromium(tmp_path / "profile", "--dump-dom", report_html.as_uri()).stdout
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    config = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    plan = Plan(validate(config, schema))
    missing = [
        out.path for item in plan.report_items() for out in item.outputs.values()
        if out.caption and Path(out.path).name not in dom
    ]  # fmt: skip
    assert not missing
    categories = {item.category for item in plan.report_items()}
    assert all(c in dom for c in categories), categories - {c for c in categories if c in dom}


def test_screenshot_of_the_front_page(report_html: Path, tmp_path: Path) -> None:
    shot = report_html.parent / "report_front_page.png"
    _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2400",
              report_html.as_uri())  # fmt: skip
    data = shot.read_bytes()
    assert data[:4] == b"\x89PNG" and len(data) > 20_000  # a page, not a blank frame
