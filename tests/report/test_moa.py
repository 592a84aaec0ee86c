"""Document 002's tables: our drafters' per-set speedup and τ beside the document's rows, the
HumanEval tables with chain and tree drafting, sizes read from the saved heads."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kvspec.io import write_json
from kvspec.report.moa import (
    render_table_2,
    render_table_5,
    render_table_8,
    render_table_9,
    render_table_10,
    seed_runs,
    seed_separation,
    separation,
    table_2,
    table_8,
    table_humaneval,
)
from kvspec.report.stats import ratio_stderr

from ..conftest import REPO

PAPER = REPO / "config" / "paper_results"
ITEM = {"labels": {"ours": "Ours (TLI=0)", "eagle": "EAGLE-2", "independent": "Independent"},
        "sets": {"humaneval": "HumanEval", "gsm8k": "GSM8K"}, "chain_k": 4,
        "tree": {"depth": 3, "topk": 2, "total": 6}, "max_new_tokens": 64,
        "models": ["target", "target_alt"], "repeats": 1}  # fmt: skip


def _summary() -> pd.DataFrame:
    rows = []
    for s, base in (("humaneval", 10.0), ("gsm8k", 8.0)):
        rows.append({"set": s, "method": "greedy", "tok_s": base, "accept_len": 1.0,
                     "speedup": 1.0, "exact_vs_greedy": 1.0})  # fmt: skip
        for i, name in enumerate(ITEM["labels"]):
            for mode, gain in (("chain", 1.0), ("tree", 1.5)):
                speed = base * (0.5 + 0.1 * i) * gain
                rows.append({"set": s, "method": f"{name}/{mode}", "tok_s": speed,
                             "accept_len": 1.2 + i + gain, "speedup": speed / base,
                             "exact_vs_greedy": 1.0})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture()
def heads(tmp_path) -> str:
    """A decoding job's runs file with the heads' training stats."""
    stats = {name: {"trainable_parameters": 1_000_000 * (i + 1),
                    "trainable_per_decoder_layer": i + 1.0}
             for i, name in enumerate(ITEM["labels"])}  # fmt: skip
    path = tmp_path / "bench.json"
    write_json(path, {"records": [], "heads": stats})
    return str(path)


def test_table_2_has_our_tree_rows_and_the_documents(heads) -> None:
    table = table_2(_summary(), ITEM, heads, PAPER / "moa_table_2.csv").set_index("drafter")
    ours = table.loc["Ours (TLI=0)"]
    assert ours["humaneval_speedup (ours)"] == pytest.approx(0.75)
    assert ours["gsm8k_tau (ours)"] == pytest.approx(2.7)
    assert ours["mean_speedup (ours)"] == pytest.approx(0.75)
    assert ours["humaneval_speedup (paper)"] == pytest.approx(2.05, abs=0.5)  # the document's
    assert ours["trainable_size (ours)"] == "1.00M (1.00 layers)"
    independent = table.loc["Independent"]  # the document has two Independent rows
    assert independent["gsm8k_tau (ours)"].notna().sum() == 1
    assert pd.isna(table.loc["Ours (TLI=3)", "humaneval_tau (ours)"])


def test_humaneval_tables_pick_the_mode_and_add_the_baseline(heads) -> None:
    t10 = table_humaneval(_summary(), ITEM, heads, PAPER / "moa_table_10.csv", "tree", True)
    t10 = t10.set_index(["drafter", "decoding"])
    assert t10.loc[("EAGLE", "EAGLE-2"), "tokens_per_s (ours)"] == pytest.approx(9.0)
    assert t10.loc[("Baseline", "Vanilla"), "tokens_per_s (ours)"] == pytest.approx(10.0)
    assert t10.loc[("Baseline", "Vanilla"), "tokens_per_s (paper)"] == pytest.approx(33)
    independent = t10.loc[("Independent", "EAGLE-2")]  # the document's two sizes: ours once
    assert independent["speedup"].notna().sum() == 1
    assert independent["tokens_per_s (ours)"].notna().sum() == 1
    t5 = table_humaneval(_summary(), ITEM, heads, PAPER / "moa_table_5.csv", "chain", False)
    assert t5.set_index("drafter").loc["EAGLE", "accept_len (ours)"] == pytest.approx(3.2)


# per prompt (new tokens, target forwards) of each chain method on the HumanEval set
COUNTS = {"eagle/chain": [(64, 40), (64, 52), (60, 44)],
          "ours/chain": [(64, 41), (64, 50), (60, 45)],
          "independent/chain": [(64, 60), (64, 62), (60, 55)]}  # fmt: skip


def _runs_with_records(heads: str, tmp_path: Path) -> str:
    from kvspec.io import read_json

    records = [
        {
            "method": m,
            "prompt": f"HumanEval/{i}",
            "set": "humaneval",
            "tokens": [1] * tokens,
            "forwards": forwards,
        }
        for m, counts in COUNTS.items()
        for i, (tokens, forwards) in enumerate(counts)
    ]
    path = tmp_path / "with_records.json"
    write_json(path, {**read_json(heads), "records": records})
    return str(path)


def test_table_5_gives_tau_its_prompt_sampling_error(heads, tmp_path) -> None:
    runs = _runs_with_records(heads, tmp_path)
    t5 = table_humaneval(_summary(), ITEM, runs, PAPER / "moa_table_5.csv", "chain", False)
    eagle = t5.set_index("drafter").loc["EAGLE"]
    tokens, forwards = zip(*COUNTS["eagle/chain"], strict=True)
    assert eagle["accept_len stderr (ours)"] == pytest.approx(ratio_stderr(tokens, forwards))
    assert eagle["accept_len stderr (ours)"] > 0
    out = {"csv": str(tmp_path / "t5.csv"), "md": str(tmp_path / "t5.md")}
    summary = tmp_path / "bench.csv"
    _summary().to_csv(summary, index=False)
    render_table_5(ITEM, {"summary": [str(summary)], "runs": [runs],
                          "paper": [str(PAPER / "moa_table_5.csv")]}, out)  # fmt: skip
    md = Path(out["md"]).read_text()
    assert " ± " in md and "accept_len stderr (ours)" in Path(out["csv"]).read_text()
    assert "2 of 3 pairs differ by more than 2 SE; not separated: Ours (TLI=0) / EAGLE-2" in md


def _with_repeats(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with each head's chain retrained once (repeat 1): τ +0.05 for EAGLE, -0.05
    for the others, speedup unchanged."""
    chains = summary[summary["method"].str.endswith("/chain")].copy()
    chains["accept_len"] += [0.05 if m.startswith("eagle") else -0.05 for m in chains["method"]]
    chains["method"] = chains["method"].str.replace("/chain", ".repeat1/chain")
    return pd.concat([summary, chains], ignore_index=True)


