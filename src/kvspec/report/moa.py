"""Document 002's Tables 2, 5 and 10: our drafters' speedup and acceptance length beside the
document's (Llama-3-8B-Instruct with 250M-parameter drafters; ours: the mini target with heads
sized by its own layers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.spec import _paper, save
from kvspec.report.tables import side_by_side

# our method suffix -> the document's decoding column (Table 10)
DECODING = {"tree": "EAGLE-2", "chain": "chain"}
SIZE_NOTE = (
    "trainable_size (ours): the head's trainable parameters and, in brackets, their ratio to "
    "one decoder layer of our target (the document's 250M heads are ~1.1 layers of "
    "Llama-3-8B); the document's total sizes are kept in its rows only."
)


def _sizes(runs: str, labels: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """label -> {trainable_size} from the heads' training stats the decoding job recorded."""
    out = {}
    for name, stats in read_json(runs)["heads"].items():
        out[labels.get(name, name)] = {
            "trainable_size": f"{stats['trainable_parameters'] / 1e6:.2f}M "
            f"({stats['trainable_per_decoder_layer']:.2f} layers)",
        }
    return out


def _rows(summary: pd.DataFrame, labels: Mapping[str, str], mode: str) -> pd.DataFrame:
    """Our neural rows of one decoding mode ('chain' or 'tree'), with `drafter` labels."""
    rows = summary[summary["method"].str.endswith(f"/{mode}")].copy()
    rows["drafter"] = [labels.get(m.split("/")[0], m.split("/")[0]) for m in rows["method"]]
    return rows


def _first_match_only(table: pd.DataFrame, keys: list[str], ours: list[str]) -> pd.DataFrame:
    """A row the paper lists twice (e.g. Independent at two sizes) gets our numbers (columns
    `ours`) on its first occurrence only."""
    table.loc[table.duplicated(subset=keys), ours] = float("nan")
    return table


def table_2(summary: pd.DataFrame, item: Mapping[str, Any], runs: str,
            paper_csv: str) -> pd.DataFrame:  # fmt: skip
    """Speedup and τ per prompt set (tree drafting) and their means, per drafter."""
    labels, sets = item["labels"], list(item["sets"])
    rows = _rows(summary, labels, "tree" if item["tree"] else "chain")
    wide = rows.pivot_table(index="drafter", columns="set", values=["speedup", "accept_len"])
    ours = pd.DataFrame({"drafter": wide.index})
    for s in sets:
        ours[f"{s}_speedup"] = wide["speedup"][s].to_numpy() if s in wide["speedup"] else None
        ours[f"{s}_tau"] = wide["accept_len"][s].to_numpy() if s in wide["accept_len"] else None
    ours["mean_speedup"] = ours[[f"{s}_speedup" for s in sets]].mean(axis=1)
    ours["mean_tau"] = ours[[f"{s}_tau" for s in sets]].mean(axis=1)
    ours = _with_sizes(ours, runs, labels)
    metrics = ["trainable_size", *[f"{s}_{m}" for s in [*sets, "mean"] for m in ("speedup", "tau")]]
    table = side_by_side(ours, _paper(paper_csv), ["drafter"], metrics)
    return _first_match_only(table, ["drafter"], [f"{m} (ours)" for m in metrics])


def table_humaneval(summary: pd.DataFrame, item: Mapping[str, Any], runs: str,
                    paper_csv: str, mode: str, with_decoding: bool) -> pd.DataFrame:  # fmt: skip
    """Tables 5 (chain) and 10 (tree): HumanEval tokens/s and τ per drafter (+ greedy)."""
    labels = {k: ("EAGLE" if v == "EAGLE-2" else v) for k, v in item["labels"].items()}
    human = summary[summary["set"] == "humaneval"]
    rows = _rows(human, labels, mode)
    ours = pd.DataFrame({"drafter": rows["drafter"], "tokens_per_s": rows["tok_s"],
                         "accept_len": rows["accept_len"], "speedup": rows["speedup"],
                         "exact_vs_greedy": rows["exact_vs_greedy"]})  # fmt: skip
    keys = ["drafter"]
    if with_decoding:
        ours["decoding"] = DECODING[mode]
        base = human[human["method"] == "greedy"]
        greedy = pd.DataFrame({"drafter": ["Baseline"], "decoding": ["Vanilla"],
                               "tokens_per_s": base["tok_s"].to_numpy(), "accept_len": [1.0],
                               "speedup": [1.0], "exact_vs_greedy": [1.0]})  # fmt: skip
        ours = pd.concat([ours, greedy])
        keys = ["drafter", "decoding"]
    ours = _with_sizes(ours, runs, labels)
    metrics = ["trainable_size", "tokens_per_s", "accept_len"]
    table = side_by_side(ours, _paper(paper_csv), keys, metrics)
    extra = ours[[*keys, "speedup", "exact_vs_greedy"]]
    ours_cols = [*(f"{m} (ours)" for m in metrics), "speedup", "exact_vs_greedy"]
    return _first_match_only(table.merge(extra, on=keys, how="left"), keys, ours_cols)


def _with_sizes(ours: pd.DataFrame, runs: str, labels: Mapping[str, str]) -> pd.DataFrame:
    sizes = _sizes(runs, labels)
    ours["trainable_size"] = [sizes.get(d, {}).get("trainable_size", "") for d in ours["drafter"]]
    return ours


def _notes(item: Mapping[str, Any], extra: list[str]) -> list[str]:
    sets = ", ".join(f"{k} = {v}" for k, v in item["sets"].items())
    return [
        "Ours: batch size 1, every method on the same prompts in one process (warm-up "
        "discarded); speedup over our greedy loop; tau = tokens per target forward.",
        f"Prompt sets: {sets}.",
        f"Chain drafting: at most {item['chain_k']} tokens; tree drafting: EAGLE-2's dynamic "
        f"tree {item['tree']}.",
        SIZE_NOTE,
        *extra,
    ]


def render_table_2(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    summary = pd.read_csv(inputs["summary"][0])
    table = table_2(summary, item, inputs["runs"][0], inputs["paper"][0])
    save(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "Rows without (ours) numbers are the document's drafters we do not train (TLI = 3, "
        "the official EAGLE-2 weights, a second Independent size)."]))  # fmt: skip


def render_table_5(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                   out: Mapping[str, str]) -> None:  # fmt: skip
    summary = pd.read_csv(inputs["summary"][0])
    table = table_humaneval(summary, item, inputs["runs"][0], inputs["paper"][0], "chain", False)
    save(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "HumanEval prompts of the HumanEval set, chain drafting. Not reproduced: the "
        "document's ablation variants (-LSA, o_1...o_t inputs, EAGLE with more parameters or "
        "layers)."]))  # fmt: skip


def render_table_10(item: Mapping[str, Any], inputs: Mapping[str, list[str]],
                    out: Mapping[str, str]) -> None:  # fmt: skip
    summary = pd.read_csv(inputs["summary"][0])
    table = table_humaneval(summary, item, inputs["runs"][0], inputs["paper"][0], "tree", True)
    save(table, out["csv"], out["md"], inputs["paper"][0], _notes(item, [
        "The HumanEval set's prompts (not the full 164 problems), tree drafting; Baseline = "
        "our greedy loop. Not reproduced: Ouroboros."]))  # fmt: skip
