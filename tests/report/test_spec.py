"""Thesis Tables 4.1-4.8 and Figure 4.1 from synthetic acceptance rows and speed summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvspec.io import write_rows
from kvspec.report.spec import render_acceptance, render_speed, table_4_8
from kvspec.report.stats import paired_speed_ratio

from ..conftest import REPO

PAPER = REPO / "config" / "paper_results"
SETTINGS = {"min_match_lengths": [0, 4, 8, 16], "confidence_thresholds": [0.5], "k": 4,
            "confidence": 0.5, "sweep_heldout": "general"}  # fmt: skip


def _rows(path: Path, acceptance: list[float], prompt: str = "p1") -> str:
    """Four positions of one prompt with matches of 0, 4, 8 and 16 tokens."""
    rows = pd.DataFrame({
        "prompt": prompt, "pos": range(4), "token": [5, 6, 7, 8], "acceptance": acceptance,
        "q_top1": [0.2, 0.6, 0.9, 0.9], "q_mode": [1, 6, 7, 8], "suffix_len": [0, 4, 8, 16],
        "count": [1, 10, 100, 1000],
    })  # fmt: skip
    write_rows(path, rows, {"test": True})
    return str(path)


def _stats(path: Path, fraction: float) -> str:
    path.write_text(json.dumps({"fraction": fraction, "build_seconds": 1.5, "n_docs": 4,
                                "n_tokens": 40, "bytes_per_token": 5.0}))  # fmt: skip
    return str(path)


def _paper_inputs(numbers) -> dict[str, list[str]]:
    return {f"t4_{n}": [str(PAPER / f"thesis_table_4_{n}.csv")] for n in numbers}


def _outputs(tmp_path: Path, numbers, figure: bool) -> dict[str, str]:
    out = {}
    for n in numbers:
        out[f"t4_{n}"], out[f"t4_{n}_md"] = str(tmp_path / f"t{n}.csv"), str(tmp_path / f"t{n}.md")
    if figure:
        out |= {f"f4_1_{e}": str(tmp_path / f"f.{e}") for e in ("png", "pdf", "csv")}
    return out


def test_acceptance_tables_from_rows(tmp_path: Path) -> None:
    sweep = [{"fraction": f, "rows": _rows(tmp_path / f"s{f}.csv", [0.1, 0.2, 0.3, 0.4]),
              "stats": _stats(tmp_path / f"s{f}.json", f)} for f in (0.5, 1.0)]  # fmt: skip
    main = [
        {"heldout": h, "index": i, "file": _rows(tmp_path / f"{h}_{i}.csv", acc)}
        for h in ("general", "python")
        for i, acc in (("sft", [0.0, 0.0, 0.5, 0.5]), ("responses", [1.0, 1.0, 1.0, 1.0]))
    ]
    item = {"sweep": sweep, "main": main, "settings": SETTINGS}
    out = _outputs(tmp_path, range(1, 7), figure=True)
    out |= {"exact_csv": str(tmp_path / "ex.csv"), "exact_md": str(tmp_path / "ex.md")}
    render_acceptance(item, _paper_inputs(range(1, 7)), out)
    t41 = pd.read_csv(out["t4_1"])
    full = t41[t41["model"] == "Infini-5M"].iloc[0]
    assert full["ml_0 (ours)"] == pytest.approx(25.0)  # mean of 0.1..0.4, in %
    assert full["ml_4 (ours)"] == pytest.approx(30.0) and full["ml_16 (ours)"] == pytest.approx(40)
    assert full["ml_0 (paper)"] == pytest.approx(44.89) and full["documents"] == 4
    t42 = pd.read_csv(out["t4_2"]).set_index(["prompt_set", "configuration"])
    assert t42.loc[("General", "SFT-5M"), "ml_8 (ours)"] == pytest.approx(50.0)
    assert t42.loc[("General", "Target-5M"), "ml_0 (ours)"] == pytest.approx(100.0)
    t46 = pd.read_csv(out["t4_6"]).set_index(["prompt_set", "configuration"])
    assert t46.loc[("General", "Target-5M"), "len_4 (ours)"] == pytest.approx(75.0)
    t44 = pd.read_csv(out["t4_4"]).set_index("configuration")
    # q_mode equals the token at positions 1-3: one speculation of 0, then one of 2 (k=4,
    # the last token is the target's own) -> mean 1.0 accepted per speculation at ml_0
    assert t44.loc["SFT-5M", "ml_0 (ours)"] == pytest.approx(1.0)
    assert "Positions analysed" in Path(out["t4_2_md"]).read_text()
    assert Path(out["f4_1_png"]).stat().st_size > 0
    exact = pd.read_csv(out["exact_csv"]).set_index(["heldout", "index", "match_len"])
    cell = exact.loc[("general", "sft", "8-11")]  # exactly the position matched 8 tokens
    assert cell["positions"] == 1 and cell["acceptance"] == pytest.approx(0.5)
    assert exact.loc[("general", "sft", "1"), "positions"] == 0  # no position matched 1


def test_exact_length_bins_with_target_confidence_columns():
    from kvspec.ngram.acceptance_stats import by_exact_match_length

    rows = pd.DataFrame({
        "suffix_len": [0, 0, 3, 40], "acceptance": [0.1, 0.3, 0.5, 0.9], "q_top1": 0.5,
        "p_top1": [0.2, 0.4, 0.9, 0.95], "p_q_mode": [0.0, 0.4, 0.9, 0.95], "hit": [0, 1, 1, 1],
    })  # fmt: skip
    table = by_exact_match_length(rows, edges=(0, 1, 4)).set_index("match_len")
    assert list(table.index) == ["0", "1-3", ">=4"]
    assert table.loc["0", "positions"] == 2 and table.loc["0", "hit"] == pytest.approx(0.5)
    assert table.loc["1-3", "p_q_mode"] == pytest.approx(0.9)
    assert table.loc[">=4", "acceptance"] == pytest.approx(0.9)


def _summary(path: Path, rows: list[tuple[str, float, float]], spread: float = 0.02) -> str:
    df = pd.DataFrame(
        [{"method": m, "tok_s": t, "accept_len": a, "speedup": t / rows[0][1],
          "draft_ms_median": 0.5, "exact_vs_greedy": 1.0, "baseline_spread": spread,
          "baseline_unstable": spread > 0.1, "load1_max": 1.5} for m, t, a in rows]
    )  # fmt: skip
    df.to_csv(path, index=False)
    return str(path)


def _latency(path: Path) -> str:
    timing = {"p50_ms": 0.4, "p90_ms": 0.9, "p99_ms": 2.0, "mean_ms": 0.5, "n": 100}
    result = {"decode": timing, "lookup": {**timing, "p50_ms": 0.7}, "sequential": timing}
    path.write_text(json.dumps(result))
    return str(path)


def _runs(path: Path, seconds: dict[str, list[float]]) -> str:
    """runs.json of methods timed on the same prompts (64 tokens each)."""
    records = [{"method": m, "prompt": f"p{i}", "tokens": [0] * 64, "seconds": s}
               for m, times in seconds.items() for i, s in enumerate(times)]  # fmt: skip
    path.write_text(json.dumps({"records": records}))
    return str(path)


def test_speed_tables_name_our_sets_and_keep_eagle(tmp_path: Path) -> None:
    rows = [("greedy", 10.0, 1.0), ("sd_infgram_target", 25.0, 3.0)]
    main = [{"model": "target", "bench": b, "file": _summary(tmp_path / f"{b}.csv", rows, s)}
            for b, s in (("he", 0.02), ("py", 0.3))]  # fmt: skip
    timed = {"sd_hybrid_target_branches": [1.0, 2.0, 3.0], "sd_suffix_decoding": [1.1, 2.0, 3.6],
             "hf_prompt_lookup": [2.0, 3.0, 4.0],
             "sd_hybrid_target_draft": [0.9, 1.8, 2.7]}  # fmt: skip
    runs = [_runs(tmp_path / "he.json", timed), _runs(tmp_path / "py.json", {"greedy": [1.0]})]
    item = {"main": main, "other": [], "labels": {"he": "HumanEval"},
            "columns": {"humaneval": "he", "sft_coding": "py"}, "latency": {"k": 16}}  # fmt: skip
    out = _outputs(tmp_path, (7, 8), figure=False)
    out |= {"latency_csv": str(tmp_path / "lat.csv"), "latency_md": str(tmp_path / "lat.md")}
    inputs = {**_paper_inputs((7, 8)), "latency": [_latency(tmp_path / "lat.json")],
              "main_runs": runs}  # fmt: skip
    render_speed(item, inputs, out)
    notes = Path(out["t4_7_md"]).read_text()
    ratio, se = paired_speed_ratio(([64] * 3, timed["sd_hybrid_target_branches"]),
                                   ([64] * 3, timed["sd_suffix_decoding"]))  # fmt: skip
    assert ratio == pytest.approx(6.7 / 6.0)
    assert (f"target/he: Request + Infinigram Target hybrid, two branches (ours) ÷ SuffixDecoding "
            f"(Arctic Inference, target responses) {ratio:.3f} ± {se:.3f} (3 prompts); ÷ HF "
            "prompt lookup 1.500 ± ") in notes  # fmt: skip
    assert "over the prompts, paired" in notes and "target/py: Request" not in notes
    assert (
        "target/he: Two-branch hybrid + draft model where n-grams are weak (ours) ÷ Request "
        f"+ Infinigram Target hybrid, two branches (ours) {6.0 / 5.4:.3f} ± "
    ) in notes
    assert "target/he: greedy baseline spread 2.0%" in notes
    assert "UNSTABLE (busy machine; ratios unreliable): target/py" in notes
    latency = pd.read_csv(out["latency_csv"]).set_index("timing")
    assert latency.loc["lookup", "p50_ms"] == pytest.approx(0.7)
    t47 = pd.read_csv(out["t4_7"]).set_index("method")
    ours = t47.loc["Infinigram Target-5M"]
    assert ours["speedup_humaneval (ours)"] == pytest.approx(2.5)
    assert ours["speedup_humaneval (paper)"] == pytest.approx(2.96)
    assert t47.loc["Eagle-3 (Neural)", "speculation_latency (ours)"] == "not reproduced"
    assert "NOT MEASURED" in Path(out["t4_8_md"]).read_text()  # no other target configured


def test_table_4_8_puts_paper_numbers_on_the_plain_infgram_rows_only() -> None:
    summaries = pd.DataFrame(
        [{"model": "alt", "bench": "he", "method": m, "tok_s": t, "speedup": s, "accept_len": a}
         for m, t, s, a in (("sd_infgram_target", 20.0, 0.7, 1.4),
                            ("sd_infgram_target_adaptive", 28.0, 0.99, 1.0),
                            ("greedy", 28.0, 1.0, 1.0))]
    )  # fmt: skip
    table = table_4_8(summaries, {"he": "HumanEval"}, PAPER / "thesis_table_4_8.csv")
    he = table[table["benchmark"] == "HumanEval"].set_index("mode")
    assert set(he.index) == {"INFGRAM", "INFGRAM adaptive"}
    assert he.loc["INFGRAM", "speedup (paper Qwen3-8B)"] == pytest.approx(2.30)
    assert he.loc["INFGRAM", "speedup (ours)"] == pytest.approx(0.7)
    assert pd.isna(he.loc["INFGRAM adaptive", "speedup (paper Qwen3-8B)"])
    assert he.loc["INFGRAM adaptive", "speedup (ours)"] == pytest.approx(0.99)
    assert table["speedup (paper Qwen3-32B)"].notna().sum() == 3  # one per paper benchmark
