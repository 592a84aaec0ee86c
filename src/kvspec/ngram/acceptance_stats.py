"""The thesis's acceptance tables from per-position rows (one row per output position).

Rows are written by `kvspec.ngram.acceptance.acceptance_rows`: prompt, pos, token, acceptance
(Σ min(p, q)), q_top1, q_mode, suffix_len, count, and since issue 12 p_top1, p_q_mode, hit.
Pure pandas: the report reads these without importing torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

MATCH_LENGTH_BINS = (0, 2, 4, 6, 8, 10, 12, 14, 16)
HIT_LENGTHS = (0, 4, 8, 16)


def acceptance_grid(
    rows: pd.DataFrame,
    bins: Sequence[int] = MATCH_LENGTH_BINS,
    thresholds: Sequence[float | None] = (None,),
) -> pd.DataFrame:
    """Mean acceptance (and n) per confidence threshold x minimum match length.

    A position counts toward min match length m if its matched suffix is at least m
    tokens long, and toward threshold t if its n-gram top-1 probability exceeds t
    (thesis Tables 4.1-4.3). Cells with no positions are NaN.
    """
    out = []
    for t in thresholds:
        kept = rows if t is None else rows[rows["q_top1"] > t]
        for m in bins:
            cell = kept[kept["suffix_len"] >= m]["acceptance"]
            out.append(
                {
                    "threshold": "all" if t is None else f">{t}",
                    "min_match": m,
                    "acceptance": float(cell.mean()) if len(cell) else float("nan"),
                    "n": len(cell),
                }
            )
    return pd.DataFrame(out)


def accepted_per_speculation(
    rows: pd.DataFrame, k: int, min_match: int = 0, confidence: float = 0.0
) -> dict[str, float]:
    """Mean drafts accepted per speculation (greedy), speculating only where the match is long.

    Rows are grouped by `prompt` and replayed in `pos` order: while drafts are accepted the
    drafter's context equals the output prefix, so draft j of a speculation is the n-gram
    mode at that position, and the first miss (or k hits) ends the speculation; the last
    output token is always the target's own. A speculation starts only at positions whose matched
    suffix has at least `min_match` tokens (elsewhere the target decodes one token alone),
    and stops at the first draft whose n-gram top-1 probability is below `confidence`.
    """
    total = n_specs = 0
    for _, group in rows.sort_values(["prompt", "pos"]).groupby("prompt", sort=False):
        hits = ((group["q_mode"] == group["token"]) & (group["q_top1"] >= confidence)).tolist()
        for a in _replay(hits, group["suffix_len"].tolist(), k, min_match):
            total, n_specs = total + a, n_specs + 1
    mean = total / n_specs if n_specs else float("nan")
    return {"accepted": mean, "speculations": n_specs}


def _replay(hits: list[bool], suffix_lens: list[int], k: int, min_match: int) -> list[int]:
    """Accepted drafts of each speculation along one greedy output."""
    accepted, pos, n = [], 0, len(hits)
    while pos < n:
        if suffix_lens[pos] < min_match:
            pos += 1
            continue
        a = 0
        while a < k and pos + a < n - 1 and hits[pos + a]:
            a += 1
        accepted.append(a)
        pos += a + 1
    return accepted


EXACT_LENGTH_EDGES = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32)


def by_exact_match_length(
    rows: pd.DataFrame, edges: Sequence[int] = EXACT_LENGTH_EDGES
) -> pd.DataFrame:
    """Per match-length bin [edge, next edge) (the last open-ended), not cumulative: positions,
    mean acceptance (Σ min(p, q)), n-gram top-1 q_top1, the target's own top-1 p_top1, the
    target's probability of the n-gram mode p_q_mode, and hit (mode = target's greedy token).

    Separates a confident target from a good n-gram: acceptance can be high because p is
    peaked on a token the n-gram also proposes (p_q_mode ≈ p_top1, hit ≈ 1), or low because
    the target is unsure (p_top1 low) however good the n-gram is.
    """
    cols = ["acceptance", "q_top1", "p_top1", "p_q_mode", "hit"]
    have = [c for c in cols if c in rows]
    labels = [
        f"{a}-{b - 1}" if b - a > 1 else f"{a}" for a, b in zip(edges, edges[1:], strict=False)
    ]
    labels.append(f">={edges[-1]}")
    bins = np.searchsorted(np.asarray(edges), rows["suffix_len"].to_numpy(), side="right") - 1
    out = []
    for i, label in enumerate(labels):
        cell = rows[bins == i]
        means = {c: float(cell[c].mean()) if len(cell) else float("nan") for c in have}
        out.append({"match_len": label, "positions": len(cell), **means})
    return pd.DataFrame(out)


def hit_rate_table(rows: pd.DataFrame, lengths: Sequence[int] = HIT_LENGTHS) -> dict[int, float]:
    """Share of positions whose matched suffix has at least each length (thesis Table 4.6)."""
    n = len(rows)
    return {m: float((rows["suffix_len"] >= m).sum() / n) if n else 0.0 for m in lengths}


def acceptance_surface(rows: pd.DataFrame, max_len: int = 32, freq_bins: int = 10) -> pd.DataFrame:
    """Mean acceptance per (match length, log10 match count) cell (thesis Figure 4.1).

    Match lengths above `max_len` are clipped to it; counts are binned on a log10 scale
    into `freq_bins` equal-width bins between the smallest and largest count.
    """
    if rows.empty:
        return pd.DataFrame(columns=["match_len", "log10_count", "acceptance", "n"])
    length = rows["suffix_len"].clip(upper=max_len)
    logc = np.log10(rows["count"].clip(lower=1).astype(float))
    edges = np.linspace(logc.min(), logc.max() + 1e-9, freq_bins + 1)
    centre = (edges[:-1] + edges[1:]) / 2
    which = np.clip(np.digitize(logc, edges) - 1, 0, freq_bins - 1)
    cells = pd.DataFrame({"match_len": length, "bin": which, "acceptance": rows["acceptance"]})
    grid = cells.groupby(["match_len", "bin"])["acceptance"].agg(["mean", "size"]).reset_index()
    return pd.DataFrame(
        {
            "match_len": grid["match_len"].astype(int),
            "log10_count": centre[grid["bin"].to_numpy()],
            "acceptance": grid["mean"],
            "n": grid["size"].astype(int),
        }
    )
