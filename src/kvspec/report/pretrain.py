"""Report items of the pretraining stage: loss curves and a summary table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kvspec.io import read_json
from kvspec.report.figures import loss_curves
from kvspec.report.tables import write_table


def summary_frame(stats: dict[str, dict]) -> pd.DataFrame:
    """One row per model: size, tokens seen, final losses, training time."""
    rows = [
        {
            "model": name,
            "architecture": s["family"],
            "parameters_M": round(s["parameters"] / 1e6, 2),
            "steps": s["steps"],
            "tokens_seen": s["tokens_seen"],
            "final_train_loss": round(s["final_train_loss"], 4),
            "final_val_loss": round(s["final_val_loss"], 4),
            "train_seconds": round(s["train_seconds_this_run"], 1),
        }
        for name, s in stats.items()
    ]
    return pd.DataFrame(rows)


def render(item: dict[str, Any], inputs: dict[str, list[str]], out: dict[str, str]) -> None:
    """Write the loss figure (png/pdf) and the summary table (csv/md) of `item["rows"]`
    ({model, curve, stats}); `inputs["tokens"]` is the corpus token statistics."""
    curves = {r["model"]: pd.read_csv(r["curve"]) for r in item["rows"]}
    loss_curves(curves, out["png"], out["pdf"])
    stats = {r["model"]: read_json(r["stats"]) for r in item["rows"]}
    tok = read_json(inputs["tokens"][0])
    notes = [
        f"Corpus: {tok['documents']} documents, {tok['tokens']} tokens "
        f"({tok['train_tokens']} train / {tok['val_tokens']} held out), "
        f"{tok['chars_per_token']:.2f} characters per token.",
        "Measured in this run; the documents did not pretrain models, so there are no "
        "paper numbers for this table.",
    ]
    write_table(
        summary_frame(stats), out["csv"], out["md"], "Pretraining of the stand-in models", notes
    )
