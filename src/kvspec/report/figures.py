"""Figures: rendered to PNG and PDF with matplotlib (headless)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from kvspec.io import atomic_path  # noqa: E402


def save_figure(fig: plt.Figure, png: str | Path, pdf: str | Path) -> None:
    """Write `fig` as PNG (150 dpi) and PDF, each atomically, then close it."""
    for path in (png, pdf):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=150, bbox_inches="tight", format=Path(path).suffix[1:])
    plt.close(fig)


def loss_curves(curves: dict[str, pd.DataFrame], png: str | Path, pdf: str | Path) -> None:
    """Train and validation loss against tokens seen, one colour per model."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (name, df) in enumerate(curves.items()):
        colour = f"C{i}"
        ax.plot(df["tokens"], df["train_loss"], color=colour, alpha=0.5, label=f"{name} train")
        ax.plot(df["tokens"], df["val_loss"], color=colour, marker="o", ms=3, label=f"{name} val")
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("Pretraining of the stand-in models")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, png, pdf)
