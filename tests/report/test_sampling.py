"""Document 004's report: pass@k with bootstrap intervals and paired tests, timing ratios."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvspec.io import write_json
from kvspec.report import sampling as rs
from kvspec.report.stats import bootstrap_ci, sign_flip_pvalue

from ..conftest import REPO

PAPER = str(REPO / "config/paper_results/specdec_qwen_figures_5_8.csv")


def test_bootstrap_and_sign_flip() -> None:
    lo, hi = bootstrap_ci([0.0, 1.0] * 20, 2000, seed=0)
    assert lo < 0.5 < hi and hi - lo < 0.4
    assert bootstrap_ci([0.3] * 5, 100, seed=0) == (pytest.approx(0.3), pytest.approx(0.3))
    assert sign_flip_pvalue([1.0] * 8, 100, seed=0) == pytest.approx(2 / 256)
    assert sign_flip_pvalue([1.0, -1.0] * 4, 100, seed=0) == 1.0
    assert sign_flip_pvalue(list(np.linspace(0.1, 1, 30)), 4000, seed=0) < 0.01


def _passk_file(path: Path, name: str, passed: dict[str, int], n: int = 4) -> str:
    per_task = {t: {"n": n, "c": c, "pass@1": c / n, "pass@2": 1 - ((n - c) * (n - c - 1))
                    / (n * (n - 1))} for t, c in passed.items()}  # fmt: skip
    write_json(path / f"{name}.json", {
        "method": name, "per_task": per_task, "pass@k": {"pass@1": 0, "pass@2": 0},
        "settings": {"problems": len(passed), "completions": n, "temperature": 0.7,
                     "top_p": 0.95, "max_new_tokens": 8},
    })  # fmt: skip
    return str(path / f"{name}.json")


def test_pass_at_k_frame_and_figure(tmp_path: Path) -> None:
    tasks = [f"t{i}" for i in range(6)]
    files = [
        _passk_file(tmp_path, "classical", dict.fromkeys(tasks, 2)),
        _passk_file(tmp_path, "sd_B", dict.fromkeys(tasks, 2)),
        _passk_file(tmp_path, "sd_B_printed", dict.fromkeys(tasks, 0)),
    ]
    item = {"figure": 8, "experiment": "B", "methods": ["classical", "sd_B", "sd_B_printed"],
            "target": "target", "seed": 0, "bootstrap": 500}  # fmt: skip
    out = {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf", "csv", "md")}
    rs.passk_experiment(item, {"result": files, "paper": [PAPER]}, out)
    df = pd.read_csv(out["csv"])
    same = df[(df["method"] == "sd_B") & (df["k"] == 1)].iloc[0]
    assert same["minus_baseline"] == 0 and same["p_value"] == 1.0
    assert same["drop_% (paper)"] == pytest.approx(1.7)
    worse = df[(df["method"] == "sd_B_printed") & (df["k"] == 1)].iloc[0]
    assert worse["drop_points (ours)"] == pytest.approx(50) and worse["p_value"] < 0.05
    assert not re.search(r"\|\s*-0\s*\|", Path(out["md"]).read_text())  # ties: 0, not -0
    assert Path(out["png"]).read_bytes()[:4] == b"\x89PNG"


def test_timing_ratios_beside_the_papers(tmp_path: Path) -> None:
    summary = {"classical": {"s_per_token_mean": 0.2, "s_per_token_std": 0.01, "tok_s": 5.0,
                             "latency_s": 1.0},
               "sd_A": {"s_per_token_mean": 0.1, "s_per_token_std": 0.01, "tok_s": 10.0,
                        "latency_s": 0.5}}  # fmt: skip
    write_json(
        tmp_path / "t.json",
        {
            "summary": summary,
            "settings": {
                "runs": 2,
                "problems": 1,
                "max_new_tokens": 8,
                "temperature": 0.7,
                "top_p": 0.95,
            },
        },
    )
    out = {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf", "csv", "md")}
    item = {"figure": 5, "experiment": "A", "methods": ["classical", "sd_A"], "target": "t"}
    rs.timing_experiment(item, {"result": [str(tmp_path / "t.json")], "paper": [PAPER]}, out)
    df = pd.read_csv(out["csv"]).set_index("metric")
    assert float(df.loc["latency_reduction_x", "ours"]) == pytest.approx(2.0)
    assert "2.8 (up to, 4.2.1)" in df.loc["latency_reduction_x", "paper"]


def test_timed_variants_get_their_own_labelled_rows(tmp_path: Path) -> None:
    row = {"s_per_token_std": 0.01, "latency_s": 1.0}
    summary = {"classical": {**row, "s_per_token_mean": 0.2, "tok_s": 5.0},
               "sd_A": {**row, "s_per_token_mean": 0.25, "tok_s": 4.0},
               "sd_A_cut": {**row, "s_per_token_mean": 0.16, "tok_s": 6.0}}  # fmt: skip
    settings = {"runs": 2, "problems": 1, "max_new_tokens": 8, "temperature": 0.7, "top_p": 0.95}
    methods = {"sd_A_cut": {"kind": "sd", "draft": "d", "k": 5, "stop_below": 0.5}}
    write_json(tmp_path / "t.json", {"summary": summary, "settings": settings, "methods": methods})
    out = {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf", "csv", "md")}
    item = {"figure": 5, "experiment": "A", "methods": ["classical", "sd_A", "sd_A_cut"],
            "target": "t"}  # fmt: skip
    rs.timing_experiment(item, {"result": [str(tmp_path / "t.json")], "paper": [PAPER]}, out)
    df = pd.read_csv(out["csv"]).set_index("metric")
    assert float(df.loc["latency_reduction_x", "ours"]) == pytest.approx(0.8)  # the document's
    variant = "latency_reduction_x, sd_A_cut (our variant)"
    assert float(df.loc[variant, "ours"]) == pytest.approx(1.25)
    assert float(df.loc["throughput_gain_x, sd_A_cut (our variant)", "ours"]) == pytest.approx(1.2)
    assert df.loc[variant, "paper"] != df.loc[variant, "paper"]  # empty: no paper number
    assert "below 0.5" in Path(out["md"]).read_text()


def _figure_10(tmp_path: Path, seconds: dict, methods: dict) -> tuple[pd.DataFrame, str]:
    summary = {m: {"s_per_token_mean": t, "s_per_token_std": 0.001, "tok_s": 1 / t,
                   "latency_s": 1.0} for m, t in seconds.items()}  # fmt: skip
    write_json(tmp_path / "t.json", {"summary": summary, "settings": {"runs": 3},
                                     "methods": methods})  # fmt: skip
    out = {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf", "csv", "md")}
    item = {"methods": list(seconds), "target": "t"}
    rs.time_per_token(item, {"result": [str(tmp_path / "t.json")]}, out)
    return pd.read_csv(out["csv"]).set_index("method"), Path(out["md"]).read_text()


FIGURE_10_METHODS = {"classical": {"kind": "classical"}, "sd_B_k5": {"kind": "sd", "k": 5},
                     "three_model": {"kind": "three_model", "k_d": 5, "k_i": 3},
                     "sd_B_cut": {"kind": "sd", "k": 5, "stop_below": 0.5}}  # fmt: skip


def test_figure_10_sets_the_documents_order_beside_the_measured_one(tmp_path: Path) -> None:
    seconds = {"classical": 0.02, "sd_B_k5": 0.016, "three_model": 0.029, "sd_B_cut": 0.0125}
    df, md = _figure_10(tmp_path, seconds, FIGURE_10_METHODS)
    assert df.loc["sd_B_k5", "x classical (ours)"] == pytest.approx(1.25)
    assert df.loc["three_model", "x classical (ours)"] == pytest.approx(0.02 / 0.029)
    paper = df["paper (the text; no numbers)"]
    assert "performing worse" in paper["three_model"] and "outperforms" in paper["sd_B_k5"]
    assert paper["sd_B_cut"] != paper["sd_B_cut"]  # our variant: nothing from the document
    assert ("speculative faster than classical: yes; three-model slower than speculative: yes"
            in md)  # fmt: skip
    seconds = {"classical": 0.02, "sd_B_k5": 0.021, "three_model": 0.015}
    _, md = _figure_10(tmp_path, seconds, FIGURE_10_METHODS)
    assert "faster than classical: no; three-model slower than speculative: no" in md


def test_figure_10_needs_a_classical_method(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one classical method"):
        _figure_10(tmp_path, {"sd_B_k5": 0.02, "three_model": 0.03}, FIGURE_10_METHODS)


def test_notes_name_the_chosen_problems() -> None:
    from kvspec.report.sampling import _which_problems

    chosen = {"problems": 2, "task_ids": ["HumanEval/7", "HumanEval/22", "HumanEval/29"]}
    assert _which_problems(chosen) == "HumanEval HumanEval/7, HumanEval/22"
    assert _which_problems({"problems": 2, "task_ids": []}) == "the first 2 HumanEval prompts"
