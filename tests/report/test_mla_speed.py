"""The healed-MLA-with-infini-gram table from a run record: sums over prompts, ratios to each
model's own greedy and to the GQA model's, exactness counts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kvspec.report.mla_speed import render


def _row(model: str, method: str, prompt: str, seconds: float, tokens: int, steps: int,
         exact: bool = True) -> dict:  # fmt: skip
    return {"context": 2048, "model": model, "method": method, "prompt": prompt,
            "prompt_len": 2048, "prefill_seconds": 1.0, "cache_bytes_per_token": 2048.0,
            "tokens": list(range(tokens)), "decode_seconds": seconds, "steps": steps,
            "drafted": 0, "accepted": 0, "exact": exact, "prefix_share": 0.5}  # fmt: skip


def test_sums_over_prompts_and_ratios_to_both_greedy_runs(tmp_path: Path) -> None:
    rows = [
        _row("GQA", "greedy", "a", 2.0, 10, 10), _row("GQA", "greedy", "b", 2.0, 10, 10),
        _row("GQA", "sd", "a", 1.0, 10, 4), _row("GQA", "sd", "b", 1.0, 10, 4, exact=False),
        _row("MLA", "greedy", "a", 1.0, 10, 10), _row("MLA", "greedy", "b", 1.0, 10, 10),
        _row("MLA", "sd", "a", 0.25, 10, 2), _row("MLA", "sd", "b", 0.25, 10, 3),
    ]  # fmt: skip
    settings = {"max_new_tokens": 10, "device": "cpu", "dtype": "float32"}
    record = {"cpu": "x86_64", "threads": 2, "settings": settings, "rows": rows}
    (tmp_path / "runs.json").write_text(json.dumps(record))
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    bench = {"name": "humaneval", "label": "HumanEval", "n": 2}
    render({"bench": bench}, {"runs": [str(tmp_path / "runs.json")]}, out)
    table = pd.read_csv(out["csv"]).set_index(["model", "method"])
    assert table.loc[("GQA", "greedy"), "tok_s"] == 5.0
    assert table.loc[("GQA", "sd"), "vs_own_greedy"] == 2.0
    assert table.loc[("MLA", "greedy"), "vs_gqa_greedy"] == 2.0
    assert table.loc[("MLA", "sd"), "vs_own_greedy"] == 4.0
    assert table.loc[("MLA", "sd"), "vs_gqa_greedy"] == 8.0
    assert table.loc[("MLA", "sd"), "tokens_per_step"] == 4.0
    assert table.loc[("GQA", "sd"), "exact"] == "1 of 2"
    assert table.loc[("GQA", "greedy"), "cache_kb_per_token"] == 2.0
    assert "first 2 HumanEval questions" in Path(out["md"]).read_text()
