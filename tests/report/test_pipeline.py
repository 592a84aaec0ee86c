"""PipeInfer runs table: medians per strategy, speed relative to the one-process engine on the
same prompts, exactness of every run."""

from __future__ import annotations

import pytest

from kvspec.io import write_json
from kvspec.report.pipeline import render_runs, run_table


def _row(strategy, n, prompt, speed, exact=True, rss=(100.0, 90.0)):
    return {"set": "humaneval", "prompt": prompt, "prompt_tokens": 30, "run": 0,
            "strategy": strategy, "n_stages": n, "ranks": n + (strategy != "iterative"),
            "threads_per_rank": 1, "new_tokens": 8, "tokens_per_s": speed, "ttft_s": 0.1,
            "itl_s": 1 / speed, "pipeline_runs": 8, "accept_len": 1.0, "drafted": 0,
            "accepted": 0, "cancelled": 0, "peak_rss_mb": list(rss), "exact": exact}  # fmt: skip


ROWS = [_row("iterative", 1, "a", 10.0), _row("iterative", 1, "b", 20.0),
        _row("iterative", 2, "a", 5.0), _row("iterative", 2, "b", 20.0),
        _row("pipeinfer", 2, "a", 15.0), _row("pipeinfer", 2, "b", 30.0, exact=False,
                                              rss=(120.0, None))]  # fmt: skip


def test_run_table_medians_and_ratios() -> None:
    table = run_table(ROWS).set_index(["strategy", "n_stages"])
    assert table.loc[("iterative", 1), "speed / one process"] == 1.0
    assert table.loc[("iterative", 2), "speed / one process"] == pytest.approx((0.5 + 1.0) / 2)
    assert table.loc[("pipeinfer", 2), "speed / one process"] == pytest.approx(1.5)
    assert table.loc[("pipeinfer", 2), "tok/s"] == pytest.approx(22.5)
    assert table.loc[("pipeinfer", 2), "max rank peak RSS MB"] == pytest.approx(110.0)
    assert table["all exact"].tolist() == [True, True, False]
    assert table["runs"].tolist() == [2, 2, 2]


def test_render_runs_writes_csv_and_markdown(tmp_path) -> None:
    result = tmp_path / "runs.json"
    settings = {"threads_per_rank": 1, "max_new_tokens": 8, "runs": 1, "k": 4,
                "pipeinfer": {"cutoff": 0.3}}  # fmt: skip
    write_json(result, {"runs": ROWS, "settings": settings})
    out = {"csv": str(tmp_path / "t.csv"), "md": str(tmp_path / "t.md")}
    render_runs({"target": "target", "draft": "draft"}, {"result": [str(result)]}, out)
    text = (tmp_path / "t.md").read_text()
    assert "pipeinfer" in text and "humaneval a (30)" in text and "no paper column" in text