def test_table_5_reports_tau_over_training_runs(heads, tmp_path) -> None:
    """Retrained heads ("<head>.repeat<r>/chain") are not rows of their own: each head's row
    lists τ and speedup per training run, and the note says which heads' τ ranges overlap."""
    summary = _with_repeats(_summary())
    labels = {k: ("EAGLE" if v == "EAGLE-2" else v) for k, v in ITEM["labels"].items()}
    runs = seed_runs(summary, "humaneval", labels).set_index("drafter")
    assert runs.loc["EAGLE", "accept_len_runs"] == pytest.approx([3.2, 3.25])
    assert runs.loc["Ours (TLI=0)", "accept_len_runs"] == pytest.approx([2.2, 2.15])
    text = seed_separation(runs.reset_index())
    assert "trained 2-2 times" in text and "range over a head's runs is 0.050-0.050" in text
    assert "3 of 3 pairs of heads have τ ranges that do not overlap" in text
    close = runs.reset_index()
    close.loc[0, "accept_len_runs"] = [2.2, 3.3]  # Ours (TLI=0) now spans EAGLE's range
    assert "2 of 3 pairs" in seed_separation(close)
    assert "not measured" in seed_separation(seed_runs(_summary(), "humaneval", labels))
    path = tmp_path / "bench.csv"
    summary.to_csv(path, index=False)
    out = {"csv": str(tmp_path / "t5.csv"), "md": str(tmp_path / "t5.md")}
    render_table_5(
        {**ITEM, "repeats": 2},
        {"summary": [str(path)], "runs": [heads], "paper": [str(PAPER / "moa_table_5.csv")]},
        out,
    )
    table = pd.read_csv(out["csv"])
    assert not table["drafter"].str.contains("repeat").any()
    eagle = table.set_index("drafter").loc["EAGLE"]
    assert eagle["accept_len per training run (ours)"] == "3.200, 3.250"
    assert "3 of 3 pairs of heads" in Path(out["md"]).read_text()


