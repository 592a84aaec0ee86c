"""Draft models: how often each is accepted and what one of its forwards costs relative to
its target's, with the distillation that made it (measured here; no paper numbers)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.tables import write_table


def quality_frame(item: dict[str, Any]) -> pd.DataFrame:
    """One row per draft, prompt set and confidence cut-off: size, distillation, acceptance,
    drafted tokens per step, cost ratios."""
    rows = []
    for r in item["rows"]:
        q = read_json(r["quality"])
        stats = read_json(r["stats"]) if r["stats"] else {}
        for name, by_cut in q["sets"].items():
            label = item["labels"].get(name, name)
            rows += [{**_draft_columns(r, q, stats, label), **_run_columns(q, acc)}
                     for acc in by_cut.values()]  # fmt: skip
    return pd.DataFrame(rows)


def _draft_columns(
    r: dict[str, Any], q: dict[str, Any], stats: dict[str, Any], label: str
) -> dict[str, Any]:
    """The draft's size and distillation (the same on each of its rows)."""
    final = stats.get("final", {})
    calibration = stats.get("calibration") or {}
    return {
        "draft": r["model"],
        "target": r["target"],
        "set": label,
        "draft_params_M": round(q["parameters"]["draft"] / 1e6, 2),
        "target_params_M": round(q["parameters"]["target"] / 1e6, 2),
        "draft_vocab": stats.get("vocabulary"),
        "distil_seconds": _round(stats.get("train_seconds_this_run"), 1),
        "teacher_seconds": _round(stats.get("teacher_seconds"), 1),
        "val_match": _round(final.get("val_match"), 3),
        "val_alpha": _round(final.get("val_alpha"), 3),
        "temperature": calibration.get("temperature", 1.0),
        "val_alpha_at_1": _round(calibration.get("uncalibrated", final).get("val_alpha"), 3),
    }


def _run_columns(q: dict[str, Any], acc: dict[str, Any]) -> dict[str, Any]:
    """One set at one cut-off: acceptance, drafted tokens per step, costs, prediction."""
    k, costs = q["k"], q["costs"]
    return {
        "cutoff": acc["cutoff"],
        "drafted_per_step": round(acc["drafted"] / max(1, acc["steps"]), 2),
        "accept_len": round(acc["accept_len"], 3),
        "acceptance_%": round(100 * acc["acceptance"], 1),
        "cost_ratio_q1": round(costs["1"]["ratio"], 3),
        f"cost_ratio_q{k + 1}": round(costs[str(k + 1)]["ratio"], 3),
        "predicted_speedup": round(acc["predicted_speedup"], 2),
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def render(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    """The draft-model table (csv/md) of `item["rows"]` ({model, target, quality, stats})."""
    df = quality_frame(item)
    first = read_json(item["rows"][0]["quality"])
    notes = [
        f"Greedy verification, draft depth k = {first['k']}; accept_len = tokens per target "
        "forward (bonus token included); acceptance = accepted / drafted tokens.",
        "cutoff: a draft ends after a token the draft gives less than this probability "
        "(0: k tokens every step); drafted_per_step = drafted tokens / target forwards.",
        f"cost_ratio_qN = draft / target time of one forward feeding N tokens after a "
        f"{first['cache_len']}-token cache (medians, interleaved, same process).",
        "predicted_speedup = tokens·t_T(1) / Σ over steps (d·t_D(1) + t_T(d+1)), d = tokens "
        "the step drafted (k·t_D(1) + t_T(k+1) per step without a cut-off).",
        "val_match = share of held-out training-sequence tokens where the draft's argmax is "
        "the teacher's greedy token; val_alpha = Σ min(p_T, q) over the teacher's top-k "
        "tokens there (a lower bound of speculative sampling's α at T = 1); temperature = the "
        "draft temperature fit on its training responses and folded into its readout "
        "(1: none), val_alpha_at_1 = val_alpha before it; draft_vocab = "
        "tokens the draft's readout covers; distil_seconds / teacher_seconds = wall time of "
        "the distillation loop / of this job's teacher pass (a read when another draft's "
        "pass is reused).",
        "Measured in this run; the documents give no numbers for these drafts.",
    ]
    write_table(df, out["csv"], out["md"], "Draft models: acceptance and cost", notes)
