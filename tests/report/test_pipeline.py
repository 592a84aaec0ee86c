"""PipeInfer runs table: medians per strategy, speed relative to the one-process engine on the
same prompts, exactness of every run; the simulated figures carry the real runs' points
(measured medians drawn over the curves of the measured link and acceptance, with the
simulator's error at each)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kvspec.io import write_json
from kvspec.report.pipeline import render_runs, render_simulated_curves, run_table


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


def _sim() -> dict:
    curves = [{"link": link, "acceptance": acc, "alpha": alpha, "strategy": s, "nodes": n,
               "tokens_per_s": 10.0 + n + i}
              for link in ("loopback (measured)", "infiniband_edr")
              for acc, alpha in (("ours (measured)", 0.3), ("Dolphin", 0.79))
              for i, s in enumerate(("iterative", "speculative", "pipeinfer"))
              for n in (1, 2, 3, 4)]  # fmt: skip
    validation = [{"strategy": "iterative", "n_stages": 1, "measured_tokens_per_s": 24.0,
                   "simulated_tokens_per_s": 16.0},  # the one-process engine: left out
                  {"strategy": "iterative", "n_stages": 2, "measured_tokens_per_s": 13.0,
                   "simulated_tokens_per_s": 13.0},
                  {"strategy": "pipeinfer", "n_stages": 3, "measured_tokens_per_s": 10.0,
                   "simulated_tokens_per_s": 12.0}]  # fmt: skip
    return {"curves": curves, "validation": validation}


def test_measured_points_join_the_simulated_curves_with_their_error(tmp_path) -> None:
    write_json(tmp_path / "sim.json", _sim())
    out = {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf", "csv", "md")}
    item = {"metric": "tokens_per_s", "axis": "generation speed (tok/s)"}
    render_simulated_curves(item, {"result": [str(tmp_path / "sim.json")]}, out)
    table = pd.read_csv(out["csv"])
    measured = table[table.source == "measured"].set_index(["strategy", "nodes"])
    assert sorted(measured.index) == [("iterative", 2), ("pipeinfer", 3)]
    assert (measured.link == "loopback (measured)").all()
    assert measured.loc[("pipeinfer", 3), "tokens_per_s"] == 10.0
    assert measured.loc[("pipeinfer", 3), "error"] == pytest.approx(0.2)
    assert len(table[table.source == "simulated"]) == 48
    assert Path(out["png"]).stat().st_size > 0 and "measured" in Path(out["md"]).read_text()


def test_figure_7_adds_the_constrained_links_ttft_and_speed_panels(tmp_path) -> None:
    from kvspec.report.pipeline import render_simulated_memory

    sim = _sim()
    for c in sim["curves"]:
        c["link"] = "gigabit_ethernet" if c["link"] == "infiniband_edr" else c["link"]
        c["ttft_s"] = 1.0 / c["tokens_per_s"]
    sim["memory"] = [{"nodes": n, "head_node_mb": 100 / n, "other_node_mb": 80 / n,
                      "draft_node_mb": 20.0} for n in (1, 2, 4)]  # fmt: skip
    sim["measured_memory"] = [{"n_stages": 2, "peak_rss_mb": [300.0, None]}]
    write_json(tmp_path / "sim.json", sim)
    out = {k: str(tmp_path / f"f7.{k}") for k in ("png", "pdf", "csv", "md")}
    inputs = {"result": [str(tmp_path / "sim.json")]}
    render_simulated_memory({"link": "gigabit_ethernet"}, inputs, out)
    table = pd.read_csv(out["csv"])
    slow = table[table.panel == "b, c"]
    assert set(slow.acceptance) == {"Dolphin"}  # the document's acceptances, not ours
    assert len(slow) == 12 and slow.ttft_s.notna().all()
    assert (table.panel == "a").sum() == 3
    render_simulated_memory({"link": None}, inputs, out)  # panel (a) alone
    assert set(pd.read_csv(out["csv"]).panel) == {"a"}
    with pytest.raises(ValueError, match="no curves over link 'fiber'"):
        render_simulated_memory({"link": "fiber"}, inputs, out)


def test_figure_8_draws_the_measured_ablations_beside_the_simulated(tmp_path) -> None:
    from kvspec.report.pipeline import render_simulated_ablation

    speeds = (("PipeInfer", 6.0), ("no early cancellation", 5.0))
    measured = [{"n_stages": n, "variant": v, "measured_tokens_per_s": s,
                 "simulated_tokens_per_s": s * 1.1, "speed_error": 0.1, "all_exact": True}
                for n in (2, 3) for v, s in speeds]  # fmt: skip
    sim = {"ablation": [{"acceptance": "pair", "alpha": 0.5, "variant": v, "tokens_per_s": s}
                        for v, s in (("PipeInfer", 10.0), ("no early cancellation", 8.0))],
           "settings": {"simulate": {"ablation": {"nodes": 8, "link": "edr", "batch": 16}}},
           "measured_ablation": measured}  # fmt: skip
    write_json(tmp_path / "sim.json", sim)
    out = {k: str(tmp_path / f"f8.{k}") for k in ("png", "pdf", "csv", "md")}
    render_simulated_ablation({}, {"result": [str(tmp_path / "sim.json")]}, out)
    table = pd.read_csv(out["csv"])
    assert (table.source == "measured").sum() == 4 and (table.source == "simulated").sum() == 2
    assert "run for real" in Path(out["md"]).read_text()
    del sim["measured_ablation"]  # ablations not run: the simulated panel alone
    write_json(tmp_path / "sim.json", sim)
    render_simulated_ablation({}, {"result": [str(tmp_path / "sim.json")]}, out)
    assert set(pd.read_csv(out["csv"]).source) == {"simulated"}


def _pair_rows(pipeinfer_speed: float, drafted: int = 10, accepted: int = 4) -> list[dict]:
    rows = [_row("iterative", 1, "a", 20.0), _row("iterative", 3, "a", 10.0),
            _row("speculative", 3, "a", 8.0), _row("pipeinfer", 3, "a", pipeinfer_speed),
            _row("iterative", 2, "a", 50.0),  # another stage count: not in Figure 9
            dict(_row("pipeinfer", 3, "a", 99.0), variant="no early cancellation")]  # fmt: skip
    for row in rows:
        if row["strategy"] != "iterative":
            row.update(drafted=drafted, accepted=accepted)
    return rows


def test_figure_9_one_bar_group_per_pair_at_its_stage_count(tmp_path) -> None:
    from kvspec.report.pipeline import pair_table, render_pairs

    pairs = [{"target": "t", "draft": "small"}, {"target": "t", "draft": "mid"}]
    runs = [_pair_rows(12.0), _pair_rows(6.0, drafted=8, accepted=6)]
    table = pair_table(runs, pairs, 3).set_index(["pair", "strategy"])
    assert len(table) == 6  # two pairs x three strategies; ablations and 2 ranks left out
    assert table.loc[("t + small", "pipeinfer"), "speed / iterative"] == pytest.approx(1.2)
    assert table.loc[("t + small", "pipeinfer"), "speed / one process"] == pytest.approx(0.6)
    assert table.loc[("t + mid", "speculative"), "accepted / drafted"] == pytest.approx(0.75)
    assert pd.isna(table.loc[("t + mid", "iterative"), "accepted / drafted"])  # drafts nothing
    for i, rows in enumerate(runs):
        write_json(tmp_path / f"r{i}.json", {"runs": rows})
    out = {k: str(tmp_path / f"f9.{k}") for k in ("png", "pdf", "csv", "md")}
    inputs = {"result": [str(tmp_path / "r0.json"), str(tmp_path / "r1.json")]}
    render_pairs({"pairs": pairs, "n_stages": 3}, inputs, out)
    text = (tmp_path / "f9.md").read_text()
    assert "faster than speculative inference for 1 of 2 pairs" in text
    assert (tmp_path / "f9.png").stat().st_size > 0
    with pytest.raises(ValueError, match="no runs at 4 target ranks"):
        pair_table(runs, pairs, 4)