def test_separation_pairs_drafters_on_their_common_prompts() -> None:
    per_prompt = {m: {f"p{i}": c for i, c in enumerate(counts)} for m, counts in COUNTS.items()}
    labels = {m: m.split("/")[0] for m in COUNTS}
    text = separation(per_prompt, labels)
    assert text.startswith("τ paired over the 3 prompts")
    assert "2 of 3 pairs" in text and "eagle / ours (" in text
    assert "1 of 1 pairs" in separation(per_prompt, {"eagle/chain": "a",
                                                     "independent/chain": "b"})  # fmt: skip
    per_prompt["ours/chain"] = {"p0": COUNTS["ours/chain"][0]}
    assert "need 2 common prompts" in separation(per_prompt, labels)


@pytest.mark.parametrize("render, stem", [(render_table_2, "moa_table_2"),
                                          (render_table_5, "moa_table_5"),
                                          (render_table_9, "moa_table_9"),
                                          (render_table_10, "moa_table_10")])  # fmt: skip
def test_renderers_write_csv_and_markdown(render, stem, heads, tmp_path) -> None:
    summary = tmp_path / "bench.csv"
    _summary().to_csv(summary, index=False)
    out = {"csv": str(tmp_path / f"{stem}.csv"), "md": str(tmp_path / f"{stem}.md")}
    render(ITEM, {"summary": [str(summary)], "runs": [heads],
                  "paper": [str(PAPER / f"{stem}.csv")]}, out)  # fmt: skip
    assert "(ours)" in Path(out["csv"]).read_text().splitlines()[0]
    assert "speedup over our greedy loop" in Path(out["md"]).read_text()


def _quality() -> pd.DataFrame:
    rows = []
    for method in ("greedy", "ours/tree", "ours/chain", "ours/tree/vocab2048", "hf_prompt_lookup"):
        for metric, n, score in (("humaneval", 2, 0.5), ("gsm8k", 4, 0.25), ("cnndm", 1, 0.3)):
            rows.append({"method": method, "metric": metric, "n": n, "score": score, "cut": 1,
                         "same_as_greedy": 1.0})  # fmt: skip
    return pd.DataFrame(rows)


def test_table_8_puts_greedy_on_the_vanilla_row_and_scales_to_percent(tmp_path) -> None:
    table = table_8(_quality(), ITEM, PAPER / "moa_table_8.csv").set_index("model")
    vanilla = table.loc["Llama3-8B-Instruct"]
    assert vanilla["decoding"] == "Vanilla decoding"
    assert vanilla["humaneval_pass1 (ours)"] == pytest.approx(50.0)
    assert vanilla["humaneval_pass1 (paper)"] == pytest.approx(62.5)
    assert vanilla["gsm8k_acc (ours)"] == pytest.approx(25.0) and vanilla["gsm8k_n"] == 4
    assert table.loc["Ours (TLI=0)", "cnndm_rougeL_f (ours)"] == pytest.approx(0.3)
    assert table.loc["Ours (TLI=0)", "cnndm_rougeL_f (paper)"] == pytest.approx(0.3070)
    assert "hf_prompt_lookup" in table.index  # ours only
    assert pd.isna(table.loc["Ours (TLI=3)", "gsm8k_acc (ours)"])  # the document's only
    assert len(table) == len(set(table.index))  # chain and sweep rows out: one row per method
    summary = tmp_path / "quality.csv"
    _quality().to_csv(summary, index=False)
    out = {"csv": str(tmp_path / "t8.csv"), "md": str(tmp_path / "t8.md")}
    render_table_8(ITEM, {"summary": [str(summary)], "paper": [str(PAPER / "moa_table_8.csv")]},
                   out)  # fmt: skip
    assert "ROUGE-L" in Path(out["md"]).read_text()


