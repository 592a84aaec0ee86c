"""Report items of the pretraining stage: loss curves and a summary table."""

from __future__ import annotations

from pathlib import Path

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


def render(
    models: list[str],
    curve_paths: list[str],
    stats_paths: list[str],
    token_stats_path: str,
    out: dict[str, str | Path],
) -> None:
    """Write the loss figure (png/pdf) and the summary table (csv/md)."""
    curves = {m: pd.read_csv(p) for m, p in zip(models, curve_paths, strict=True)}
    loss_curves(curves, out["png"], out["pdf"])
    stats = {m: read_json(p) for m, p in zip(models, stats_paths, strict=True)}
    tok = read_json(token_stats_path)
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
