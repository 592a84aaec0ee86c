"""Reproduction status of every numbered table and figure of the five source documents.

Each artifact's status is computed, so it cannot drift from what the workflow does:
``measured`` when a planned report item writes it from this run's results (``simulated`` when
every such item is a simulator's, ``measured where it ran, simulated beyond`` when those also
draw this run's measured points), ``paper numbers only`` when only its transcription in
`config/paper_results/` is rendered, and ``not reproducible here`` otherwise. Whatever is not
measured needs a stated reason (`REASONS`); `status_rows` refuses an artifact without one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvspec.plan.lecture import EXAMPLES as LECTURE_ITEMS

if TYPE_CHECKING:
    from kvspec.plan import Plan
    from kvspec.plan.items import ReportItem


def _numbered(kind: str, numbers: list[str]) -> list[str]:
    return [f"{kind} {n}" for n in numbers]


def _range(a: int, b: int) -> list[str]:
    return [str(n) for n in range(a, b + 1)]


# document key -> (source file in shared/papers, paper-results prefix, numbered artifacts)
DOCUMENTS: dict[str, tuple[str, str, list[str]]] = {
    "thesis": (
        "000_3e5519d359e3737b.txt",
        "thesis",
        _numbered("Table", ["2.1", "3.1", "3.2", "3.3", "3.4", "3.5"])
        + _numbered("Table", [f"4.{n}" for n in range(1, 9)])
        + _numbered("Figure", ["3.1", "3.2", "3.3", "3.4", "4.1"]),
    ),
    "moa": (
        "002_5c06a0a5d34cf690.txt",
        "moa",
        _numbered("Table", _range(1, 10)) + _numbered("Figure", _range(1, 4)),
    ),
    "pipeinfer": (
        "003_96bca952b5a7b0e8.txt",
        "pipeinfer",
        _numbered("Table", ["I", "II", "III", "IV"]) + _numbered("Figure", _range(1, 10)),
    ),
    "specdec_qwen": (
        "004_8dbe0f79c7329c7a.txt",
        "specdec_qwen",
        _numbered("Figure", _range(1, 10)),
    ),
}
LECTURE = ("001_0112e2261da5aa52.txt", "lecture notes: no numbered tables or figures")

_OFF9 = (
    "off in this config (no pipeline block, or pipeline.figure_9 null); the document's runs: a "
    "4-GPU cluster (Table IV)"
)
_DIAGRAM = "a diagram of the method: nothing to measure"
REASONS: dict[tuple[str, str], str] = {
    ("thesis", "Table 2.1"): "a survey of published methods: transcribed, nothing to measure",
    ("thesis", "Figure 3.2"): _DIAGRAM,
    ("moa", "Table 1"): "a qualitative comparison of architectures: nothing to measure",
    ("moa", "Table 6"): "the training hyperparameters: transcribed",
    ("moa", "Figure 1"): _DIAGRAM,
    ("moa", "Figure 2"): _DIAGRAM,
    ("moa", "Figure 3"): _DIAGRAM,
    ("moa", "Figure 4"): "off in this config (moa.batching null); the document's runs: vLLM "
    "continuous batching on GPUs",
    ("pipeinfer", "Table I"): "the model pairs used: transcribed",
    ("pipeinfer", "Table II"): "the authors' CPU cluster: hardware description",
    ("pipeinfer", "Table III"): "the model pairs used: transcribed",
    ("pipeinfer", "Table IV"): "the authors' GPU cluster: hardware description",
    ("pipeinfer", "Figure 1"): _DIAGRAM,
    ("pipeinfer", "Figure 2"): _DIAGRAM,
    ("pipeinfer", "Figure 3"): _DIAGRAM,
}
REASONS |= {("pipeinfer", "Figure 9"): _OFF9}

MEASURED, PAPER_ONLY, NOT_HERE = "measured", "paper numbers only", "not reproducible here"
SIMULATED = "simulated (calibrated on measured costs)"  # renderers named *simulated*
# simulated items whose params say they also draw this run's measured points where it ran
# (`measured_points`; PipeInfer's Figures 4-8: 1-3 ranks measured, more nodes simulated)
MIXED = "measured where it ran, simulated beyond"
NOT_BUILT = "not built yet"  # reproducible here, pending an open issue (no transcription either)
LECTURE_EXAMPLES = [label for label, _ in LECTURE_ITEMS.values()]


def artifacts() -> list[tuple[str, str]]:
    """(document, label) of every numbered table and figure, in document order."""
    return [(doc, label) for doc, (_, _, labels) in DOCUMENTS.items() for label in labels]


def _source(document: str) -> str:
    return LECTURE[0] if document == "lecture" else DOCUMENTS[document][0]


def paper_csvs(document: str, label: str, paper_dir: Path) -> list[str]:
    """Transcriptions of an artifact: <prefix>_<table|figure>_<n>.csv, or a range file such as
    specdec_qwen_figures_5_8.csv (Figures 5-8); Roman table numbers match their value."""
    if document == "lecture":
        return []
    prefix = DOCUMENTS[document][1]
    kind, number = label.lower().split(" ")
    value = _roman(number) if re.fullmatch(r"[IVX]+", number, re.I) else number
    stem = f"{prefix}_{kind}_{str(value).replace('.', '_')}"
    found = [p for p in sorted(paper_dir.glob(f"{prefix}_{kind}*.csv")) if p.stem == stem]
    for path in sorted(paper_dir.glob(f"{prefix}_{kind}s_*_*.csv")):
        low, high = (int(x) for x in path.stem.rsplit("_", 2)[1:])
        if str(value).isdigit() and low <= int(value) <= high:
            found.append(path)
    return [f"config/paper_results/{p.name}" for p in found]


def _roman(text: str) -> int:
    values = {"I": 1, "V": 5, "X": 10}
    digits = [values[c] for c in text.upper()]
    return sum(-d if d < n else d for d, n in zip(digits, [*digits[1:], 0], strict=True))


def _stage_off(document: str) -> str | None:
    """Why an artifact the workflow measures is not measured: its stage is off."""
    blocks = {"thesis": "care, care.heal or spec", "lecture": "lecture", "specdec_qwen": "sampling",
              "pipeinfer": "pipeline", "moa": "moa; Tables 3, 4, 7: remote"}  # fmt: skip
    return f"its stage is off in this config ({blocks[document]})" if document in blocks else None


def status_rows(plan: Plan, paper_dir: Path) -> list[dict[str, Any]]:
    """One row per artifact: status, reason, and the files this run writes for it."""
    made = {}
    for item in plan.report_items():
        for out in item.outputs.values():
            if out.label:
                made.setdefault((item.document, out.label), []).append((item, out.path))
    rows = []
    for doc, label in [*artifacts(), *(("lecture", x) for x in LECTURE_EXAMPLES)]:
        items = made.get((doc, label), [])
        measured = [path for item, path in items if not item.renderer.endswith("paper_only")]
        papers = paper_csvs(doc, label, paper_dir)
        reason = "" if measured else REASONS.get((doc, label), _stage_off(doc))
        if reason is None:
            raise ValueError(f"{doc} {label} is not measured and has no stated reason (REASONS)")
        files = measured or [path for _, path in items] or papers
        status = _simulated([item for item, _ in items]) if measured else None
        status = status or _status(measured, files, reason)
        rows.append({"document": doc, "source": _source(doc), "artifact": label,
                     "status": status, "reason": reason, "files": " ".join(files)})  # fmt: skip
    return rows


def _simulated(items: list[ReportItem]) -> str | None:
    """SIMULATED or MIXED when every renderer of the artifact is a simulated one."""
    if not all("simulated" in item.renderer for item in items):
        return None
    return MIXED if all(item.params.get("measured_points") for item in items) else SIMULATED


def _status(measured: list[str], files: list[str], reason: str) -> str:
    if measured:
        return MEASURED
    if files:
        return PAPER_ONLY
    return NOT_BUILT if reason.startswith("not built yet") else NOT_HERE