def test_the_vocabulary_sweep_orders_greedy_then_n_then_the_full_vocabulary(tmp_path) -> None:
    from kvspec.report.moa import render_vocab_sweep

    rows = _summary()
    for n, gain in ((2048, 1.1), (None, 0.6)):
        rows.loc[len(rows)] = {"set": "humaneval", "method": f"ours/tree/vocab{n or 'full'}",
                               "tok_s": 10 * gain, "accept_len": 2.0, "speedup": gain,
                               "exact_vs_greedy": 1.0}  # fmt: skip
    summary, runs = tmp_path / "bench.csv", tmp_path / "bench.json"
    rows.to_csv(summary, index=False)
    write_json(runs, {"records": [], "heads": {"ours": {"draft_vocab": 8192}}})
    item = {**ITEM, "ablation_set": "humaneval",
            "vocab_sweep": {"drafter": "ours", "sizes": [None, 2048]}}  # fmt: skip
    out = {"csv": str(tmp_path / "s.csv"), "md": str(tmp_path / "s.md")}
    render_vocab_sweep(item, {"summary": [str(summary)], "runs": [str(runs)]}, out)
    table = pd.read_csv(out["csv"], keep_default_na=False)
    assert list(table["drafting_vocab"].astype(str)) == ["", "2048", "8192", "full"]
    assert list(table["drafter"]) == ["greedy", *["Ours (TLI=0)"] * 3]
    assert table["speedup"].tolist() == pytest.approx([1.0, 1.1, 0.75, 0.6])
    assert "Not in the document" in Path(out["md"]).read_text()


def test_figure_4_throughput_against_greedy_at_each_batch_size(tmp_path) -> None:
    import json

    from kvspec.report.moa import render_figure_4

    def row(method: str, slots: int, seconds: float, drafted: int, accepted: int) -> dict:
        return {"method": method, "slots": slots, "requests": 4, "tokens": 40,
                "seconds": seconds, "tok_s": 40 / seconds, "steps": 10, "row_steps": 18,
                "row_drafts": 18, "drafted": drafted, "accepted": accepted,
                "draft_seconds": seconds / 4, "verify_seconds": seconds / 2,
                "same_as_alone": 4}  # fmt: skip

    rows = [row("greedy", 1, 4.0, 0, 0), row("eagle", 1, 2.0, 20, 5),
            row("greedy", 2, 2.0, 0, 0), row("eagle", 2, 4.0, 20, 10)]  # fmt: skip
    settings = {"bench": {"n": 4}, "new_tokens": 10, "chain_k": 4, "dtype": "float32"}
    path = tmp_path / "batching.json"
    path.write_text(json.dumps({"cpu": "x", "threads": 2, "settings": settings, "rows": rows}))
    out = {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf", "csv", "md")}
    render_figure_4({"labels": {"eagle": "EAGLE-2"}, "set": "humaneval"},
                    {"runs": [str(path)]}, out)  # fmt: skip
    table = pd.read_csv(out["csv"]).set_index(["method", "batch size"])
    assert table.loc[("EAGLE-2", 1), "vs greedy"] == 2.0
    assert table.loc[("EAGLE-2", 2), "vs greedy"] == 0.5
    assert table.loc[("EAGLE-2", 2), "accepted / drafted"] == 0.5
    assert pd.isna(table.loc[("greedy (no drafting)", 1), "accepted / drafted"])
    assert table.loc[("greedy (no drafting)", 1), "tokens per row step"] == 2.0
    assert Path(out["png"]).stat().st_size > 0
