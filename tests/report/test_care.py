"""CARE report items from synthetic evaluation records: row matching, ordering, averages."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvspec.report.care import metric_row, render

from ..conftest import REPO

PAPER = REPO / "config" / "paper_results"


def _record(path: Path, save: float, acc: float, ppl: float, cols=("arc", "piqa")) -> str:
    metrics = {"wiki": {"metric": "word_perplexity", "value": ppl, "task": "w", "n": 1}}
    metrics |= {c: {"metric": "acc", "value": acc, "task": c, "n": 10} for c in cols}
    path.write_text(json.dumps({"model": "target", "kv_save_pct": save, "metrics": metrics}))
    return str(path)


def test_metric_row_percent_and_average() -> None:
    rec = {"metrics": {"wiki": {"metric": "word_perplexity", "value": 12.5},
                       "arc": {"metric": "acc", "value": 0.25},
                       "wg": {"metric": "acc", "value": 0.75}}}  # fmt: skip
    assert metric_row(rec) == {"wiki_ppl": 12.5, "arc": 25.0, "wg": 75.0, "avg": 50.0}
    assert metric_row(rec, "ppl", columns=["wiki", "arc"]) == {
        "ppl": 12.5,
        "arc": 25.0,
        "avg": 25.0,
    }


def test_table_3_1_rows_match_on_kv_saving(tmp_path: Path) -> None:
    rows = [
        {"label": "GQA (Original)", "rank": None, "file": _record(tmp_path / "o.json", 0, 0.5, 10)}
    ]
    for method, acc in (("svd-uniform", 0.2), ("care-waterfill", 0.4)):
        f = _record(tmp_path / f"{method}.json", 93.75, acc, 100)
        rows.append({"label": method, "rank": 8, "file": f})
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render(
        {"name": "table_3_1", "rows": rows}, {"paper": [str(PAPER / "thesis_table_3_1.csv")]}, out
    )
    df = pd.read_csv(out["csv"], dtype={"kv_save_pct": str})
    assert df["method"].iloc[0] == "GQA (Original)" and df["kv_save_pct"].iloc[0] == "0.00"
    assert df["wiki_ppl (paper)"].iloc[0] == pytest.approx(6.82)
    care = df[(df["method"] == "CARE-E") & (df["kv_save_pct"] == "93.75")].iloc[0]
    assert care["rank (ours)"] == 8 and care["rank (paper)"] == 64
    assert care["arc (ours)"] == pytest.approx(40.0) and care["arc (paper)"] == pytest.approx(19.45)
    assert care["avg (ours)"] == pytest.approx(40.0)
    assert pd.isna(care["hs (ours)"]) and "HellaSwag" in Path(out["md"]).read_text()
    group = df[df["kv_save_pct"] == "93.75"]["method"].tolist()
    assert group == ["SVD", "ASVD", "CARE-E"]  # thesis order within a rank group
    assert "arc: arc n=10," in Path(out["md"]).read_text()  # one size: no per-row counts


def test_notes_give_each_document_count_when_rows_differ(tmp_path: Path) -> None:
    """care.decide scores some rows on more documents: the notes count rows per size."""
    rows = [{"label": "GQA (Original)", "rank": None,
             "file": _with_docs(tmp_path / "o.json", 0, [1, 0, 1, 1, 0, 1], 10)}]  # fmt: skip
    for label, answers in (("svd-uniform", [0, 1, 0, 1]), ("care-waterfill", [1, 1, 0, 1])):
        file = _with_docs(tmp_path / f"{label}.json", 93.75, answers, 10.0)
        rows.append({"label": label, "rank": 8, "file": file})
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render({"name": "table_3_1", "rows": rows},
           {"paper": [str(PAPER / "thesis_table_3_1.csv")]}, out)  # fmt: skip
    assert "arc: arc n=6 (1 row), n=4 (2 rows)" in Path(out["md"]).read_text()


def test_notes_say_which_dtype_the_models_were_scored_in(tmp_path: Path) -> None:
    rows = []
    for label, rank, save in (("GQA (Original)", None, 0.0), ("svd-uniform", 8, 93.75)):
        file = tmp_path / f"{label}.json"
        record = json.loads(Path(_record(file, save, 0.5, 10)).read_text())
        file.write_text(json.dumps(record | {"dtype": "bfloat16"}))
        rows.append({"label": label, "rank": rank, "file": str(file)})
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render({"name": "table_3_1", "rows": rows},
           {"paper": [str(PAPER / "thesis_table_3_1.csv")]}, out)  # fmt: skip
    assert "lm-eval zero-shot with bfloat16 weights;" in Path(out["md"]).read_text()


def test_table_3_5_uses_only_its_columns(tmp_path: Path) -> None:
    rows = [
        {"label": alloc, "rank": 8, "file": _record(tmp_path / f"{alloc}.json", 93.75, acc, 50,
                                                    cols=("arc", "piqa", "mmlu"))}
        for alloc, acc in (("uniform", 0.3), ("waterfill", 0.5))
    ]  # fmt: skip
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    item = {"name": "table_3_5", "rows": rows, "columns": ["wiki", "arc"]}
    render(item, {"paper": [str(PAPER / "thesis_table_3_5.csv")]}, out)
    df = pd.read_csv(out["csv"], dtype={"kv_save_pct": str})
    ours = df[df["rank (ours)"].notna()]
    assert list(ours["strategy"]) == ["CARE-U", "CARE-E"]
    assert ours["piqa (ours)"].isna().all()  # evaluated, but not a configured column
    assert list(ours["avg (ours)"]) == pytest.approx([30.0, 50.0])
    paper_u = df[(df["strategy"] == "CARE-U") & (df["kv_save_pct"] == "93.75")].iloc[0]
    assert paper_u["wiki_ppl (paper)"] == pytest.approx(693.82)


def test_unknown_item_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown CARE report item"):
        render({"name": "table_9_9"}, {}, {})


def _with_docs(path: Path, save: float, answers: list[int], ppl: float) -> str:
    """An evaluation with per-document ARC scores (for paired differences)."""
    docs = {f"arc/{i}": float(a) for i, a in enumerate(answers)}
    arc = {"metric": "acc", "value": sum(answers) / len(answers), "stderr": 0.1, "task": "arc",
           "n": len(answers), "per_doc": docs}  # fmt: skip
    wiki = {"metric": "word_perplexity", "value": ppl, "stderr": None, "task": "w", "n": 1}
    path.write_text(json.dumps({"model": "target", "kv_save_pct": save,
                                "metrics": {"wiki": wiki, "arc": arc}}))  # fmt: skip
    return str(path)


def test_table_3_1_paired_differences(tmp_path: Path) -> None:
    rows = [{"label": "GQA (Original)", "rank": None,
             "file": _with_docs(tmp_path / "o.json", 0, [1, 1, 1, 1], 10)}]  # fmt: skip
    for label, answers, ppl in (("svd-uniform", [0, 0, 1, 0], 40.0),
                                ("asvd-uniform", [1, 0, 1, 1], 20.0),
                                ("care-waterfill", [1, 1, 1, 1], 10.0)):  # fmt: skip
        file = _with_docs(tmp_path / f"{label}.json", 93.75, answers, ppl)
        rows.append({"label": label, "rank": 8, "file": file})
    out = {k: str(tmp_path / f"t.{k}") for k in ("csv", "md", "paired_csv", "paired_md")}
    render({"name": "table_3_1", "rows": rows},
           {"paper": [str(PAPER / "thesis_table_3_1.csv")]}, out)  # fmt: skip
    paired = pd.read_csv(out["paired_csv"]).set_index("comparison")
    assert paired.loc["CARE-E − SVD", "arc diff"] == "+75.00 ± 25.00"
    assert paired.loc["CARE-E − ASVD", "arc diff"] == "+25.00 ± 25.00"
    assert paired.loc["CARE-E − SVD", "wiki ppl ratio"] == pytest.approx(0.25)
    # SE 25 points on 4 documents: 4 x (25 x 2 / 3)^2 documents put 3 points at 2 SE
    assert paired.loc["CARE-E − SVD", "docs to resolve 3 pts"] == "arc 1112"
    assert paired.loc["CARE-E − SVD", "documents"] == "arc 4"
    assert "10 ± 0.1" not in Path(out["md"]).read_text()  # perplexity shows no error
    assert "100 ± 10" in Path(out["md"]).read_text()  # ARC 100% ± 10 points
