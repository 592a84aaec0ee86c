"""One shape for every report item: the files it reads, what their rows mean, what it writes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvspec.plan import paths


@dataclass(frozen=True)
class Output:
    """One file a report item writes; `caption` (a workflow/report/<caption>.rst) attaches it
    to the Snakemake HTML report under `label`."""

    path: str
    caption: str | None = None
    label: str | None = None

    @property
    def format(self) -> str:
        return Path(self.path).suffix.lstrip(".")


@dataclass(frozen=True)
class ReportItem:
    """A report rule: named input groups, outputs by key, and `params` — what each input row
    means (labels, ranks, sets) keyed by name, so rendering never decodes file paths."""

    rule: str
    renderer: str  # "module:function" of kvspec.report (see kvspec.report.render)
    log: str
    category: str
    inputs: dict[str, list[str]]
    outputs: dict[str, Output]
    params: dict[str, Any] = field(default_factory=dict)
    document: str = "thesis"  # the source document (`snakemake <document>` renders its items)

    def output_files(self) -> list[str]:
        return [o.path for o in self.outputs.values()]


def table_outputs(stem: str, caption: str | None = None, label: str = "") -> dict[str, Output]:
    """csv (attached to the report) + md of results/report/<stem>."""
    return {
        "csv": Output(paths.report(stem, "csv"), caption or stem, label),
        "md": Output(paths.report(stem, "md")),
    }


def figure_outputs(stem: str, label: str, caption: str | None = None) -> dict[str, Output]:
    """png (attached) + pdf + csv (the plotted numbers) of results/report/<stem>."""
    return {
        "png": Output(paths.report(stem, "png"), caption or stem, label),
        "pdf": Output(paths.report(stem, "pdf")),
        "csv": Output(paths.report(stem, "csv")),
    }


def files_of(rows: Iterable[dict[str, Any]], key: str = "file") -> list[str]:
    """The `key` file of each row, once each, in order."""
    return list(dict.fromkeys(row[key] for row in rows))
