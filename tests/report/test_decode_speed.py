"""MLA vs GQA decode-speed table from a benchmark record."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kvspec.report.decode_speed import render


def test_rows_by_context_in_measured_model_order_with_settings(tmp_path: Path) -> None:
    rows = [
        {"model": m, "context": c, "tok_s": t, "vs_gqa": t / g, "spread": 0.01,
         "cache_bytes_per_token": b, "cache_vs_gqa": b / 1000, "layout_numbers_per_token": b / 4}
        for c, g in ((2048, 20.0), (512, 25.0))
        for m, t, b in (("GQA (original)", g, 1000), ("MLA care-waterfill r=96", g / 2, 500))
    ]  # fmt: skip
    settings = {"contexts": [512, 2048], "new_tokens": 16, "repeats": 3, "seed": 0,
                "device": "cpu", "dtype": "float32"}  # fmt: skip
    record = {"cpu": "x86_64", "threads": 2, "settings": settings, "rows": rows}
    (tmp_path / "speed.json").write_text(json.dumps(record))
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render({"model": "target"}, {"speed": [str(tmp_path / "speed.json")]}, out)
    table = pd.read_csv(out["csv"])
    assert table["context"].tolist() == [512, 512, 2048, 2048]
    assert table["model"].tolist()[:2] == ["GQA (original)", "MLA care-waterfill r=96"]
    assert table.loc[1, "vs_gqa"] == 0.5
    notes = Path(out["md"]).read_text()
    assert "2 threads" in notes and "3 greedy decodes of 16 tokens" in notes
