"""Content checks on the speculative-decoding outputs of the session's ci-scale run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ..conftest import REPO, shared_mirror

pytestmark = pytest.mark.skipif(shared_mirror() is None, reason="offline data mirror not present")


@pytest.fixture(scope="module")
def spec() -> dict:
    return yaml.safe_load((REPO / "config" / "ci.yaml").read_text())["spec"]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ours(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c.endswith("(ours)")]


def test_prompts_split_and_responses_generated(ci_run: Path, spec: dict) -> None:
    prompts = _jsonl(ci_run / "results/generate/prompts.jsonl")
    for name, held in spec["heldout"].items():
        assert sum(p["split"] == name for p in prompts) == held["n"], name
    n_index = sum(p["split"] == "index" for p in prompts)
    assert n_index == spec["prompts"]["limit"]
    for model, fraction in spec["generate"]["models"].items():
        shards = sorted((ci_run / "results/generate" / model / "shards").glob("*.jsonl"))
        assert len(shards) == spec["generate"]["shards"]
        responses = _jsonl(ci_run / "results/generate" / model / "responses.jsonl")
        n_held = sum(h["n"] for h in spec["heldout"].values()) if model == spec["target"] else 0
        assert len(responses) == n_held + round(fraction * n_index)
        assert all(
            0 < len(r["response_ids"]) <= spec["generate"]["max_new_tokens"] for r in responses
        )
    assert "generate:" in (ci_run / "logs/generate/target/0.log").read_text()  # tqdm progress


def test_indexes_hold_only_index_prompts(ci_run: Path, spec: dict) -> None:
    prompts = _jsonl(ci_run / "results/generate/prompts.jsonl")
    n_index = sum(p["split"] == "index" for p in prompts)
    target = spec["target"]
    for fraction in spec["index"]["sft_fractions"]:
        name = f"sft_{fraction:g}"
        stats = json.loads((ci_run / "results/ngram" / target / f"{name}.json").read_text())
        assert stats["n_docs"] == round(fraction * n_index)
        assert stats["build_seconds"] > 0 and 1 < stats["bytes_per_token"] < 20
        assert stats["token_dtype"] == "u16"
        assert (ci_run / "results/ngram" / target / name / "table").stat().st_size > 0
    for model in spec["generate"]["models"]:
        stats = json.loads((ci_run / "results/ngram" / model / "responses_1.json").read_text())
        responses = _jsonl(ci_run / "results/generate" / model / "responses.jsonl")
        assert stats["n_docs"] == sum(r["split"] == "index" for r in responses)
        n_tokens = sum(len(r["response_ids"]) for r in responses if r["split"] == "index")
        assert stats["n_tokens"] == n_tokens  # held-out responses never entered


def test_acceptance_tables_have_finite_numbers_in_range(ci_run: Path) -> None:
    report = ci_run / "results/report"
    for n in (1, 2, 3, 6):
        table = pd.read_csv(report / f"thesis_table_4_{n}.csv")
        ours = table[table[_ours(table)[0]].notna()]
        assert len(ours) >= 2, n
        first = ours[_ours(table)[0]]  # ml_0 / len_0: every position counts
        assert np.isfinite(first).all() and ((first >= 0) & (first <= 100)).all(), n
        values = ours[_ours(table)].to_numpy(dtype=float)
        assert np.nanmin(values) >= 0 and np.nanmax(values) <= 100 + 1e-9, n
        assert "(paper)" in (report / f"thesis_table_4_{n}.md").read_text()
    hits = pd.read_csv(report / "thesis_table_4_6.csv").dropna(subset=["len_0 (ours)"])
    assert (hits["len_0 (ours)"] == 100).all()
    assert (hits["len_4 (ours)"] >= hits["len_8 (ours)"]).all()


def test_accepted_tokens_within_depth(ci_run: Path, spec: dict) -> None:
    for n in (4, 5):
        table = pd.read_csv(ci_run / f"results/report/thesis_table_4_{n}.csv")
        values = table[_ours(table)].to_numpy(dtype=float)
        assert np.isfinite(values[:, 0]).all()
        assert np.nanmin(values) >= 0 and np.nanmax(values) <= spec["acceptance"]["k"]


def test_sweep_indexes_grow_and_table_has_build_times(ci_run: Path, spec: dict) -> None:
    t41 = pd.read_csv(ci_run / "results/report/thesis_table_4_1.csv").dropna(subset=["fraction"])
    assert sorted(t41["fraction"]) == sorted(spec["index"]["sft_fractions"])
    assert t41.sort_values("fraction")["tokens"].is_monotonic_increasing
    assert (t41["build_time_s (ours)"] > 0).all()
    assert t41.loc[t41["model"] == "Infini-5M", "build_time_s (paper)"].item() == 840


def _runs(ci_run: Path, model: str, bench: str) -> list[dict]:
    return json.loads((ci_run / "results/specdecode" / model / bench / "runs.json").read_text())[
        "records"
    ]


def test_greedy_speculation_equals_greedy_on_benchmark_prompts(ci_run: Path, spec: dict) -> None:
    checked = 0
    for model, run in spec["speed"]["runs"].items():
        for bench in run["sets"]:
            records = _runs(ci_run, model, bench)
            assert {r["method"] for r in records} == set(run["methods"])
            assert len(records) == len(run["methods"]) * spec["speed"]["sets"][bench]["n"]
            for r in records:
                # Exact, or a float32 near-tie of the target decided the first difference.
                assert r["exact"] or r["tie_margin"] < 1e-3, (
                    model,
                    bench,
                    r["method"],
                    r["prompt"],
                )
                checked += r["method"].startswith("sd_")
    assert checked > 0


def test_speed_summaries(ci_run: Path, spec: dict) -> None:
    for model, run in spec["speed"]["runs"].items():
        for bench in run["sets"]:
            s = pd.read_csv(ci_run / "results/specdecode" / model / bench / "summary.csv")
            s = s.set_index("method")
            assert s.loc["greedy", "speedup"] == 1.0 and s.loc["greedy", "accept_len"] == 1.0
            assert (s["tok_s"] > 0).all() and (s["accept_len"] >= 1).all()
            for m in [m for m in run["methods"] if m.startswith("sd_")]:
                assert 0 < s.loc[m, "verify_share"] < 1 and s.loc[m, "draft_share"] >= 0
            # every method in greedy mode reproduced greedy decoding on every prompt
            assert (s["exact_vs_greedy"] == 1.0).all(), s["exact_vs_greedy"]
            assert s["baseline_spread"].notna().all() and (s["load1_max"] >= 0).all()
            runs = json.loads(
                (ci_run / "results/specdecode" / model / bench / "runs.json").read_text()
            )
            greedy = [r for r in runs["records"] if r["method"] == "greedy"]
            assert all(
                len(r["baseline_seconds"]) == spec["speed"]["baseline_repeats"] for r in greedy
            )


def test_loop_check_times_the_prompts_after_table_4_7s(ci_run: Path, tmp_path: Path) -> None:
    """kvspec.ngram.loop_cli in a finished workflow directory: the speed job's loop on the
    HumanEval and SFT coding prompts Table 4.7 does not time, paired against a reference."""
    out = subprocess.run(
        [sys.executable, "-m", "kvspec.ngram.loop_cli", "--config", str(REPO / "config/ci.yaml"),
         "--sources", "humaneval", "python", "--end", "6", "--out", str(tmp_path),
         "--methods", "sd_hybrid_target_branches", "sd_infgram_target"],
        cwd=ci_run, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "checkhumaneval: 3 prompts" in out and "checkpython: 2 prompts" in out
    assert "pooled: 5 prompts\n" in out and "/ sd_infgram_target " in out
    runs = json.loads((tmp_path / "target/checkhumaneval.json").read_text())["records"]
    assert {r["prompt"] for r in runs} == {f"HumanEval/{i}" for i in range(3, 6)}
    assert all(r["exact"] or r["tie_margin"] < 1e-3 for r in runs)


def test_ranking_times_its_own_sets_with_greedy_and_its_methods(ci_run: Path, spec: dict) -> None:
    """spec.ranking's speed jobs run greedy and the ranking's methods on prompts Table 4.7
    does not time; its table pairs them per set and pooled."""
    ranking = spec["ranking"]
    runs = json.loads((ci_run / "results/specdecode/target/rankhumaneval/runs.json").read_text())
    records = runs["records"]
    assert {r["method"] for r in records} == {"greedy", *ranking["methods"]}
    assert {r["prompt"] for r in records} == {"HumanEval/3", "HumanEval/4"}
    assert all(r["exact"] or r["tie_margin"] < 1e-3 for r in records)
    table = pd.read_csv(ci_run / "results/report/thesis_ranking.csv")
    assert list(table["set"].unique()) == ["HumanEval/3-4", "Spec-Bench", "pooled"]
    assert list(table[table["set"] == "pooled"]["prompts"]) == [4, 4]
    reference = table[table["method"] == ranking["methods"][-1]]
    assert (reference[f"vs_{ranking['methods'][-1]}"] == 1.0).all()


def test_draft_latency(ci_run: Path, spec: dict) -> None:
    result = json.loads((ci_run / "results/specdecode/target/draft_latency.json").read_text())
    assert result["provenance"]["config_hash"]
    for timing in ("decode", "lookup", "sequential"):
        assert result[timing]["n"] > 0 and result[timing]["p50_ms"] > 0
    assert 0 < result["sequential"]["n"] <= spec["latency"]["sequential_contexts"]
    assert result["decode"]["n"] == result["contexts"]
    table = pd.read_csv(ci_run / "results/report/draft_latency.csv")
    assert list(table["timing"]) == ["decode", "lookup", "sequential"]


def test_speed_tables(ci_run: Path, spec: dict) -> None:
    t47 = pd.read_csv(ci_run / "results/report/thesis_table_4_7.csv").set_index("method")
    assert t47.loc["Eagle-3 (Neural)", "speculation_latency (ours)"] == "not reproduced"
    assert math.isnan(t47.loc["Eagle-3 (Neural)", "speedup_humaneval (ours)"])
    assert t47.loc["Eagle-3 (Neural)", "speedup_humaneval (paper)"] == 2.51
    assert t47.loc["Llama-3.1-8B (Baseline)", "speedup_humaneval (ours)"] == 1.0
    for label in (
        "Infinigram Target-5M",
        "HF prompt lookup",
        "HF assisted generation (draft model)",
    ):
        assert t47.loc[label, "speed_humaneval_tok_s (ours)"] > 0
    t48 = pd.read_csv(ci_run / "results/report/thesis_table_4_8.csv")
    ours = t48.dropna(subset=["speedup (ours)"])
    alt = spec["speed"]["runs"]["target_alt"]
    infgram = {"sd_infgram_target", "sd_infgram_target_adaptive"} & set(alt["methods"])
    assert len(ours) == len(alt["sets"]) * len(infgram)
    assert (ours["accept_len (ours)"] >= 1).all()
    assert t48["speedup (paper Qwen3-8B)"].notna().sum() == 3  # paper rows: INFGRAM only
    assert t48.loc[t48["mode"] == "INFGRAM adaptive", "speedup (paper Qwen3-8B)"].isna().all()


def test_acceptance_by_exact_match_length(ci_run: Path, spec: dict) -> None:
    table = pd.read_csv(ci_run / "results/report/acceptance_by_match_length.csv")
    assert set(table["heldout"]) == set(spec["acceptance"]["heldout"])
    filled = table[table["positions"] > 0]
    for col in ("acceptance", "q_top1", "p_top1", "p_q_mode", "hit"):
        assert filled[col].between(0, 1).all(), col
    assert (filled["p_q_mode"] <= filled["p_top1"] + 1e-9).all()


def test_figure_4_1(ci_run: Path) -> None:
    report = ci_run / "results/report"
    assert (report / "thesis_figure_4_1.png").read_bytes()[:4] == b"\x89PNG"
    assert (report / "thesis_figure_4_1.pdf").read_bytes()[:4] == b"%PDF"
    cells = pd.read_csv(report / "thesis_figure_4_1.csv")
    assert len(cells) > 0 and cells["acceptance"].between(0, 1).all() and (cells["n"] > 0).all()
