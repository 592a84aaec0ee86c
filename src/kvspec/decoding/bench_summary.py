"""Summaries of timed decoding runs: tokens/s, accepted length, speedup over the baseline,
where the time goes, exactness against greedy decoding, and how much the machine drifted."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch


def baseline_spread(records: Sequence[Mapping[str, Any]], baseline: str = "greedy") -> float:
    """(max - min) / median of the baseline's tokens/s over its interleaved repeats.

    Repeat r's tokens/s is all its prompts' tokens over the sum of their repeat-r times;
    NaN with fewer than two repeats.
    """
    rows = [r for r in records if r["method"] == baseline and r.get("baseline_seconds")]
    n = min((len(r["baseline_seconds"]) for r in rows), default=0)
    if n < 2:
        return float("nan")
    tokens = sum(len(r["tokens"]) for r in rows)
    rates = [tokens / sum(r["baseline_seconds"][i] for r in rows) for i in range(n)]
    return (max(rates) - min(rates)) / statistics.median(rates)


def divergence(
    target: torch.nn.Module, prompt: list[int], reference: list[int], tokens: list[int]
) -> dict[str, Any]:
    """Where `tokens` first differs from the greedy `reference`, and the target's top-2 logit
    margin there (a near-tie means float rounding, not a decoding bug, decided it)."""
    n = min(len(reference), len(tokens))
    first = next((i for i in range(n) if reference[i] != tokens[i]), None)
    if first is None and len(reference) == len(tokens):
        return {"exact": True, "first_divergence": None, "tie_margin": None}
    first = n if first is None else first
    with torch.inference_mode():
        ids = torch.tensor([prompt + reference[:first]], dtype=torch.long, device=target.device)
        logits = target(input_ids=ids).logits[0, -1].double()  # (V,)
    top2 = torch.topk(logits, 2).values
    return {"exact": False, "first_divergence": first, "tie_margin": float(top2[0] - top2[1])}


def _share(flags: pd.Series) -> float:
    """Share of True among the non-missing flags (NaN when none)."""
    known = flags.dropna()
    return float(known.astype(float).mean()) if len(known) else float("nan")


def summarize(
    records: Sequence[Mapping[str, Any]], *, unstable_spread: float, baseline: str = "greedy"
) -> pd.DataFrame:
    """Per method: tokens/s, accepted length, speedup over `baseline`, time split, exactness,
    draft ms per step (median and p90); per set: the baseline's spread over its repeats,
    `baseline_unstable` when that exceeds `unstable_spread`, and the highest load average."""
    df = pd.DataFrame(records)
    rows = []
    for name, g in df.groupby("method", sort=False):
        tokens = int(g["tokens"].map(len).sum())
        seconds = float(g["seconds"].sum())
        draft, verify = float(g["draft_seconds"].sum()), float(g["verify_seconds"].sum())
        step_times = [t for ts in g["draft_step_seconds"] for t in ts]
        rows.append(
            {
                "method": name,
                "prompts": len(g),
                "tokens": tokens,
                "seconds": seconds,
                "tok_s": tokens / seconds if seconds else float("nan"),
                "accept_len": tokens / g["forwards"].sum() if g["forwards"].sum() else float("nan"),
                "draft_share": draft / seconds if seconds else float("nan"),
                "verify_share": verify / seconds if seconds else float("nan"),
                "overhead_share": (seconds - draft - verify) / seconds
                if draft + verify
                else float("nan"),
                "draft_ms_median": 1e3 * statistics.median(step_times)
                if step_times
                else float("nan"),
                "draft_ms_p90": 1e3 * float(np.percentile(step_times, 90))
                if step_times
                else float("nan"),
                "exact_vs_greedy": _share(g["exact"]) if "exact" in g else float("nan"),
            }
        )
    out = pd.DataFrame(rows)
    base = out.loc[out["method"] == baseline, "tok_s"]
    out["speedup"] = out["tok_s"] / float(base.iloc[0]) if len(base) else float("nan")
    out["baseline_spread"] = baseline_spread(records, baseline)
    out["baseline_unstable"] = bool(out["baseline_spread"].iloc[0] > unstable_spread)
    out["load1_max"] = float(df["load1"].max()) if "load1" in df else float("nan")
    return out


def mark_divergence(
    target: torch.nn.Module,
    records: list[dict[str, Any]],
    prompts: Sequence[tuple[str, list[int]]],
) -> None:
    """Add `exact`, `first_divergence`, `tie_margin` to greedy-mode records (vs "greedy")."""
    ids = dict(prompts)
    reference = {r["prompt"]: r["tokens"] for r in records if r["method"] == "greedy"}
    for r in records:
        if "@" in r["method"]:
            r.update(exact=None, first_divergence=None, tie_margin=None)
            continue
        r.update(divergence(target, ids[r["prompt"]], reference[r["prompt"]], r["tokens"]))
